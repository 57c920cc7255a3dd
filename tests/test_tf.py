"""TensorFlow/Keras trainer: a real step, MirroredStrategy over 2 logical CPUs, bfloat16, the CLI
path."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import tiny_config

from compare import schema
from compare.cli import cli
from compare.experiment import datasets


def _trainer(tf_train, config):
    return tf_train.Trainer(config, datasets.config_dataset(config), tf_train.select_device(config))


def test_one_step_applies_the_pytorch_form_sgd_update(tmp_path, tf_two_cpus):
    config = tiny_config(tmp_path, weight_decay=0.01, device="cpu")
    trainer = _trainer(tf_two_cpus, config)
    batch = next(iter(trainer.batches(0)))
    before = trainer.weights()
    _, loss_before, grads = trainer.gradients(batch)
    trainer.reset_weights()
    loss = trainer.train_step(batch, 0.1)
    after = trainer.weights()
    assert float(loss) == pytest.approx(loss_before, rel=1e-5)
    for name, g in grads.items():  # first step: v = g + wd * w, w -= lr * v
        np.testing.assert_allclose(after[name], before[name] - 0.1 * (g + 0.01 * before[name]),
                                   atol=1e-6)
    for _ in range(15):
        trainer.train_step(batch, 0.05)
    assert trainer.gradients(batch)[1] < 0.75 * loss_before  # it learns the batch


def test_mirrored_strategy_on_two_logical_cpus_matches_one_device(tmp_path, tf_two_cpus):
    """Loss scaled by the global batch and summed over replicas = the global-batch mean:
    after an epoch of steps the weights agree, and so does every step's loss."""
    one = tiny_config(tmp_path, device="cpu")
    two = one.replace(devices=2)
    a, b = _trainer(tf_two_cpus, one), _trainer(tf_two_cpus, two)
    assert a.replicas == 1 and b.replicas == 2
    losses_a, losses_b = [], []
    for batch_a, batch_b in zip(a.batches(0), b.batches(0)):
        losses_a.append(float(a.train_step(batch_a, 0.05)))
        losses_b.append(float(b.train_step(batch_b, 0.05)))
    assert len(losses_a) == 8
    np.testing.assert_allclose(losses_b, losses_a, rtol=1e-5)
    wa, wb = a.weights(), b.weights()
    for name in wa:
        np.testing.assert_allclose(wb[name], wa[name], atol=2e-6, err_msg=name)


def test_mixed_bfloat16_policy_runs_on_cpu(tmp_path, tf_two_cpus):
    config = tiny_config(tmp_path, precision="mixed", device="cpu")
    trainer = _trainer(tf_two_cpus, config)
    try:
        assert trainer.numerics["policy"] == "mixed_bfloat16"
        assert trainer.model.get_layer("conv1").compute_dtype == "bfloat16"
        assert trainer.model.output.dtype == "float32"  # logits cast back for the loss
        assert not trainer.numerics["loss_scaling"]  # loss scaling only for float16
        batch = next(iter(trainer.batches(0)))
        loss = float(trainer.train_step(batch, 0.01))
        assert np.isfinite(loss) and loss == pytest.approx(2.30, abs=0.1)
    finally:
        import keras
        keras.mixed_precision.set_global_policy("float32")


def test_xla_switch_compiles_and_trains(tmp_path, tf_two_cpus):
    plain = _trainer(tf_two_cpus, tiny_config(tmp_path, device="cpu"))
    xla = _trainer(tf_two_cpus, tiny_config(tmp_path, device="cpu", compile=True))
    batch = next(iter(plain.batches(0)))
    assert float(xla.train_step(batch, 0.05)) == pytest.approx(float(plain.train_step(batch, 0.05)),
                                                               rel=1e-4)
    assert "XLA" in xla.manifest()["compile"]


def test_cli_run_tf_writes_a_valid_result(tmp_path):
    out = tmp_path / "cli"
    outcome = CliRunner().invoke(cli, ["run", "--framework", "tf", "--dataset", "synthetic",
                                       "--synthetic-size", "320", "--epochs", "2",
                                       "--precision", "fp32", "--out", str(out), "--quiet"])
    assert outcome.exit_code == 0, outcome.output
    result = schema.read_result(out / "result.json")
    summary = result["summary"]
    assert summary["status"] == "completed" and len(result["epochs"]) == 2
    assert 0.0 <= summary["final_test_accuracy"] <= 1.0 and summary["images_per_s"] > 0
    assert result["fairness"]["precision_policy"] == "float32"
    assert result["fairness"]["bn_momentum"] == {"torch_convention": 0.1, "as_set": 0.9}
    assert (out / "model.keras").exists() and (out / "windows.csv").exists()
