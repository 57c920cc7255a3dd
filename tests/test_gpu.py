"""The GPU paths, on a real GPU (`pytest -m gpu`); every test here skips without one.

PyTorch runs in this process. TensorFlow runs in subprocesses (through the CLI): the test
process hides the GPUs from TensorFlow to split the CPU for the MirroredStrategy tests.
Either framework may be missing (a GPU machine may have only PyTorch): its tests skip.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from compare import datasets, devices, doctor, loop, results, runner
from compare import recorder as recorder_module
from compare.config import PipelineConfig
from conftest import tiny_config

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parent.parent


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(scope="module")
def torch_gpu():
    if not _torch_cuda():
        pytest.skip("PyTorch sees no CUDA GPU here")
    from torch_impl import train as torch_train
    return torch_train


@pytest.fixture(scope="module")
def tf_gpus() -> list[dict]:
    env = runner.framework_environment("tf")
    if "error" in env or not env.get("gpus"):
        pytest.skip(f"TensorFlow sees no GPU here ({env.get('error') or 'no GPU'})")
    return env["gpus"]


def _gpu_config(tmp_path, **changes):
    return tiny_config(tmp_path, device="gpu", **changes)


def _torch_trainer(torch_train, config):
    return torch_train.Trainer(config, datasets.config_dataset(config),
                               torch_train.select_device(config))


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_torch_one_real_step_per_precision(tmp_path, torch_gpu, precision):
    trainer = _torch_trainer(torch_gpu, _gpu_config(tmp_path, precision=precision))
    assert trainer.choice.on_gpu and trainer.device.type == "cuda"
    batches = trainer.batches(0)
    losses = trainer.losses([trainer.train_step(next(batches), 0.01) for _ in range(3)])
    assert all(math.isfinite(v) and 1.0 < v < 4.0 for v in losses)
    manifest = trainer.manifest()
    if precision == "mixed":  # float16 with dynamic loss scaling, the fused SGD on the device
        assert manifest["precision_policy"] == "autocast float16 + GradScaler"
        assert trainer.scaler.is_enabled() and math.isfinite(trainer.scaler.get_scale())
        assert "initial 65536" in manifest["loss_scaling"]
    else:
        assert manifest["loss_scaling"] is None and not trainer.scaler.is_enabled()
    assert "fused" in manifest["optimizer_implementation"]
    assert manifest["channels_last"] is True  # the default on a GPU


def test_torch_every_pipeline_gives_the_same_batches_on_the_gpu(tmp_path, torch_gpu):
    import torch
    firsts = {}
    for kind in ("naive", "tuned", "device"):
        pipeline = PipelineConfig.preset(kind)
        if kind == "tuned":
            pipeline = PipelineConfig(workers=1, persistent_workers=False)
        trainer = _torch_trainer(torch_gpu, _gpu_config(tmp_path, pipeline=pipeline,
                                                        augment=True))
        images, labels = trainer._to_device(next(trainer.batches(1)))
        firsts[kind] = (images.float().contiguous(), labels)
    for kind in ("tuned", "device"):
        assert torch.equal(firsts[kind][0], firsts["naive"][0]), kind
        assert torch.equal(firsts[kind][1], firsts["naive"][1]), kind


def test_torch_run_records_device_time_peak_memory_energy_and_mfu(tmp_path, torch_gpu):
    config = _gpu_config(tmp_path, epochs=2, precision="mixed", synthetic_train_size=2048)
    trainer = _torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    result = results.read_result(Path(config.out) / "result.json")
    epochs, summary = result["epochs"], result["summary"]
    assert all(e["device_time_s"] > 0 for e in epochs)  # CUDA events
    assert all(e["peak_device_memory_bytes"] > 0 for e in epochs)
    assert summary["warmup_peak_device_memory_bytes"] > 0
    assert 0 < summary["peak_device_memory_bytes"]  # reset after epoch 1: its own peak
    if summary["energy_j"] is not None:  # NVML's counter (Volta and newer)
        assert summary["energy_j"] > 0 and summary["energy_per_image_j"] > 0
    if summary["mfu"] is not None:  # a GPU in the peak table
        assert 0 < summary["mfu"] < 1


def _check_device_phases(profile: dict) -> None:
    """A phase split read on the GPU's own clock: kernels placed in their phases."""
    assert profile["clock"] == "device", profile.get("notes")
    took = profile["phases_ms"]
    assert took["forward"] > 0 and took["backward"] > 0 and took["update"] > 0
    assert 0 <= profile["device_idle_ms"] <= profile["step_ms"]
    assert 0 <= profile["input_stall_ms"] <= profile["device_idle_ms"] + 1e-9


