"""Which precision a run computes in, chosen the same way for both frameworks on the machine at
hand (`--precision auto`, the default), with the reason.

- a GPU with tensor cores (compute capability 7.0 or newer): mixed, float16 with dynamic
  loss scaling;
- a CPU: float32. bfloat16 mixed precision does not speed both frameworks up alike on a
  CPU, and how much depends on the network: on an AMD EPYC with AVX512-BF16 it took 0.79x
  float32's time in TensorFlow and 0.63x in PyTorch on ResNet-9, and a CPU without bfloat16
  instructions emulates it, 9.7x and 19.5x float32's time (`benchmarks/setting_ab.py`:
  benchmarks/results/cpu-epyc-2core/precision-resnet9.md, precision-resnet9-as-avx2.md).
  A default that helps one side more than the other, or handicaps it, is no fair comparison;
- a GPU without tensor cores: float32.

`mixed` and `fp32` keep their meaning when asked for; `mixed` on a CPU without native
bfloat16 runs, with a warning. Each framework process resolves its own precision from the
device it actually uses (the same rule in both); the parent resolves it from NVML where it
needs to know beforehand. $CNNCOMPARE_CPU_FLAGS replaces the CPU's flags as read from
/proc/cpuinfo, so a machine with bfloat16 instructions can be run as one without.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CHOICES = ("auto", "mixed", "fp32")
# CPU flags (as /proc/cpuinfo names them) that compute bfloat16 natively, best first.
NATIVE_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")
TENSOR_CORES_FROM = (7, 0)  # Volta: the first GPUs with float16 tensor cores
FLAGS_ENV = "CNNCOMPARE_CPU_FLAGS"  # overrides the CPU's flags (tests; a forced choice)


@dataclass(frozen=True)
class Resolved:
    precision: str  # "mixed" or "fp32"
    compute_type: str  # "float16", "bfloat16" or "float32"
    reason: str  # why, in words
    warning: str | None = None  # a choice the user made that costs them (one line)

    def describe(self) -> str:
        return f"{self.compute_type} ({self.reason})"

    def to_dict(self, requested: str) -> dict:
        return {"requested": requested, "precision": self.precision,
                "compute_type": self.compute_type, "reason": self.reason,
                "warning": self.warning}


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (Linux /proc/cpuinfo), or $CNNCOMPARE_CPU_FLAGS when set."""
    forced = os.environ.get(FLAGS_ENV)
    if forced is not None:
        return frozenset(forced.replace(",", " ").split())
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bfloat16(flags: frozenset[str]) -> str | None:
    """The flag by which this CPU computes bfloat16 natively, or None."""
    return next((flag for flag in NATIVE_BFLOAT16_FLAGS if flag in flags), None)


def resolve(requested: str, on_gpu: bool, capability: tuple[int, int] | None = None,
            flags: frozenset[str] | None = None) -> Resolved:
    """The precision a run computes in, on a GPU of `capability` or on this CPU."""
    if requested not in CHOICES:
        raise ValueError(f"unknown precision {requested!r}; choose one of {', '.join(CHOICES)}")
    if requested == "fp32":
        return Resolved("fp32", "float32", "--precision fp32")
    if on_gpu:
        cores = capability is None or tuple(capability) >= TENSOR_CORES_FROM
        shown = ".".join(map(str, capability)) if capability else "unknown"
        if requested == "mixed":
            return Resolved("mixed", "float16", "--precision mixed on a GPU")
        if cores:
            return Resolved("mixed", "float16", f"auto: a GPU with tensor cores, compute "
                                                f"capability {shown}")
        return Resolved("fp32", "float32", f"auto: no tensor cores on this GPU, compute "
                                           f"capability {shown} below 7.0")
    flags = cpu_flags() if flags is None else flags
    native = native_bfloat16(flags)
    if requested == "mixed":
        if native:
            return Resolved("mixed", "bfloat16", f"--precision mixed on a CPU with native "
                                                 f"bfloat16, {native}")
        return Resolved("mixed", "bfloat16", "--precision mixed on a CPU",
                        warning="this CPU has no native bfloat16, neither AMX nor "
                                "AVX512-BF16: mixed precision emulates it, slower than float32")
    return Resolved("fp32", "float32", "auto: float32 on a CPU, where bfloat16 mixed precision "
                                       "speeds the two frameworks up unequally or is emulated")


def expected(requested: str, device: str) -> Resolved:
    """What a run will resolve to, judged in the parent before any framework starts: the GPU
    from NVML (`device` auto or gpu), else this CPU's flags."""
    if requested == "fp32":
        return resolve("fp32", False)
    capability = nvml_capability() if device != "cpu" else None
    if capability is not None:
        return resolve(requested, True, capability)
    return resolve(requested, False)


def nvml_capability() -> tuple[int, int] | None:
    """The first GPU's CUDA compute capability from NVML; None without a GPU or NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver: no GPU to ask
        return None
    try:
        if not pynvml.nvmlDeviceGetCount():
            return None
        return tuple(pynvml.nvmlDeviceGetCudaComputeCapability(
            pynvml.nvmlDeviceGetHandleByIndex(0)))
    except Exception:  # noqa: BLE001 - a field the device refuses: assume tensor cores
        return (TENSOR_CORES_FROM if _has_gpu(pynvml) else None)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _has_gpu(pynvml) -> bool:
    try:
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:  # noqa: BLE001
        return False
