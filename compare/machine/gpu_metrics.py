"""GPU measurements beside the clock: NVML sampling (utilisation, memory, power, energy) and MFU.

Framework-neutral: NVML (nvidia-ml-py) reads the driver directly, so both frameworks are
sampled by the same code. Where there is no NVML (no driver, CPU runs) every figure is
null with the reason.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any, Callable, TypedDict

from compare.schema import GpuEpoch

# Dense peak throughput in TFLOP/s per GPU, from the vendors' data sheets (no sparsity).
# A device name matches the row whose model words it contains, the longest such row when
# several do ("NVIDIA H100 80GB HBM3" is the SXM board: it matches "H100", not "H100 PCIe";
# "NVIDIA H200 NVL" matches "H200 NVL", not "H200"). Keys: the math mode a run uses: fp16 /
# bf16 (mixed precision on tensor cores), tf32 (float32 with TF32 on), fp32 (float32, TF32
# off: the CUDA cores' rate).
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp16": 989.0, "bf16": 989.0, "tf32": 494.0, "fp32": 67.0},  # SXM
    "H200 NVL": {"fp16": 835.0, "bf16": 835.0, "tf32": 418.0, "fp32": 60.0},
    "H100": {"fp16": 989.0, "bf16": 989.0, "tf32": 494.0, "fp32": 67.0},  # SXM
    "H100 PCIe": {"fp16": 756.0, "bf16": 756.0, "tf32": 378.0, "fp32": 51.0},
    "H100 NVL": {"fp16": 835.0, "bf16": 835.0, "tf32": 418.0, "fp32": 60.0},
    "A100": {"fp16": 312.0, "bf16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L40S": {"fp16": 362.0, "bf16": 362.0, "tf32": 183.0, "fp32": 91.6},
    "L4": {"fp16": 121.0, "bf16": 121.0, "tf32": 60.0, "fp32": 30.3},
    "A10G": {"fp16": 70.0, "bf16": 70.0, "tf32": 35.0, "fp32": 31.2},
    "A10": {"fp16": 125.0, "bf16": 125.0, "tf32": 62.5, "fp32": 31.2},
    "RTX 4090": {"fp16": 165.2, "bf16": 165.2, "tf32": 82.6, "fp32": 82.6},
    "RTX 3090": {"fp16": 71.0, "bf16": 71.0, "tf32": 35.6, "fp32": 35.6},
    "V100": {"fp16": 125.0, "fp32": 15.7},
    "T4": {"fp16": 65.0, "fp32": 8.1},
}


def _words(name: str) -> list[str]:
    """A device name as lower-case words, vendor names dropped: "NVIDIA H100 80GB HBM3" ->
    ["h100", "80gb", "hbm3"]."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    return [w for w in words if w not in ("nvidia", "tesla", "geforce")]


def peak_row(device_name: str) -> str | None:
    """The PEAK_TFLOPS key for a device name: the longest key whose words appear, in order
    and next to each other, among the name's words; None when no key does."""
    words = _words(device_name)
    found = []
    for key in PEAK_TFLOPS:
        wanted = _words(key)
        if any(words[i:i + len(wanted)] == wanted for i in range(len(words))):
            found.append(key)
    return max(found, key=lambda key: len(_words(key)), default=None)


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
    key = peak_row(device_name)
    if key is None:
        return None, (f"{device_name} is not in the peak-FLOP table "
                      "(compare/machine/gpu_metrics.py PEAK_TFLOPS)")
    if mode not in PEAK_TFLOPS[key]:
        return None, f"{device_name} ({key}): no {mode} peak in the table"
    return PEAK_TFLOPS[key][mode] * 1e12, None


class Mfu(TypedDict):
    mfu: float | None  # achieved / peak
    peak_flops_per_s: float | None  # of every replica together
    mfu_note: str  # how it was computed, or why not


