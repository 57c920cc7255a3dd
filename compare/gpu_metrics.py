"""GPU measurements beside the clock: NVML sampling (utilisation, memory, power, energy) and MFU.

Framework-neutral: NVML (nvidia-ml-py) reads the driver directly, so both frameworks are
sampled by the same code. Where there is no NVML (no driver, CPU runs) every figure is
null with the reason.
"""

from __future__ import annotations

import threading
import time
from typing import Any

# Dense peak throughput in TFLOP/s per GPU, from the vendors' data sheets (no sparsity).
# Matched in order against the NVML/framework device name, most specific first.
# Keys: the math mode a run uses: fp16 / bf16 (mixed precision on tensor cores), tf32
# (float32 with TF32 on), fp32 (float32, TF32 off: the CUDA cores' rate).
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    ("H200", {"fp16": 989.0, "bf16": 989.0, "tf32": 494.0, "fp32": 67.0}),
    ("H100 PCIe", {"fp16": 756.0, "bf16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"fp16": 835.0, "bf16": 835.0, "tf32": 418.0, "fp32": 60.0}),
    ("H100", {"fp16": 989.0, "bf16": 989.0, "tf32": 494.0, "fp32": 67.0}),  # SXM
    ("A100", {"fp16": 312.0, "bf16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"fp16": 362.0, "bf16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    ("L4", {"fp16": 121.0, "bf16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10G", {"fp16": 70.0, "bf16": 70.0, "tf32": 35.0, "fp32": 31.2}),
    ("A10", {"fp16": 125.0, "bf16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("RTX 4090", {"fp16": 165.2, "bf16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    ("RTX 3090", {"fp16": 71.0, "bf16": 71.0, "tf32": 35.6, "fp32": 35.6}),
    ("V100", {"fp16": 125.0, "fp32": 15.7}),
    ("T4", {"fp16": 65.0, "fp32": 8.1}),
]


def math_mode(on_gpu: bool, precision: str, tf32: bool) -> str | None:
    """The peak-table column a run's arithmetic uses (None on CPU)."""
    if not on_gpu:
        return None
    if precision == "mixed":
        return "fp16"
    return "tf32" if tf32 else "fp32"


def peak_flops(device_name: str | None, mode: str | None) -> tuple[float | None, str | None]:
    """(peak FLOP/s of one device, None) or (None, why there is none)."""
    if device_name is None or mode is None:
        return None, "CPU run: no peak-FLOP figure for CPUs in the table"
    for key, peaks in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            if mode not in peaks:
                return None, f"{device_name}: no {mode} peak in the table"
            return peaks[mode] * 1e12, None
    return None, f"{device_name} is not in the peak-FLOP table (compare/gpu_metrics.py)"


def mfu(achieved_flops_per_s: float | None, device_name: str | None, mode: str | None,
        replicas: int) -> dict[str, Any]:
    """Model FLOPs utilisation: achieved / (peak of one device x replicas)."""
    peak, why = peak_flops(device_name, mode)
    if peak is None or not achieved_flops_per_s:
        return {"mfu": None, "peak_flops_per_s": peak, "mfu_note": why or "no throughput measured"}
    return {"mfu": achieved_flops_per_s / (peak * replicas), "peak_flops_per_s": peak * replicas,
            "mfu_note": f"analytic training FLOPs x images/s / "
                        f"({mode} peak of {device_name} x {replicas})"}


def nvml_indices(pci_bus_ids: list[str], names: tuple[str, ...]) -> list[int]:
    """NVML indices of the GPUs with these PCI bus ids. CUDA numbers only the visible GPUs
    (CUDA_VISIBLE_DEVICES) and may order them differently; NVML numbers every board. Where
    NVML or a bus id is missing, the CUDA ordinal in the framework's device name is used."""
    fallback = [int(name.rsplit(":", 1)[-1]) for name in names]
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library or no driver: the sampler will say why
        return fallback
    try:
        return [pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bus))
                if bus else default for bus, default in zip(pci_bus_ids, fallback)]
    except pynvml.NVMLError:
        return fallback
    finally:
        pynvml.nvmlShutdown()


class NvmlSampler:
    """Samples utilisation, memory and power of some GPUs on a background thread, and reads
    the cumulative energy counter at epoch boundaries."""

    def __init__(self, indices: list[int], interval_s: float = 0.2):
        import pynvml
        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.interval_s = interval_s
        # (utilisation %, memory bytes, power W)
        self.samples: list[tuple[float, float, float]] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True, name="nvml-sampler")
        self.energy_start: float | None = None
        self.thread.start()

    def _energy_j(self) -> float | None:
        try:  # millijoules since the driver loaded (Volta and newer)
            return sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)
                       for h in self.handles) / 1000.0
        except self.nvml.NVMLError:
            return None

    def _sample(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            try:
                util = sum(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu
                           for h in self.handles) / len(self.handles)
                memory = sum(self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles)
                power = sum(self.nvml.nvmlDeviceGetPowerUsage(h) for h in self.handles) / 1000.0
            except self.nvml.NVMLError:
                continue
            with self.lock:
                self.samples.append((util, memory, power))

    def begin_epoch(self) -> None:
        with self.lock:
            self.samples = []
        self.energy_start = self._energy_j()
        self.started = time.perf_counter()

    def end_epoch(self) -> dict[str, Any]:
        energy = self._energy_j()
        with self.lock:
            samples = list(self.samples)
        record: dict[str, Any] = {"samples": len(samples), "interval_s": self.interval_s}
        if samples:
            record["utilisation_pct_mean"] = sum(s[0] for s in samples) / len(samples)
            record["memory_used_bytes_max"] = max(s[1] for s in samples)
            record["power_w_mean"] = sum(s[2] for s in samples) / len(samples)
        if energy is not None and self.energy_start is not None:
            record["energy_j"] = energy - self.energy_start
            record["energy_source"] = "nvmlDeviceGetTotalEnergyConsumption difference"
        elif samples:  # no counter: integrate the sampled power over the epoch
            record["energy_j"] = record["power_w_mean"] * (time.perf_counter() - self.started)
            record["energy_source"] = "mean sampled power x epoch time"
        return record

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=2)
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


class NoSampler:
    """Stands in where NVML cannot be used; every epoch's record says why."""

    def __init__(self, reason: str):
        self.reason = reason

    def begin_epoch(self) -> None:
        pass

    def end_epoch(self) -> dict[str, Any]:
        return {"energy_j": None, "note": self.reason}

    def close(self) -> None:
        pass


def sampler(indices: list[int] | None):
    """An NvmlSampler for these GPU indices, or a NoSampler with the reason."""
    if not indices:
        return NoSampler("CPU run: no GPU to sample")
    try:
        return NvmlSampler(indices)
    except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError: no driver, no library
        return NoSampler(f"NVML unavailable ({exc.__class__.__name__}: {exc})")
