"""Tables printed off a terminal (piped, redirected) keep every cell whole."""

from __future__ import annotations

from click.testing import CliRunner

from compare.cli import models as models_command
from compare.experiment import networks


def test_piped_models_table_keeps_every_name_whole(monkeypatch):
    """`cnncompare models | grep mobilenetv2` found nothing: rich fitted the tables to 80
    columns and cut 8 cells ("mobilenet…", "TensorFlo…"). Piped, every cell prints whole."""
    rows = [{"model": name, "parameters": 2_296_922,
             "parameters_built": {"tf": 2_296_922, "torch": 2_296_922}, "errors": {},
             "train_gflops_per_image": 0.283,
             "flops_by_kind": {"conv": 0.6, "depthwise conv": 0.3, "dense": 0.1},
             "recipe": {"batch_size": 128, "lr": 0.1, "schedule": "onecycle",
                        "weight_decay": 5e-4, "epochs": 30, "augment": True,
                        "target_accuracy": 0.94},
             "published": "94.43% (kuangliu/pytorch-cifar, README)",
             "source": "https://github.com/kuangliu/pytorch-cifar/blob/master/models/"
                       "mobilenetv2.py"} for name in networks.MODELS]
    monkeypatch.setattr(models_command, "catalog", lambda: rows)
    found = CliRunner().invoke(models_command.models, [])
    assert found.exit_code == 0, found.output
    assert "…" not in found.output
    lines = found.output.splitlines()
    for name in networks.MODELS:
        assert any(f" {name} " in line and "TensorFlow" not in line for line in lines), name
    assert "TensorFlow/Keras" in found.output and "depthwise conv 30%" in found.output
    assert rows[0]["source"] in found.output and rows[0]["published"] in found.output