def mfu(achieved_flops_per_s: float | None, device_name: str | None, mode: str | None,
        replicas: int) -> Mfu:
    """Model FLOPs utilisation: achieved / (peak of one device x replicas)."""
    peak, why = peak_flops(device_name, mode)
    if peak is None or not achieved_flops_per_s:
        return {"mfu": None, "peak_flops_per_s": peak, "mfu_note": why or "no throughput measured"}
    return {"mfu": achieved_flops_per_s / (peak * replicas), "peak_flops_per_s": peak * replicas,
            "mfu_note": f"analytic training FLOPs x images/s / "
                        f"({mode} peak of {device_name} x {replicas})"}


def cuda_visible_limit() -> int | None:
    """How many GPUs CUDA_VISIBLE_DEVICES lets CUDA programs see; None where it is unset.
    CUDA takes the listed devices up to the first entry that names none, so "" and "-1"
    hide every GPU. NVML ignores the variable (it numbers every board), so each count of
    GPUs a framework will see goes through here."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return None
    count = 0
    for entry in listed.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        count += 1
    return count


def visible_gpu_count(pynvml: Any) -> int:
    """The GPUs an initialised NVML shows that CUDA_VISIBLE_DEVICES leaves visible."""
    boards = int(pynvml.nvmlDeviceGetCount())
    limit = cuda_visible_limit()
    return boards if limit is None else min(boards, limit)


def nvml_indices(pci_bus_ids: list[str], names: tuple[str, ...]) -> list[int]:
    """NVML indices of the GPUs with these PCI bus ids. CUDA numbers only the visible GPUs
    (CUDA_VISIBLE_DEVICES) and may order them differently; NVML numbers every board. Where
    NVML or a bus id is missing, the CUDA ordinal in the framework's device name is used."""
    # devices carved from one chip (--share-device) name one board: sample it once, or its
    # energy would count twice
    fallback = list(dict.fromkeys(int(name.rsplit(":", 1)[-1]) for name in names))
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library or no driver: the sampler will say why
        return fallback
    ordinals = [int(name.rsplit(":", 1)[-1]) for name in names]
    try:
        return list(dict.fromkeys(
            pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bus)) if bus
            else ordinal for bus, ordinal in zip(pci_bus_ids, ordinals)))
    except pynvml.NVMLError:
        return fallback
    finally:
        pynvml.nvmlShutdown()


