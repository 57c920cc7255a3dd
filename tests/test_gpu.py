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

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import patience, tiny_config

from compare import schema
from compare.experiment import datasets
from compare.experiment.config import PipelineConfig
from compare.machine import devices, doctor
from compare.process import runner
from compare.run import loop
from compare.run import recorder as recorder_module

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


def _tf_scenario(name: str, tmp_path: Path) -> dict:
    """A TensorFlow scenario in TensorFlow's interpreter ($CNNCOMPARE_TF_PYTHON where set, as
    every TensorFlow process of the tool), with the repository on its path."""
    done = subprocess.run([runner.python_for("tf"), str(REPO / "tests" / "gpu_tf_scenarios.py"),
                           name, str(tmp_path / name)], cwd=REPO, capture_output=True,
                          text=True, timeout=patience(600), env=runner.child_environment())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=patience(600))


def _tf_run(tmp_path: Path, name: str, *options: str) -> dict:
    out = tmp_path / name
    done = _cli("run", "--framework", "tf", "--device", "gpu", "--dataset", "synthetic",
                "--synthetic-size", "1024", "--quiet", "--out", str(out), *options)
    assert done.returncode == 0, done.stderr[-3000:]
    return schema.read_result(out / "result.json")


# ---------------------------------------------------------------- mixed precision, loss scaling

def test_torch_float16_loss_scaling_skips_and_rescales(tmp_path, torch_gpu):
    """Claim: Mixed precision on a GPU is float16 with dynamic loss scaling in both
    frameworks: an overflow skips the step and halves the scale, finite steps double it."""
    import torch
    config = _gpu_config(tmp_path, precision="mixed", loss_scale_initial=2.0 ** 24,
                         loss_scale_growth_interval=3, synthetic_train_size=1024)
    trainer = _torch_trainer(torch_gpu, config)
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
    found = _tf_scenario("loss_scaling", tmp_path)
    assert found["policy"] == "mixed_float16" and "LossScaleOptimizer" in found["loss_scaling"]
    scales = found["scales"]
    assert found["skipped_first"] and scales[0] == 2.0 ** 23
    assert min(scales) < 2.0 ** 20 and any(b == 2 * a for a, b in zip(scales, scales[1:]))
    assert all(math.isfinite(v) for v in found["losses"])


# ---------------------------------------------------------------- distribution

def test_tf_mirrored_strategy_over_every_gpu(tmp_path, tf_gpus):
    """Claim: MirroredStrategy and DDP train over every GPU present."""
    result = _tf_run(tmp_path, "mirrored", "--devices", str(len(tf_gpus)), "--batch-size",
                     str(32 * len(tf_gpus)), "--epochs", "1", "--precision", "mixed")
    assert result["fairness"]["replicas"] == len(tf_gpus)
    assert result["fairness"]["distribution"].startswith("MirroredStrategy over /gpu:0")


def _split_trains_as_whole(torch_gpu, whole, split) -> None:
    """Four steps of the split model give the unsplit one's losses (cuDNN may pick other
    algorithms: within 1e-3)."""
    losses = []
    for config in (whole, split):
        t = _torch_trainer(torch_gpu, config)
        batches = t.batches(0)
        losses.append(t.read_steps([t.train_steps(batches, [0.05]) for _ in range(4)])[0])
    assert max(abs(a - b) / abs(b) for a, b in zip(*losses)) <= 1e-3


def test_torch_model_parallel_puts_each_stage_on_its_gpu(tmp_path, torch_gpu):
    """Claim: --parallel model places each stage on its own GPU in both frameworks, and
    trains the unsplit network's steps."""
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here: model parallelism over GPUs needs two or more")
    whole = _gpu_config(tmp_path, channels_last=False)
    split = whole.replace(parallel="model", devices=2)
    trainer = _torch_trainer(torch_gpu, split)
    assert [{p.device for p in stage.parameters()} for stage in trainer.model.body] == [
        {torch.device("cuda:0")}, {torch.device("cuda:1")}]
    _split_trains_as_whole(torch_gpu, whole, split)


def test_tf_model_parallel_puts_each_stage_on_its_gpu(tmp_path, tf_gpus):
    """Claim: --parallel model places each stage on its own GPU in both frameworks, and
    trains the unsplit network's steps."""
    if len(tf_gpus) < 2:
        pytest.skip("one GPU here: model parallelism over GPUs needs two or more")
    result = _tf_run(tmp_path, "model-parallel", "--devices", "2", "--parallel", "model",
                     "--epochs", "1", "--precision", "fp32")
    assert result["fairness"]["placement"] == ["stage 0: /gpu:0", "stage 1: /gpu:1"]
    assert result["summary"]["replicas"] == 1 and result["summary"]["status"] == "completed"


