"""The GPU's features, on a real GPU (`pytest -m gpu`; every test here skips without one): input
pipelines, compilers and CUDA graphs, resume, peak memory, energy, MFU, the phase split, and
doctor and the device guard on a GPU host. Each test proves one claim of docs/gpu.md and quotes
it first in its docstring; the names say the framework (test_torch_*, test_tf_*, test_both_*)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
from on_gpu import gpu_config, tf_run, tf_scenario, torch_trainer

from compare import schema
from compare.experiment.config import PipelineConfig
from compare.process import doctor, runner, same_device
from compare.run import loop
from compare.run import recorder as recorder_module

pytestmark = pytest.mark.gpu


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
        trainer = torch_trainer(torch_gpu, gpu_config(tmp_path, pipeline=pipeline,
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
    found = tf_scenario("placement", tmp_path)  # soft placement off: a CPU-only op raises
    assert found["device"].endswith("GPU:0") and found["shape"] == [8, 32, 32, 3]
    assert found["equal_to_host"]  # the same pixels as the host pipeline's
    assert found["resident_bytes"] == 64 * 32 * 32 * 3  # uint8 bytes, as PyTorch keeps them


@pytest.mark.parametrize("pipeline", ["naive", "tuned", "device"])
def test_tf_every_pipeline_trains_on_the_gpus(tmp_path, tf_gpus, pipeline):
    """Claim: Every input pipeline (naive, tuned, device) trains on the GPU with the same
    batches; TensorFlow's device pipeline gathers on the GPU, under MirroredStrategy too."""
    result = tf_run(tmp_path, pipeline, "--pipeline", pipeline, "--strategy", "mirrored",
                     "--devices", str(len(tf_gpus)), "--batch-size", str(32 * len(tf_gpus)),
                     "--epochs", "1", "--precision", "fp32")
    assert result["fairness"]["pipeline"]["kind"] == pipeline
    assert result["fairness"]["distribution"].startswith("MirroredStrategy")
    assert all(math.isfinite(e["train_loss"]) for e in result["epochs"])


def test_tf_every_pipeline_gives_the_same_batches_on_the_gpu(tmp_path, tf_gpus):
    """Claim: Every input pipeline (naive, tuned, device) trains on the GPU with the same
    batches; TensorFlow's device pipeline gathers on the GPU, under MirroredStrategy too."""
    found = tf_scenario("pipeline_batches", tmp_path)
    for kind, batch in found.items():
        assert batch["labels_equal"] and batch["shape"] == [64, 32, 32, 3], (kind, batch)
        assert batch["max_pixel_difference"] <= 1e-6, (kind, batch)  # normalised on the GPU


# ---------------------------------------------------------------- compilers

def test_tf_xla_on_the_gpu(tmp_path, tf_gpus):
    """Claim: --compile runs XLA (TensorFlow) and torch.compile (PyTorch) on the GPU."""
    result = tf_run(tmp_path, "xla", "--compile", "--epochs", "2", "--precision", "mixed")
    compiled = result["compilation"]  # read from TensorFlow, not the config
    assert compiled["compiled"] and compiled["hlo_instructions"] > 50, compiled
    assert all(math.isfinite(e["train_loss"]) for e in result["epochs"])


def test_torch_compile_on_the_gpu(tmp_path, torch_gpu):
    """Claim: --compile runs XLA (TensorFlow) and torch.compile (PyTorch) on the GPU."""
    config = gpu_config(tmp_path, compile=True, precision="mixed", epochs=2)
    trainer = torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    # what the run recorded (the result file), which Recorder read from dynamo, not the config
    found = schema.read_result(Path(config.out) / "result.json")["compilation"]
    assert found["compiled"] and found["graph_breaks"] == 0, found
    assert all(math.isfinite(row[3]) for row in recorder.steps)


def test_torch_cuda_graphs_train_as_the_eager_step_does(tmp_path, torch_gpu):
    """Claim: --cuda-graphs replays PyTorch's forward and backward as CUDA graphs, with the
    eager step's losses."""
    from torch._dynamo.utils import counters
    losses, peaks = {}, {}
    for graphs in (False, True):
        counters.clear()
        config = gpu_config(tmp_path / str(graphs), epochs=2, cuda_graphs=graphs,
                             steps_per_call=4, tf32=False, cudnn_benchmark=False)
        trainer = torch_trainer(torch_gpu, config)
        recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
        assert loop.train_epochs(trainer, config, recorder) == 0
        losses[graphs] = [row[3] for row in recorder.steps]
        peaks[graphs] = recorder.epochs[-1]["peak_device_memory_bytes"]  # the replayed epoch's
        if graphs:
            assert "CUDA graphs" in trainer.manifest()["step_batching"]
            # Inductor falls back to eager, silently, where it cannot record a graph
            assert counters["stats"]["unique_graphs"] >= 1  # Dynamo compiled the model
            assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    assert len(losses[True]) == len(losses[False]) == 16
    assert losses[True] == pytest.approx(losses[False], rel=1e-3, abs=1e-4)
    # the graphs' activations, in their private pool, count in the replayed epoch's peak
    assert peaks[True] >= 0.9 * peaks[False], peaks