def board_memory_bytes(cuda_ordinal: int) -> int:
    """Total memory of the board behind CUDA device `cuda_ordinal`, from NVML (TensorFlow
    states it only once its devices are fixed, too late to carve logical GPUs from it). The
    ordinal counts the boards CUDA_VISIBLE_DEVICES lists; raises RuntimeError when NVML
    cannot tell."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library or no driver
        raise RuntimeError(f"NVML unavailable ({nvml_reason(exc)})") from None
    try:
        chosen = visible[cuda_ordinal] if cuda_ordinal < len(visible) else str(cuda_ordinal)
        handle = (pynvml.nvmlDeviceGetHandleByIndex(int(chosen)) if chosen.isdigit()
                  else pynvml.nvmlDeviceGetHandleByUUID(chosen))
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"NVML could not read GPU {cuda_ordinal}'s memory "
                           f"({nvml_reason(exc)})") from None
    finally:
        pynvml.nvmlShutdown()


def nvml_reason(exc: BaseException) -> str:
    """Why an NVML query failed, in one phrase (e.g. "NVMLError_NotSupported: Not Supported")."""
    return f"{exc.__class__.__name__}: {exc}"


# What the sampler reads from every GPU: field -> (the NVML query, its value in the unit the
# record uses). Each is read on its own: a field the device refuses (virtual machines and
# some boards refuse power or the energy counter) becomes null with the reason, the others
# are still read.
SAMPLED = {
    "utilisation_pct": lambda nvml, h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
    "memory_used_bytes": lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).used),
    "power_w": lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,  # mW
}


class NvmlSampler:
    """Samples utilisation, memory and power of some GPUs on a background thread, and reads
    the cumulative energy counter at epoch boundaries. Every query is guarded: a field the
    device refuses is null in the records, with the reason in `unavailable`."""

    def __init__(self, indices: list[int], interval_s: float = 0.2):
        import pynvml
        self.nvml = pynvml
        pynvml.nvmlInit()
        try:
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        except pynvml.NVMLError:
            pynvml.nvmlShutdown()
            raise
        self.interval_s = interval_s
        self.unavailable: dict[str, str] = {}  # field -> why the device refused it
        self.samples: list[dict[str, float]] = []  # field -> value summed over the GPUs
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True, name="nvml-sampler")
        self.energy_start: float | None = None
        self.started = time.perf_counter()
        self.thread.start()

    def _read(self, field: str, query: Callable[[Any, Any], float]) -> float | None:
        """`query` summed over the GPUs, or None (the first refusal is kept in unavailable)."""
        if field in self.unavailable:
            return None
        try:
            return sum(query(self.nvml, h) for h in self.handles)
        except self.nvml.NVMLError as exc:
            self.unavailable[field] = nvml_reason(exc)
            return None
        except Exception as exc:  # noqa: BLE001 - a library/driver mismatch must not end the run
            self.unavailable[field] = nvml_reason(exc)
            return None

    def _energy_j(self) -> float | None:
        # millijoules since the driver loaded (Volta and newer)
        total = self._read("energy_j", lambda nvml, h: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        return None if total is None else total / 1000.0

    def _sample(self) -> None:
        while not self.stop_event.wait(self.interval_s):
            self.sample_once()

    def sample_once(self) -> None:
        """Read every sampled field once (the background thread's work, every interval_s)."""
        sample = {}
        for field, query in SAMPLED.items():
            value = self._read(field, query)
            if value is not None:
                sample[field] = value
        if sample:
            with self.lock:
                self.samples.append(sample)

    def begin_epoch(self) -> None:
        with self.lock:
            self.samples = []
        self.energy_start = self._energy_j()
        self.started = time.perf_counter()

    def end_epoch(self) -> GpuEpoch:
        energy = self._energy_j()
        elapsed = time.perf_counter() - self.started
        with self.lock:
            samples = list(self.samples)
        record: GpuEpoch = {"energy_j": None, "samples": len(samples),
                            "interval_s": self.interval_s, "gpus": len(self.handles)}

        def values(field: str) -> list[float]:
            return [s[field] for s in samples if field in s]
        utilisation = values("utilisation_pct")
        record["utilisation_pct_mean"] = (sum(utilisation) / len(utilisation) / len(self.handles)
                                          if utilisation else None)
        memory = values("memory_used_bytes")
        record["memory_used_bytes_max"] = max(memory) if memory else None
        power = values("power_w")
        power_w_mean = sum(power) / len(power) if power else None
        record["power_w_mean"] = power_w_mean
        if energy is not None and self.energy_start is not None:
            record["energy_j"] = energy - self.energy_start
            record["energy_source"] = "nvmlDeviceGetTotalEnergyConsumption difference"
        elif power_w_mean is not None:  # no counter: integrate the sampled power
            record["energy_j"] = power_w_mean * elapsed
            record["energy_source"] = "mean sampled power x epoch time"
        else:
            record["energy_j"] = None
            record["note"] = "NVML gave neither the energy counter nor power: " + "; ".join(
                f"{k}: {v}" for k, v in self.unavailable.items() if k in ("energy_j", "power_w"))
        if self.unavailable:
            record["unavailable"] = dict(self.unavailable)
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

    def end_epoch(self) -> GpuEpoch:
        return {"energy_j": None, "note": self.reason}

    def close(self) -> None:
        pass


def sampler(indices: list[int] | None) -> NvmlSampler | NoSampler:
    """An NvmlSampler for these GPU indices, or a NoSampler with the reason."""
    if not indices:
        return NoSampler("CPU run: no GPU to sample")
    try:
        return NvmlSampler(indices)
    except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError: no driver, no library
        return NoSampler(f"NVML unavailable ({exc.__class__.__name__}: {exc})")
