"""PyTorch trainer: a real step, DDP over 2 gloo processes, bfloat16 autocast, the CLI path."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import tiny_config

from compare import schema
from compare.cli import cli
from compare.experiment import datasets
from torch_impl import train as torch_train


def _trainer(config):
    return torch_train.Trainer(config, datasets.config_dataset(config),
                               torch_train.select_device(config))


def test_one_step_applies_the_pytorch_form_sgd_update(tmp_path):
    config = tiny_config(tmp_path, weight_decay=0.01)
    trainer = _trainer(config)
    batch = next(trainer.batches(0))
    before = trainer.weights()
    _, loss_before, grads = trainer.gradients(batch)
    trainer.reset_weights()
    loss = trainer.train_step(batch, 0.1)
    after = trainer.weights()
    assert float(loss) == pytest.approx(loss_before, rel=1e-6)
    for name, g in grads.items():  # first step: v = g + wd * w, w -= lr * v
        np.testing.assert_allclose(after[name], before[name] - 0.1 * (g + 0.01 * before[name]),
                                   atol=1e-6)
    for _ in range(15):
        trainer.train_step(batch, 0.05)
    assert trainer.gradients(batch)[1] < 0.75 * loss_before  # it learns the batch


def test_bfloat16_autocast_runs_on_cpu(tmp_path):
    config = tiny_config(tmp_path, precision="mixed")
    trainer = _trainer(config)
    assert trainer.numerics["policy"] == "autocast bfloat16"
    assert not trainer.scaler.is_enabled()  # GradScaler only for float16
    batch = next(trainer.batches(0))
    fp32 = _trainer(tiny_config(tmp_path)).gradients(batch)[1]
    loss = float(trainer.train_step(batch, 0.01))
    assert np.isfinite(loss) and loss == pytest.approx(fp32, abs=0.05)
    assert trainer.manifest()["precision_policy"] == "autocast bfloat16"


def test_dataloader_workers_deliver_the_same_batches(tmp_path):
    from compare.experiment.config import PipelineConfig
    inline = _trainer(tiny_config(tmp_path))
    workers = _trainer(tiny_config(tmp_path, pipeline=PipelineConfig(workers=2)))
    for a, b in zip(inline.batches(1), workers.batches(1)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _state(path):
    return torch.load(path, weights_only=True)["state_dict"]


def test_ddp_two_gloo_processes_match_one_process_on_the_same_global_batch(tmp_path):
    """Averaged gradients over 2 ranks = the gradient of the global batch: after every step of
    an epoch the weights agree, and so do the recorded global-batch losses."""
    one = tiny_config(tmp_path, out=str(tmp_path / "one"))
    two = one.replace(devices=2, out=str(tmp_path / "two"))
    dataset = datasets.config_dataset(one)
    assert torch_train.train(one, dataset) == 0
    assert torch_train.train(two, dataset) == 0
    a, b = _state(tmp_path / "one" / "model.pt"), _state(tmp_path / "two" / "model.pt")
    for name in a:
        np.testing.assert_allclose(b[name].numpy(), a[name].numpy(), atol=2e-6, err_msg=name)
    ra, rb = (schema.read_result(tmp_path / d / "result.json") for d in ("one", "two"))
    assert (rb["summary"]["replicas"] == 2
            and rb["fairness"]["distribution"] == "DistributedDataParallel (gloo)")
    assert rb["fairness"]["per_replica_batch"] == 16
    assert rb["epochs"][0]["train_loss"] == pytest.approx(ra["epochs"][0]["train_loss"], rel=1e-5)


def test_cli_run_torch_writes_a_valid_result(tmp_path):
    out = tmp_path / "cli"
    outcome = CliRunner().invoke(cli, ["run", "--framework", "torch", "--dataset", "synthetic",
                                       "--synthetic-size", "320", "--epochs", "2",
                                       "--precision", "fp32", "--workers", "0", "--out", str(out),
                                       "--quiet"])
    assert outcome.exit_code == 0, outcome.output
    result = schema.read_result(out / "result.json")
    summary = result["summary"]
    assert summary["status"] == "completed" and len(result["epochs"]) == 2
    assert 0.0 <= summary["final_test_accuracy"] <= 1.0
    assert summary["steady_step_time_ms"]["median"] > 0 and summary["images_per_s"] > 0
    assert (summary["peak_device_memory_bytes"] is None
            and "CPU" in summary["peak_device_memory_note"])
    assert result["fairness"]["init_source"].startswith("compare.init")
    steps = (out / "steps.csv").read_text().splitlines()
    assert steps[0] == "global_step,epoch,lr,loss" and len(steps) == 1 + 2 * 10
    assert ((out / "model.pt").exists()
            and json.loads((out / "config.json").read_text())["framework"] == "torch")


def test_the_device_pipeline_trains_two_ddp_processes_as_one(tmp_path):
    """--devices 2 --pipeline device: each gloo process holds the training set on its own
    device and gathers its half of every global batch there; the weights after an epoch are
    the one-process loader run's."""
    from compare.experiment.config import PipelineConfig
    one = tiny_config(tmp_path, out=str(tmp_path / "one"))
    two = one.replace(devices=2, pipeline=PipelineConfig.preset("device"),
                      out=str(tmp_path / "two"))
    dataset = datasets.config_dataset(one)
    assert torch_train.train(one, dataset) == 0
    assert torch_train.train(two, dataset) == 0
    a, b = _state(tmp_path / "one" / "model.pt"), _state(tmp_path / "two" / "model.pt")
    for name in a:
        np.testing.assert_allclose(b[name].numpy(), a[name].numpy(), atol=2e-6, err_msg=name)
    manifest = schema.read_result(tmp_path / "two" / "result.json")["fairness"]
    assert manifest["pipeline"]["kind"] == "device" and manifest["replicas"] == 2