def test_torch_phase_profile_reads_the_gpu_kernels(tmp_path, torch_gpu):
    config = _gpu_config(tmp_path, epochs=1, precision="mixed", steps_per_call=4,
                         profile_steps=8, pipeline=PipelineConfig(kind="tuned", workers=0))
    trainer = _torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    _check_device_phases(recorder.result["profile"])
    assert recorder.result["profile"]["phases_ms"]["host_to_device"] > 0  # the batch's copy


def test_torch_cuda_graphs_train_as_the_eager_step_does(tmp_path, torch_gpu):
    """--cuda-graphs replays the compiled forward and backward: the same data plan and
    updates, so float32 losses follow the eager run's step for step, and it is recorded."""
    losses = {}
    for graphs in (False, True):
        config = _gpu_config(tmp_path / str(graphs), epochs=2, cuda_graphs=graphs,
                             steps_per_call=4, tf32=False, cudnn_benchmark=False)
        trainer = _torch_trainer(torch_gpu, config)
        recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
        assert loop.train_epochs(trainer, config, recorder) == 0
        losses[graphs] = [row[3] for row in recorder.steps]
        if graphs:
            assert "CUDA graphs" in trainer.manifest()["step_batching"]
    assert len(losses[True]) == len(losses[False]) == 16
    assert losses[True] == pytest.approx(losses[False], rel=1e-3, abs=1e-4)


def test_torch_ddp_over_the_gpus_there_are(tmp_path, torch_gpu):
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU: DDP needs two")
    config = _gpu_config(tmp_path, devices=2, batch_size=64)
    assert torch_gpu.train(config, datasets.config_dataset(config)) == 0
    result = results.read_result(Path(config.out) / "result.json")
    assert result["fairness"]["distribution"] == "DistributedDataParallel (nccl)"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_tf_trains_on_the_gpu(tmp_path, tf_gpus, precision):
    out = tmp_path / "tf"
    done = _cli("run", "--framework", "tf", "--device", "gpu", "--devices", str(len(tf_gpus)),
                "--dataset", "synthetic", "--synthetic-size", "1024", "--epochs", "2",
                "--precision", precision, "--quiet", "--out", str(out))
    assert done.returncode == 0, done.stderr
    result = results.read_result(out / "result.json")
    fairness, summary = result["fairness"], result["summary"]
    assert fairness["device_kind"] == "gpu" and summary["peak_device_memory_bytes"] > 0
    assert fairness["replicas"] == len(tf_gpus)
    if precision == "mixed":
        assert fairness["precision_policy"] == "mixed_float16"
        assert "LossScaleOptimizer" in fairness["loss_scaling"]
    assert all(math.isfinite(e["train_loss"]) for e in result["epochs"])
    _check_device_phases(result["profile"])  # the default --profile, read on GPU:0


def test_tf_device_pipeline_gathers_on_the_gpu(tf_gpus):
    """uint8 GatherV2 has no GPU kernel; the resident copy is float16 so the gather stays."""
    code = (
        "import numpy as np, tensorflow as tf\n"
        "tf.debugging.set_log_device_placement(True)\n"
        "from tf_impl.data import PlanImages\n"
        "images = np.zeros((64, 32, 32, 3), np.uint8); labels = np.zeros(64, np.int64)\n"
        "source = PlanImages(images, labels, np.full(3, .5), np.full(3, .25), 4, True, '/gpu:0')\n"
        "keys = tf.constant(np.zeros((4, 8), np.int64))\n"
        "tf.function(source.load_batch)(*tf.unstack(keys))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    gathers = [line for line in done.stderr.splitlines() if "GatherV2" in line]
    assert gathers and all("GPU:0" in line for line in gathers), gathers


def test_the_same_device_guard_on_a_gpu_host(torch_gpu):
    from compare.config import RunConfig
    from compare.errors import UserError
    configs = [RunConfig(framework=fw) for fw in ("tf", "torch")]
    if runner.framework_environment("tf").get("gpus"):
        assert devices.check_same_device(configs) == {"tf": "gpu", "torch": "gpu"}
    else:  # TensorFlow without its CUDA libraries beside a CUDA PyTorch: refused
        with pytest.raises(UserError, match="different devices"):
            devices.check_same_device(configs)


def test_doctor_on_a_gpu_host(torch_gpu):
    report = doctor.examine("lenet")
    torch_entry = report["frameworks"]["torch"]
    assert "gpu" in torch_entry["kinds"], json.dumps(torch_entry, indent=1)[:2000]
    gpu_run = torch_entry["runs"]["gpu"]
    assert any(name.startswith("libcudnn") for name in gpu_run["libraries"])
    tf_entry = report["frameworks"]["tf"]
    if "gpu" in tf_entry.get("kinds", []):
        assert report["verdict"].startswith("ready to compare on GPU")
    elif tf_entry.get("installed"):
        assert tf_entry["gpu_diagnosis"]  # it says why TensorFlow sees no GPU