def test_torch_ddp_over_every_gpu(tmp_path, torch_gpu):
    """Claim: MirroredStrategy and DDP train over every GPU present."""
    import torch
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip("one GPU here: DDP over several needs two or more")
    config = _gpu_config(tmp_path, devices=count, batch_size=32 * count)
    assert torch_gpu.train(config, datasets.config_dataset(config)) == 0
    result = schema.read_result(Path(config.out) / "result.json")
    assert result["fairness"]["distribution"] == "DistributedDataParallel (nccl)"
    assert result["summary"]["replicas"] == count


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
    one = _tf_run(tmp_path, "one", *options)
    two = _tf_run(tmp_path, "two", *options, "--devices", "2", "--share-device")
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
    one = _gpu_config(tmp_path, out=str(tmp_path / "one"), batch_size=64, channels_last=False)
    two = one.replace(out=str(tmp_path / "two"), devices=2, share_device=True)
    results = []
    for config in (one, two):
        assert torch_gpu.train(config, datasets.config_dataset(config)) == 0
        results.append(schema.read_result(Path(config.out) / "result.json"))
    assert results[1]["fairness"]["distribution"].startswith("DistributedDataParallel (gloo)")
    assert "share one GPU" in results[1]["fairness"]["distribution"]
    assert results[1]["summary"]["replicas"] == 2
    assert results[1]["fairness"]["weights_on"] == ["cuda:0"]  # the chief's replica
    _shared_chip(results[1])
    assert _epoch_losses(results[1]) == pytest.approx(_epoch_losses(results[0]), rel=1e-3)


def test_torch_model_parallel_stages_share_one_gpu(tmp_path, torch_gpu):
    """Claim: On one GPU the multi-device paths run on devices carved from it
    (--share-device), train as one device does, and are recorded as one shared chip."""
    import torch
    whole = _gpu_config(tmp_path, channels_last=False)
    split = whole.replace(parallel="model", devices=2, share_device=True)
    trainer = _torch_trainer(torch_gpu, split)
    assert trainer.choice.shared_chip and len(trainer.model.body) == 2
    assert [{p.device for p in stage.parameters()} for stage in trainer.model.body] == [
        {torch.device("cuda:0")}, {torch.device("cuda:0")}]
    _split_trains_as_whole(torch_gpu, whole, split)


def test_tf_model_parallel_stages_on_two_logical_gpus_carved_from_one(tmp_path, tf_gpus):
    """Claim: On one GPU the multi-device paths run on devices carved from it
    (--share-device), train as one device does, and are recorded as one shared chip."""
    options = ("--epochs", "1", "--precision", "fp32")
    whole = _tf_run(tmp_path, "whole", *options)
    split = _tf_run(tmp_path, "split", *options, "--devices", "2", "--parallel", "model",
                    "--share-device")
    # each stage's variables on its own logical GPU, as TensorFlow placed them
    assert split["fairness"]["weights_on"] == ["/gpu:0", "/gpu:1"]
    assert split["environment"]["hardware"]["shared_chip"] is True
    assert _epoch_losses(split) == pytest.approx(_epoch_losses(whole), rel=1e-3)


# ---------------------------------------------------------------- input pipelines

def test_torch_every_pipeline_gives_the_same_batches_on_the_gpu(tmp_path, torch_gpu):
    """Claim: Every input pipeline (naive, tuned, device) trains on the GPU with the same
    batches; TensorFlow's device pipeline gathers on the GPU, under MirroredStrategy too."""
    import torch
    firsts = {}
    for kind in ("naive", "tuned", "device"):
        pipeline = PipelineConfig.preset(kind)
        if kind == "tuned":
            pipeline = PipelineConfig(workers=1, persistent_workers=False)
        trainer = _torch_trainer(torch_gpu, _gpu_config(tmp_path, pipeline=pipeline,
                                                        augment=True))
        images, labels = trainer._to_device(next(trainer.batches(1)))
        assert images.is_cuda
        firsts[kind] = (images.float().contiguous(), labels)
        losses = trainer.losses([trainer.train_step(b, 0.01) for _, b in
                                 zip(range(2), trainer.batches(0))])
        assert all(math.isfinite(v) for v in losses)
    for kind in ("tuned", "device"):
        assert torch.equal(firsts[kind][0], firsts["naive"][0]), kind
        assert torch.equal(firsts[kind][1], firsts["naive"][1]), kind