# ---------------------------------------------------------------- resume, memory

def test_torch_resume_restores_the_loss_scale(tmp_path, torch_gpu):
    """Claim: A resumed mixed-precision run restores its loss scale."""
    config = gpu_config(tmp_path, precision="mixed", loss_scale_initial=2.0 ** 24,
                         loss_scale_growth_interval=3)
    trainer = torch_trainer(torch_gpu, config)
    for batch in trainer.batches(0):
        trainer.train_step(batch, 0.01)
    scale = trainer.scaler.get_scale()
    assert scale != 2.0 ** 24  # it moved, so restoring it is a real test
    trainer.save_checkpoint(tmp_path)
    fresh = torch_trainer(torch_gpu, config)
    fresh.load_checkpoint(tmp_path)
    assert fresh.scaler.get_scale() == scale


def test_tf_resume_restores_the_loss_scale(tmp_path, tf_gpus):
    """Claim: A resumed mixed-precision run restores its loss scale."""
    found = tf_scenario("resume_loss_scale", tmp_path)
    assert found["scale"] != found["initial"] and found["restored"] == found["scale"]


def test_torch_peak_memory_is_reset_each_epoch(tmp_path, torch_gpu):
    """Claim: Peak device memory is each epoch's own: the allocator's peak is reset after
    each epoch's evaluation."""
    import torch
    trainer = torch_trainer(torch_gpu, gpu_config(tmp_path))
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
    found = tf_scenario("peak_memory", tmp_path)
    assert found["big_peak"] >= 2**30 and 0 < found["after_reset"] < found["big_peak"] / 4


def test_torch_a_reset_trainer_starts_again_as_a_new_one_on_the_gpu(tmp_path, torch_gpu):
    """Claim: A trainer reset for the parity check's noise floor starts again as a new one on
    the GPU (weights, momentum, loss scale), and its copy of the momentum buffers waits in
    host memory, not in the GPU's."""
    import torch
    config = gpu_config(tmp_path, precision="mixed", momentum=0.9, weight_decay=5e-4)
    trainer = torch_trainer(torch_gpu, config)
    new = {k: v.copy() for k, v in trainer.weights().items()}
    scale = trainer.loss_scale()
    first = trainer.losses([trainer.train_step(b, 0.05) for _, b in
                            zip(range(3), trainer.batches(0))])
    trainer.sync()
    moved = torch.cuda.memory_allocated(trainer.device)
    trainer.reset()
    for key, value in trainer.weights().items():
        np.testing.assert_array_equal(value, new[key], err_msg=key)
    buffers = [s["momentum_buffer"] for s in trainer.optimizer.state.values()]
    assert buffers and all(b.is_cuda and not b.any() for b in buffers)
    assert trainer.loss_scale() == scale
    assert torch.cuda.memory_allocated(trainer.device) <= moved  # no second set of buffers
    again = trainer.losses([trainer.train_step(b, 0.05) for _, b in
                            zip(range(3), trainer.batches(0))])
    assert again == pytest.approx(first, rel=1e-3)  # cuDNN may pick other kernels: not bits


def test_both_parity_check_times_the_gpu_in_processes_of_its_own(tmp_path, torch_gpu,
                                                                  tf_gpus, monkeypatch):
    """Claim: On a GPU host the parity check's gate runs in float64 on the CPU and the timed
    configuration is probed on the GPU in processes of its own, with each framework's noise
    floor."""
    from compare.process import parity_check
    probe, calls = runner.run_probe, []

    def counted(config, path, steps, perturb=False, floor=None, then=None):
        calls.append((config.device, then is not None))
        return probe(config, path, steps, perturb, floor, then)
    monkeypatch.setattr(runner, "run_probe", counted)
    record = parity_check.run_parity(gpu_config(tmp_path, model="lenet", precision="mixed"),
                                     tmp_path / "parity")
    assert record["passed"], record.get("error") or record.get("failed")
    assert sorted(calls) == [("cpu", False)] * 2 + [("gpu", False)] * 2
    timed = record["timed_configuration"]
    assert "error" not in timed, timed.get("error")
    assert timed["configuration"]["device"] == "the GPU, float16"
    assert all(timed["noise_floors"][fw]["params_rel_update_diff_after_steps"] > 0
               for fw in ("tf", "torch"))  # 1 ulp moved each framework's own result


# ---------------------------------------------------------------- energy, MFU, phases

