"""NVML sampling and MFU, with NVML replaced at its boundary (the pynvml module)."""

from __future__ import annotations

import sys
import time
import types

import pytest
from conftest import tiny_config

from compare import schema
from compare.experiment import networks, precision_rule
from compare.machine import gpu_metrics
from compare.run import loop
from compare.run import recorder as recorder_module
from compare.run.interface import DeviceChoice


class VirtualClock:
    """Seconds that pass only when a test says so: energy and epoch time become exact."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> VirtualClock:
    """The sampler's clock (epoch time), virtual."""
    virtual = VirtualClock()
    monkeypatch.setattr(gpu_metrics, "time", types.SimpleNamespace(perf_counter=virtual))
    return virtual


def fake_pynvml(clock, power_mw: int = 300_000, energy_mj_per_s: float = 300_000.0,
                fail_init: bool = False):
    """A stand-in for nvidia-ml-py: a GPU drawing 300 W at 75% utilisation, its energy
    counter running on `clock`."""
    module = types.ModuleType("pynvml")
    started = clock()

    class NVMLError(Exception):
        pass

    def init():
        if fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    module.NVMLError = NVMLError
    module.nvmlInit = init
    module.nvmlShutdown = lambda: None
    module.nvmlDeviceGetHandleByIndex = lambda i: f"gpu{i}"
    module.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=75, memory=40)
    module.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2 * 2**30,
                                                                     total=80 * 2**30)
    module.nvmlDeviceGetPowerUsage = lambda h: power_mw
    module.nvmlDeviceGetTotalEnergyConsumption = lambda h: int(
        1e9 + (clock() - started) * energy_mj_per_s)
    return module


def _sampled_epoch(sampler, clock, seconds: float, samples: int) -> dict:
    """One epoch of `seconds` on the virtual clock with `samples` samples in it, taken here
    (the background thread stopped first, so it adds none)."""
    sampler.stop_event.set()
    sampler.thread.join()
    sampler.begin_epoch()
    for _ in range(samples):
        clock.advance(seconds / samples)
        sampler.sample_once()
    record = sampler.end_epoch()
    sampler.close()
    return record


def test_sampler_reads_utilisation_power_and_the_energy_counter(monkeypatch, clock):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(clock))
    sampler = gpu_metrics.sampler([0])
    assert isinstance(sampler, gpu_metrics.NvmlSampler)
    record = _sampled_epoch(sampler, clock, seconds=0.6, samples=3)
    assert record["samples"] == 3 and record["utilisation_pct_mean"] == 75
    assert record["power_w_mean"] == 300.0 and record["memory_used_bytes_max"] == 2 * 2**30
    assert record["energy_j"] == pytest.approx(300 * 0.6)  # 300 W for 0.6 s, from the counter
    assert record["energy_source"].startswith("nvmlDeviceGetTotalEnergyConsumption")


def test_no_nvml_is_null_with_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(time.monotonic, fail_init=True))
    sampler = gpu_metrics.sampler([0])
    assert sampler.end_epoch() == {"energy_j": None,
                                   "note": "NVML unavailable "
                                           "(NVMLError: NVML Shared Library Not Found)"}
    assert gpu_metrics.sampler(None).end_epoch()["note"] == "CPU run: no GPU to sample"


def test_mfu_against_the_peak_table():
    peak, why = gpu_metrics.peak_flops("NVIDIA H100 80GB HBM3", "fp16")
    assert peak == 989e12 and why is None
    assert gpu_metrics.peak_flops("NVIDIA H100 PCIe", "fp16")[0] == 756e12
    assert gpu_metrics.peak_flops("NVIDIA A100-SXM4-40GB", "fp32")[0] == 19.5e12
    record = gpu_metrics.mfu(98.9e12, "NVIDIA H100 80GB HBM3", "fp16", replicas=2)
    assert record["mfu"] == pytest.approx(0.05) and record["peak_flops_per_s"] == 2 * 989e12
    unknown = gpu_metrics.mfu(1e12, "Imaginary GPU 9000", "fp16", 1)
    assert unknown["mfu"] is None and "not in the peak-FLOP table" in unknown["mfu_note"]
    assert gpu_metrics.mfu(1e12, None, None, 1)["mfu_note"].startswith("CPU run")
    assert gpu_metrics.math_mode(True, "mixed", False) == "fp16"
    assert (gpu_metrics.math_mode(True, "fp32", True) == "tf32"
            and gpu_metrics.math_mode(False, "fp32", False) is None)