def test_tf_device_pipeline_runs_every_op_on_the_gpu(tmp_path, tf_gpus):
    """Claim: Every input pipeline (naive, tuned, device) trains on the GPU with the same
    batches; TensorFlow's device pipeline gathers on the GPU, under MirroredStrategy too."""
    found = _tf_scenario("placement", tmp_path)  # soft placement off: a CPU-only op raises
    assert found["device"].endswith("GPU:0") and found["shape"] == [8, 32, 32, 3]
    assert found["equal_to_host"]  # the same pixels as the host pipeline's
    assert found["resident_bytes"] == 64 * 32 * 32 * 3  # uint8 bytes, as PyTorch keeps them


@pytest.mark.parametrize("pipeline", ["naive", "tuned", "device"])
def test_tf_every_pipeline_trains_on_the_gpus(tmp_path, tf_gpus, pipeline):
    """Claim: Every input pipeline (naive, tuned, device) trains on the GPU with the same
    batches; TensorFlow's device pipeline gathers on the GPU, under MirroredStrategy too."""
    result = _tf_run(tmp_path, pipeline, "--pipeline", pipeline, "--strategy", "mirrored",
                     "--devices", str(len(tf_gpus)), "--batch-size", str(32 * len(tf_gpus)),
                     "--epochs", "1", "--precision", "fp32")
    assert result["fairness"]["pipeline"]["kind"] == pipeline
    assert result["fairness"]["distribution"].startswith("MirroredStrategy")
    assert all(math.isfinite(e["train_loss"]) for e in result["epochs"])


def test_tf_every_pipeline_gives_the_same_batches_on_the_gpu(tmp_path, tf_gpus):
    """Claim: Every input pipeline (naive, tuned, device) trains on the GPU with the same
    batches; TensorFlow's device pipeline gathers on the GPU, under MirroredStrategy too."""
    found = _tf_scenario("pipeline_batches", tmp_path)
    for kind, batch in found.items():
        assert batch["labels_equal"] and batch["shape"] == [64, 32, 32, 3], (kind, batch)
        assert batch["max_pixel_difference"] <= 1e-6, (kind, batch)  # normalised on the GPU


# ---------------------------------------------------------------- compilers

def test_tf_xla_on_the_gpu(tmp_path, tf_gpus):
    """Claim: --compile runs XLA (TensorFlow) and torch.compile (PyTorch) on the GPU."""
    result = _tf_run(tmp_path, "xla", "--compile", "--epochs", "2", "--precision", "mixed")
    compiled = result["compilation"]  # read from TensorFlow, not the config
    assert compiled["compiled"] and compiled["hlo_instructions"] > 50, compiled
    assert all(math.isfinite(e["train_loss"]) for e in result["epochs"])


def test_torch_compile_on_the_gpu(tmp_path, torch_gpu):
    """Claim: --compile runs XLA (TensorFlow) and torch.compile (PyTorch) on the GPU."""
    config = _gpu_config(tmp_path, compile=True, precision="mixed", epochs=2)
    trainer = _torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    found = trainer.compilation()  # read from dynamo, not the config
    assert found["compiled"] and found["graph_breaks"] == 0, found
    assert all(math.isfinite(row[3]) for row in recorder.steps)


def test_torch_cuda_graphs_train_as_the_eager_step_does(tmp_path, torch_gpu):
    """Claim: --cuda-graphs replays PyTorch's forward and backward as CUDA graphs, with the
    eager step's losses."""
    from torch._dynamo.utils import counters
    losses = {}
    for graphs in (False, True):
        counters.clear()
        config = _gpu_config(tmp_path / str(graphs), epochs=2, cuda_graphs=graphs,
                             steps_per_call=4, tf32=False, cudnn_benchmark=False)
        trainer = _torch_trainer(torch_gpu, config)
        recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
        assert loop.train_epochs(trainer, config, recorder) == 0
        losses[graphs] = [row[3] for row in recorder.steps]
        if graphs:
            assert "CUDA graphs" in trainer.manifest()["step_batching"]
            # Inductor falls back to eager, silently, where it cannot record a graph
            assert counters["stats"]["unique_graphs"] >= 1  # Dynamo compiled the model
            assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    assert len(losses[True]) == len(losses[False]) == 16
    assert losses[True] == pytest.approx(losses[False], rel=1e-3, abs=1e-4)


