"""The GPU paths, on a real GPU (`pytest -m gpu`); every test here skips without one.

Each test proves one claim of docs/gpu.md's claims table and quotes it first in its
docstring (tests/test_claims.py checks that every claim has a test). Tests are named
test_torch_*, test_tf_* or test_both_*, so the GPU battery can run one framework's part.

PyTorch runs in this process. TensorFlow runs in subprocesses (tests/gpu_tf_scenarios.py, or
the CLI): the test process hides the GPUs from TensorFlow to split the CPU for the
MirroredStrategy tests. Either framework may be missing (a GPU machine may have only
PyTorch): its tests skip.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from on_gpu import gpu_config, tf_run, tf_scenario, torch_trainer

from compare import schema
from compare.experiment import datasets

pytestmark = pytest.mark.gpu


# ---------------------------------------------------------------- mixed precision, loss scaling

def test_torch_float16_loss_scaling_skips_and_rescales(tmp_path, torch_gpu):
    """Claim: Mixed precision on a GPU is float16 with dynamic loss scaling in both
    frameworks: an overflow skips the step and halves the scale, finite steps double it."""
    import torch
    config = gpu_config(tmp_path, precision="mixed", loss_scale_initial=2.0 ** 24,
                         loss_scale_growth_interval=3, synthetic_train_size=1024)
    trainer = torch_trainer(torch_gpu, config)
    assert trainer.manifest()["precision_policy"] == "autocast float16 + GradScaler"
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    scales, losses = [], []
    for i, batch in enumerate(trainer.batches(0)):
        losses.append(float(trainer.train_step(batch, 0.01)))
        scales.append(trainer.scaler.get_scale())
        if i == 0:  # 2**24 overflows float16's gradients: the step was skipped
            after = trainer.model.state_dict()
            assert all(torch.equal(before[k], after[k]) for k in before
                       if not k.endswith(("running_mean", "running_var", "num_batches_tracked")))
    assert scales[0] == 2.0 ** 23  # halved on the overflow
    assert min(scales) < 2.0 ** 20 and any(b == 2 * a for a, b in zip(scales, scales[1:]))
    assert all(math.isfinite(v) for v in losses)


def test_tf_float16_loss_scaling_skips_and_rescales(tmp_path, tf_gpus):
    """Claim: Mixed precision on a GPU is float16 with dynamic loss scaling in both
    frameworks: an overflow skips the step and halves the scale, finite steps double it."""
    found = tf_scenario("loss_scaling", tmp_path)
    scales = found["scales"]  # read from the optimizer at each step, not from the config
    assert found["skipped_first"] and scales[0] == 2.0 ** 23
    assert min(scales) < 2.0 ** 20 and any(b == 2 * a for a, b in zip(scales, scales[1:]))
    assert all(math.isfinite(v) for v in found["losses"])


# ---------------------------------------------------------------- distribution

def test_tf_mirrored_strategy_over_every_gpu(tmp_path, tf_gpus):
    """Claim: MirroredStrategy and DDP train over every GPU present.

    The wrapper is asked for: on one GPU `auto` trains without it."""
    result = tf_run(tmp_path, "mirrored", "--devices", str(len(tf_gpus)), "--batch-size",
                     str(32 * len(tf_gpus)), "--epochs", "1", "--precision", "mixed",
                     "--strategy", "mirrored")
    assert result["fairness"]["replicas"] == len(tf_gpus)
    assert result["fairness"]["distribution"].startswith("MirroredStrategy over /gpu:0")


def _split_trains_as_whole(torch_gpu, whole, split) -> None:
    """Four steps of the split model give the unsplit one's losses (cuDNN may pick other
    algorithms: within 1e-3)."""
    losses = []
    for config in (whole, split):
        t = torch_trainer(torch_gpu, config)
        batches = t.batches(0)
        losses.append(t.read_steps([t.train_steps(batches, [0.05]) for _ in range(4)])[0])
    assert max(abs(a - b) / abs(b) for a, b in zip(*losses)) <= 1e-3


def test_torch_model_parallel_puts_each_stage_on_its_gpu(tmp_path, torch_gpu):
    """Claim: --parallel model places each stage on its own GPU in both frameworks, and
    trains the unsplit network's steps."""
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here: model parallelism over GPUs needs two or more")
    whole = gpu_config(tmp_path, channels_last=False)
    split = whole.replace(parallel="model", devices=2)
    trainer = torch_trainer(torch_gpu, split)
    assert [{p.device for p in stage.parameters()} for stage in trainer.model.body] == [
        {torch.device("cuda:0")}, {torch.device("cuda:1")}]
    _split_trains_as_whole(torch_gpu, whole, split)