def test_a_gpu_run_records_energy_per_epoch_and_mfu(tmp_path, monkeypatch):
    """The loop with a GPU-looking trainer: energy per epoch and in the summary, MFU from the
    table."""
    from test_reliability import FakeTrainer
    gpu_clock = VirtualClock()  # the GPU's energy counter runs only while a step computes
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpu_clock))

    class SlowGpuTrainer(FakeTrainer):
        gpu_indices = [0]
        choice = DeviceChoice("gpu", ("cuda:0",), "NVIDIA H100 80GB HBM3", "GPU (test)")
        numerics = {"resolved": precision_rule.choose("mixed", True, (9, 0))}  # float16 on an H100

        def train_step(self, batch, lr):
            gpu_clock.advance(0.05)
            return 1.0

    config = tiny_config(tmp_path, epochs=2, precision="mixed", timing_window=2)
    trainer = SlowGpuTrainer(99, None)
    recorder = recorder_module.Recorder(config, trainer, networks.get_spec("lenet"), {}, {}, {})
    assert loop.train_epochs(trainer, config, recorder) == 0
    result = schema.read_result(tmp_path / "run" / "result.json")
    energies = [e["gpu"]["energy_j"] for e in result["epochs"]]
    # 300 W x 4 steps x 50 ms
    assert energies == pytest.approx([300 * 4 * 0.05] * 2, abs=0.01)  # the counter counts mJ
    summary = result["summary"]
    assert summary.energy_j == pytest.approx(sum(energies))
    assert summary.energy_per_image_j == pytest.approx(summary.energy_j / (2 * 4 * 32))
    assert summary.mfu == pytest.approx(summary.achieved_flops_per_s / 989e12)
    assert "fp16 peak of NVIDIA H100" in summary.mfu_note


def test_cpu_runs_say_why_there_is_no_mfu_or_energy(tmp_path):
    from test_reliability import FakeTrainer
    config = tiny_config(tmp_path, epochs=1)
    trainer = FakeTrainer(99, None)
    recorder = recorder_module.Recorder(config, trainer, networks.get_spec("lenet"), {}, {}, {})
    loop.train_epochs(trainer, config, recorder)
    summary = schema.read_result(tmp_path / "run" / "result.json")["summary"]
    assert summary.mfu is None and summary.mfu_note.startswith("CPU run")
    assert summary.energy_j is None and summary.energy_note == "CPU run: no GPU to sample"


def _refusing(module, *queries):
    """`module` with these NVML queries raising NVMLError_NotSupported, as a VM's GPU does."""
    class NVMLError_NotSupported(module.NVMLError):
        pass

    def refuse(*args):
        raise NVMLError_NotSupported("Not Supported")
    for query in queries:
        setattr(module, query, refuse)
    return module


def test_a_field_the_device_refuses_is_null_with_its_reason_and_the_rest_is_read(monkeypatch,
                                                                                  clock):
    monkeypatch.setitem(sys.modules, "pynvml", _refusing(
        fake_pynvml(clock), "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetUtilizationRates"))
    sampler = gpu_metrics.sampler([0])
    record = _sampled_epoch(sampler, clock, seconds=0.5, samples=2)
    assert record["utilisation_pct_mean"] is None and record["power_w_mean"] == 300.0
    assert record["energy_source"] == "mean sampled power x epoch time"  # no counter: power
    assert record["energy_j"] == pytest.approx(300 * 0.5)
    assert record["unavailable"] == {"energy_j": "NVMLError_NotSupported: Not Supported",
                                     "utilisation_pct": "NVMLError_NotSupported: Not Supported"}
    # neither counter nor power: energy is null, and the record says why
    monkeypatch.setitem(sys.modules, "pynvml", _refusing(
        fake_pynvml(clock), "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"))
    sampler = gpu_metrics.sampler([0])
    sampler.begin_epoch()
    record = sampler.end_epoch()
    sampler.close()
    assert record["energy_j"] is None and "NotSupported" in record["note"]


def test_env_and_doctor_survive_refused_nvml_fields(monkeypatch):
    from compare.machine import environment
    module = fake_pynvml(time.monotonic)
    module.nvmlDeviceGetCount = lambda: 1
    module.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    module.nvmlSystemGetDriverVersion = lambda: "580.1"
    module.nvmlSystemGetCudaDriverVersion = lambda: 13000
    monkeypatch.setitem(sys.modules, "pynvml", _refusing(
        module, "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetMemoryInfo"))
    found = environment.nvml_devices()
    assert found["available"] and found["cuda_driver_version"] == "13.0"
    assert found["devices"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                 "memory_bytes": None, "power_limit_w": None}]
    assert set(found["unavailable"]) == {"gpu 0 memory", "gpu 0 power limit"}
    environment.print_table({"machine": {**environment.machine(), "nvml": found},
                             "frameworks": {"tf": {"error": "x"}, "torch": {"error": "y"}}})


def test_device_names_find_their_own_row_of_the_peak_table():
    assert gpu_metrics.peak_row("NVIDIA H100 80GB HBM3") == "H100"  # the SXM board
    assert gpu_metrics.peak_row("NVIDIA H100 PCIe") == "H100 PCIe"
    assert gpu_metrics.peak_row("NVIDIA H100 NVL") == "H100 NVL"
    assert gpu_metrics.peak_row("NVIDIA H200") == "H200"
    assert gpu_metrics.peak_row("NVIDIA H200 NVL") == "H200 NVL"  # not the SXM H200
    assert gpu_metrics.peak_flops("NVIDIA H200 NVL", "fp16")[0] == 835e12
    assert gpu_metrics.peak_row("NVIDIA A10") == "A10"  # not A100
    assert gpu_metrics.peak_row("NVIDIA L40S") == "L40S"  # not L4
    assert gpu_metrics.peak_row("NVIDIA A100-SXM4-80GB") == "A100"
    assert gpu_metrics.peak_row("Imaginary GPU 9000") is None
    peak, why = gpu_metrics.peak_flops("Imaginary GPU 9000", "fp16")
    assert peak is None and "not in the peak-FLOP table" in why