# ---------------------------------------------------------------- resume, memory

def test_torch_resume_restores_the_loss_scale(tmp_path, torch_gpu):
    """Claim: A resumed mixed-precision run restores its loss scale."""
    config = _gpu_config(tmp_path, precision="mixed", loss_scale_initial=2.0 ** 24,
                         loss_scale_growth_interval=3)
    trainer = _torch_trainer(torch_gpu, config)
    for batch in trainer.batches(0):
        trainer.train_step(batch, 0.01)
    scale = trainer.scaler.get_scale()
    assert scale != 2.0 ** 24  # it moved, so restoring it is a real test
    trainer.save_checkpoint(tmp_path)
    fresh = _torch_trainer(torch_gpu, config)
    fresh.load_checkpoint(tmp_path)
    assert fresh.scaler.get_scale() == scale


def test_tf_resume_restores_the_loss_scale(tmp_path, tf_gpus):
    """Claim: A resumed mixed-precision run restores its loss scale."""
    found = _tf_scenario("resume_loss_scale", tmp_path)
    assert found["scale"] != found["initial"] and found["restored"] == found["scale"]


def test_torch_peak_memory_is_reset_each_epoch(tmp_path, torch_gpu):
    """Claim: Peak device memory is each epoch's own: the allocator's peak is reset after
    each epoch's evaluation."""
    import torch
    trainer = _torch_trainer(torch_gpu, _gpu_config(tmp_path))
    big = torch.ones((256, 1024, 1024), device=trainer.device)  # 1 GiB
    big_peak = trainer.peak_memory()[0]
    del big
    trainer.reset_peak_memory()
    trainer.train_step(next(trainer.batches(0)), 0.01)
    trainer.sync()
    assert big_peak >= 2**30 and 0 < trainer.peak_memory()[0] < big_peak / 4


def test_tf_peak_memory_is_reset_each_epoch(tmp_path, tf_gpus):
    """Claim: Peak device memory is each epoch's own: the allocator's peak is reset after
    each epoch's evaluation."""
    found = _tf_scenario("peak_memory", tmp_path)
    assert found["big_peak"] >= 2**30 and 0 < found["after_reset"] < found["big_peak"] / 4


# ---------------------------------------------------------------- energy, MFU, phases

def test_torch_nvml_energy_over_real_steps(tmp_path, torch_gpu):
    """Claim: Energy is read from NVML's energy counter (or, where a device refuses it,
    its sampled power) over the training steps."""
    from compare.machine import gpu_metrics
    trainer = _torch_trainer(torch_gpu, _gpu_config(tmp_path, precision="mixed",
                                                    model="resnet9", batch_size=256,
                                                    synthetic_train_size=2048))
    sampler = gpu_metrics.sampler(trainer.gpu_indices)
    assert isinstance(sampler, gpu_metrics.NvmlSampler), sampler.end_epoch()
    sampler.begin_epoch()
    started = time.perf_counter()
    while time.perf_counter() - started < 3:  # real work for a few seconds
        for batch in trainer.batches(0):
            trainer.train_step(batch, 0.01)
    trainer.sync()
    record = sampler.end_epoch()
    sampler.close()
    if "energy_j" in record.get("unavailable", {}):
        assert record["energy_source"] == "mean sampled power x epoch time", record
    else:
        assert record["energy_source"].startswith("nvmlDeviceGetTotalEnergyConsumption")
    assert record["energy_j"] > 0 and record["power_w_mean"] > 0, record
    assert record["utilisation_pct_mean"] > 0, record


def test_torch_run_records_device_time_peak_memory_energy_and_mfu(tmp_path, torch_gpu):
    """Claim: MFU is measured against the GPU's dense peak for the precision and lies in
    (0, 1); device time, peak memory and energy are recorded per epoch."""
    from compare.machine import gpu_metrics
    config = _gpu_config(tmp_path, epochs=2, precision="mixed", synthetic_train_size=2048)
    trainer = _torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    result = schema.read_result(Path(config.out) / "result.json")
    epochs, summary = result["epochs"], result["summary"]
    assert all(e["device_time_s"] > 0 for e in epochs)  # CUDA events
    assert all(e["peak_device_memory_bytes"] > 0 for e in epochs)
    assert summary["warmup_peak_device_memory_bytes"] > 0 and summary["peak_device_memory_bytes"]
    assert summary["energy_j"] > 0 and summary["energy_per_image_j"] > 0, summary["energy_note"]
    assert gpu_metrics.peak_row(trainer.choice.name), f"{trainer.choice.name}: not in the table"
    assert 0 < summary["mfu"] < 1, summary["mfu_note"]