def test_torch_nvml_energy_over_real_steps(tmp_path, torch_gpu):
    """Claim: Energy is read from NVML's energy counter (or, where a device refuses it,
    its sampled power) over the training steps."""
    from compare.machine import gpu_metrics
    trainer = torch_trainer(torch_gpu, gpu_config(tmp_path, precision="mixed",
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
    config = gpu_config(tmp_path, epochs=2, precision="mixed", synthetic_train_size=2048)
    trainer = torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    result = schema.read_result(Path(config.out) / "result.json")
    epochs, summary = result["epochs"], result["summary"]
    assert all(e["device_time_s"] > 0 for e in epochs)  # CUDA events
    assert all(e["peak_device_memory_bytes"] > 0 for e in epochs)
    assert summary.warmup_peak_device_memory_bytes > 0 and summary.peak_device_memory_bytes
    assert summary.energy_j > 0 and summary.energy_per_image_j > 0, summary.energy_note
    assert gpu_metrics.peak_row(trainer.choice.name), f"{trainer.choice.name}: not in the table"
    assert 0 < summary.mfu < 1, summary.mfu_note


def _check_device_phases(profile: dict) -> None:
    """A phase split read on the GPU's own clock: kernels placed in their phases."""
    assert profile["clock"] == "device", profile.get("notes")
    took = profile["phases_ms"]
    assert took["forward"] > 0 and took["backward"] > 0 and took["update"] > 0
    assert 0 <= profile["device_idle_ms"] <= profile["step_ms"]
    assert 0 <= profile["input_stall_ms"] <= profile["device_idle_ms"] + 1e-9


def test_torch_phase_profile_reads_the_gpu_kernels(tmp_path, torch_gpu):
    """Claim: The phase split is read on the GPU's own clock in both frameworks."""
    config = gpu_config(tmp_path, epochs=1, precision="mixed", steps_per_call=4,
                         profile_steps=8, pipeline=PipelineConfig(kind="tuned", workers=0))
    trainer = torch_trainer(torch_gpu, config)
    recorder = recorder_module.Recorder(config, trainer, trainer.spec, {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    _check_device_phases(recorder.result["profile"])
    assert recorder.result["profile"]["phases_ms"]["host_to_device"] > 0  # the batch's copy


def test_tf_phase_profile_reads_the_gpu_kernels(tmp_path, tf_gpus):
    """Claim: The phase split is read on the GPU's own clock in both frameworks."""
    found = tf_scenario("phases_on_the_device", tmp_path)
    assert found["code"] == 0
    _check_device_phases(found["profile"])


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_tf_trains_on_the_gpu(tmp_path, tf_gpus, precision):
    """Claim: MFU is measured against the GPU's dense peak for the precision and lies in
    (0, 1); device time, peak memory and energy are recorded per epoch."""
    result = tf_run(tmp_path, precision, "--epochs", "2", "--precision", precision)
    fairness, summary = result["fairness"], result["summary"]
    assert fairness["device_kind"] == "gpu" and summary.peak_device_memory_bytes > 0
    scales = [e.get("loss_scale") for e in result["epochs"]]
    if precision == "mixed":  # float16: the optimizer's own dynamic scale, a power of two
        assert all(s and math.log2(s).is_integer() and 1 <= s <= 2.0 ** 24 for s in scales)
    else:
        assert scales == [None] * len(scales)  # float32 trains unscaled
    assert summary.energy_j > 0, summary.energy_note
    assert 0 < summary.mfu < 1, summary.mfu_note
    assert all(math.isfinite(e["train_loss"]) for e in result["epochs"])


# ---------------------------------------------------------------- doctor and the device guard

def test_both_doctor_on_a_gpu_host(torch_gpu, tf_gpus, monkeypatch):
    """Claim: doctor trains a few steps on the GPU alone and says why a framework sees no
    GPU. Both frameworks see the GPU here (tf_gpus: else this test skips, and the battery
    fails a stage whose every test skipped); then TensorFlow, started with the GPUs hidden
    from it, is diagnosed on this host."""
    report = doctor.examine("lenet")
    for framework in ("tf", "torch"):
        entry = report["frameworks"][framework]
        assert entry["kinds"] == ["gpu"], json.dumps(entry, indent=1)[:2000]
        assert list(entry["runs"]) == ["gpu"]  # no CPU steps on a GPU machine
        assert any(name.startswith("libcudnn") for name in entry["runs"]["gpu"]["libraries"])
    assert report["verdict"].startswith("ready to compare on GPU")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    hidden = runner.framework_environment("tf")
    assert hidden["gpus"] == [] and hidden["cuda_visible_devices"] == "-1"
    diagnosis = doctor.gpu_diagnosis(hidden, report["machine"])
    assert diagnosis.startswith("CUDA_VISIBLE_DEVICES='-1' hides the GPUs"), diagnosis


def test_both_same_device_guard_on_a_gpu_host(torch_gpu, tf_gpus, monkeypatch):
    """Claim: compare refuses to set one framework on the GPU against the other on the CPU.
    Here both see the GPU and pass; then TensorFlow's environment, as a CPU-only TensorFlow
    would describe it beside this GPU, is refused in one line."""
    from compare.errors import UserError
    from compare.experiment.config import RunConfig
    configs = [RunConfig(framework=fw) for fw in ("tf", "torch")]
    assert same_device.check_same_device(configs) == {"tf": "gpu", "torch": "gpu"}
    real = runner.framework_environment
    monkeypatch.setattr(runner, "framework_environment", lambda fw: (
        {**real(fw), "gpus": []} if fw == "tf" else real(fw)))
    with pytest.raises(UserError, match="different devices"):
        same_device.check_same_device(configs)