def test_tf_model_parallel_puts_each_stage_on_its_gpu(tmp_path, tf_gpus):
    """Claim: --parallel model places each stage on its own GPU in both frameworks, and
    trains the unsplit network's steps."""
    if len(tf_gpus) < 2:
        pytest.skip("one GPU here: model parallelism over GPUs needs two or more")
    result = tf_run(tmp_path, "model-parallel", "--devices", "2", "--parallel", "model",
                     "--epochs", "1", "--precision", "fp32")
    assert result["fairness"]["placement"] == ["stage 0: /gpu:0", "stage 1: /gpu:1"]
    # where each stage's variables live, read from TensorFlow, not built from the config
    assert result["fairness"]["weights_on"] == ["/gpu:0", "/gpu:1"]
    assert result["summary"].replicas == 1 and result["summary"].status == "completed"


def test_torch_ddp_over_every_gpu(tmp_path, torch_gpu):
    """Claim: MirroredStrategy and DDP train over every GPU present."""
    import torch
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip("one GPU here: DDP over several needs two or more")
    config = gpu_config(tmp_path, devices=count, batch_size=32 * count)
    assert torch_gpu.train(config, datasets.config_dataset(config)) == 0
    result = schema.read_result(Path(config.out) / "result.json")
    assert result["fairness"]["distribution"] == "DistributedDataParallel (nccl)"
    assert result["summary"].replicas == count


# ---------------------------------------------------------------- one GPU shared by two devices

def _shared_chip(result: dict) -> None:
    """Two data-parallel replicas on one chip: recorded, and grouped apart from 2 GPUs."""
    hardware = result["environment"]["hardware"]
    assert hardware["shared_chip"] is True and hardware["label"].endswith("shared by 2 devices")


def _epoch_losses(result: dict) -> list[float]:
    return [e["train_loss"] for e in result["epochs"]]


def test_tf_mirrored_strategy_over_two_logical_gpus_carved_from_one(tmp_path, tf_gpus):
    """Claim: On one GPU the multi-device paths run on devices carved from it
    (--share-device), train as one device does, and are recorded as one shared chip."""
    options = ("--epochs", "1", "--precision", "fp32", "--batch-size", "64")
    one = tf_run(tmp_path, "one", *options)
    two = tf_run(tmp_path, "two", *options, "--devices", "2", "--share-device")
    assert two["fairness"]["replicas"] == 2
    # each replica's variables on its own logical GPU, as TensorFlow placed them
    assert two["fairness"]["weights_on"] == ["/gpu:0", "/gpu:1"]
    assert one["fairness"]["weights_on"] == ["/gpu:0"]
    _shared_chip(two)
    assert one["environment"]["hardware"]["shared_chip"] is False
    assert _epoch_losses(two) == pytest.approx(_epoch_losses(one), rel=1e-3)


def test_torch_ddp_two_processes_share_one_gpu(tmp_path, torch_gpu):
    """Claim: On one GPU the multi-device paths run on devices carved from it
    (--share-device), train as one device does, and are recorded as one shared chip."""
    one = gpu_config(tmp_path, out=str(tmp_path / "one"), batch_size=64, channels_last=False)
    two = one.replace(out=str(tmp_path / "two"), devices=2, share_device=True)
    results = []
    for config in (one, two):
        assert torch_gpu.train(config, datasets.config_dataset(config)) == 0
        results.append(schema.read_result(Path(config.out) / "result.json"))
    assert results[1]["fairness"]["distribution"].startswith("DistributedDataParallel (gloo)")
    assert "share one GPU" in results[1]["fairness"]["distribution"]
    assert results[1]["summary"].replicas == 2
    assert results[1]["fairness"]["weights_on"] == ["cuda:0"]  # the chief's replica
    _shared_chip(results[1])
    assert _epoch_losses(results[1]) == pytest.approx(_epoch_losses(results[0]), rel=1e-3)


def test_torch_model_parallel_stages_share_one_gpu(tmp_path, torch_gpu):
    """Claim: On one GPU the multi-device paths run on devices carved from it
    (--share-device), train as one device does, and are recorded as one shared chip."""
    import torch
    whole = gpu_config(tmp_path, channels_last=False)
    split = whole.replace(parallel="model", devices=2, share_device=True)
    trainer = torch_trainer(torch_gpu, split)
    assert trainer.choice.shared_chip and len(trainer.model.body) == 2
    assert [{p.device for p in stage.parameters()} for stage in trainer.model.body] == [
        {torch.device("cuda:0")}, {torch.device("cuda:0")}]
    _split_trains_as_whole(torch_gpu, whole, split)


def test_tf_model_parallel_stages_on_two_logical_gpus_carved_from_one(tmp_path, tf_gpus):
    """Claim: On one GPU the multi-device paths run on devices carved from it
    (--share-device), train as one device does, and are recorded as one shared chip."""
    options = ("--epochs", "1", "--precision", "fp32")
    whole = tf_run(tmp_path, "whole", *options)
    split = tf_run(tmp_path, "split", *options, "--devices", "2", "--parallel", "model",
                    "--share-device")
    # each stage's variables on its own logical GPU, as TensorFlow placed them
    assert split["fairness"]["weights_on"] == ["/gpu:0", "/gpu:1"]
    assert split["environment"]["hardware"]["shared_chip"] is True
    assert _epoch_losses(split) == pytest.approx(_epoch_losses(whole), rel=1e-3)