def _check_device_phases(profile: dict) -> None:
    """A phase split read on the GPU's own clock: kernels placed in their phases."""
    assert profile["clock"] == "device", profile.get("notes")
    took = profile["phases_ms"]
    assert took["forward"] > 0 and took["backward"] > 0 and took["update"] > 0
    assert 0 <= profile["device_idle_ms"] <= profile["step_ms"]
    assert 0 <= profile["input_stall_ms"] <= profile["device_idle_ms"] + 1e-9


def test_torch_phase_profile_reads_the_gpu_kernels(tmp_path, torch_gpu):
    """Claim: The phase split is read on the GPU's own clock in both frameworks."""
    config = _gpu_config(tmp_path, epochs=1, precision="mixed", steps_per_call=4,
                         profile_steps=8, pipeline=PipelineConfig(kind="tuned", workers=0))
    trainer = _torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    _check_device_phases(recorder.result["profile"])
    assert recorder.result["profile"]["phases_ms"]["host_to_device"] > 0  # the batch's copy


def test_tf_phase_profile_reads_the_gpu_kernels(tmp_path, tf_gpus):
    """Claim: The phase split is read on the GPU's own clock in both frameworks."""
    found = _tf_scenario("phases_on_the_device", tmp_path)
    assert found["code"] == 0
    _check_device_phases(found["profile"])


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_tf_trains_on_the_gpu(tmp_path, tf_gpus, precision):
    """Claim: MFU is measured against the GPU's dense peak for the precision and lies in
    (0, 1); device time, peak memory and energy are recorded per epoch."""
    result = _tf_run(tmp_path, precision, "--epochs", "2", "--precision", precision)
    fairness, summary = result["fairness"], result["summary"]
    assert fairness["device_kind"] == "gpu" and summary["peak_device_memory_bytes"] > 0
    if precision == "mixed":
        assert fairness["precision_policy"] == "mixed_float16"
        assert "LossScaleOptimizer" in fairness["loss_scaling"]
    assert summary["energy_j"] > 0, summary["energy_note"]
    assert 0 < summary["mfu"] < 1, summary["mfu_note"]
    assert all(math.isfinite(e["train_loss"]) for e in result["epochs"])


# ---------------------------------------------------------------- doctor and the device guard

def test_both_doctor_on_a_gpu_host(torch_gpu, tf_gpus):
    """Claim: doctor trains a few steps on the GPU alone and says why a framework sees no
    GPU. Both frameworks see the GPU here (tf_gpus: else this test skips, and the battery
    fails a stage whose every test skipped); the diagnosis of one that does not is checked
    on this host with TensorFlow's GPUs hidden from it."""
    report = doctor.examine("lenet")
    for framework in ("tf", "torch"):
        entry = report["frameworks"][framework]
        assert entry["kinds"] == ["gpu"], json.dumps(entry, indent=1)[:2000]
        assert list(entry["runs"]) == ["gpu"]  # no CPU steps on a GPU machine
        assert any(name.startswith("libcudnn") for name in entry["runs"]["gpu"]["libraries"])
    assert report["verdict"].startswith("ready to compare on GPU")
    hidden = dict(report["frameworks"]["tf"]["environment"], gpus=[])
    diagnosis = doctor.gpu_diagnosis(hidden, report["machine"])
    assert diagnosis and not diagnosis.startswith("unknown"), diagnosis


def test_both_same_device_guard_on_a_gpu_host(torch_gpu, tf_gpus, monkeypatch):
    """Claim: compare refuses to set one framework on the GPU against the other on the CPU.
    Here both see the GPU and pass; then TensorFlow's environment, as a CPU-only TensorFlow
    would describe it beside this GPU, is refused in one line."""
    from compare.errors import UserError
    from compare.experiment.config import RunConfig
    configs = [RunConfig(framework=fw) for fw in ("tf", "torch")]
    assert devices.check_same_device(configs) == {"tf": "gpu", "torch": "gpu"}
    real = runner.framework_environment
    monkeypatch.setattr(runner, "framework_environment", lambda fw: (
        {**real(fw), "gpus": []} if fw == "tf" else real(fw)))
    with pytest.raises(UserError, match="different devices"):
        devices.check_same_device(configs)
