"""Which precision a run computes in, chosen the same way for both frameworks on the machine at
hand (`--precision auto`, the default), with the reason.

- a GPU with tensor cores (compute capability 7.0 or newer): mixed, float16 with dynamic
  loss scaling;
- a CPU that computes bfloat16 natively (AMX, AVX512-BF16: read from its flags): mixed,
  bfloat16;
- anything else: float32. A CPU without native bfloat16 only emulates it, several times
  slower than float32, so a default comparison there would compare two emulations.

`mixed` and `fp32` keep their meaning when asked for; `mixed` on a CPU without native
bfloat16 runs, with a warning. Each framework process resolves its own precision from the
device it actually uses (the same rule in both); the parent resolves it from NVML and the
CPU's flags where it needs to know beforehand.
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
    if native:
        return Resolved("mixed", "bfloat16", f"auto: this CPU computes bfloat16 natively, "
                                             f"{native}")
    return Resolved("fp32", "float32", "auto: this CPU has no native bfloat16, neither AMX nor "
                                       "AVX512-BF16, so float32 is its fastest")


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
