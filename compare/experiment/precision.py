"""Which precision a run computes in, chosen the same way for both frameworks on the machine at
hand (`--precision auto`, the default), with the reason.

- a GPU with tensor cores (compute capability 7.0 or newer): mixed, float16 with dynamic
  loss scaling;
- a CPU: float32, unless `cnncompare doctor` measured mixed (bfloat16) faster than float32
  in both frameworks on this CPU, for this model and these framework versions (kept under
  $CNNCOMPARE_HOME). bfloat16 mixed precision does not speed both frameworks up alike on a
  CPU, and how much depends on the network: on an AMD EPYC with AVX512-BF16 it took 0.79x
  float32's time in TensorFlow and 0.63x in PyTorch on ResNet-9, and a CPU without bfloat16
  instructions emulates it, 9.7x and 19.5x float32's time (`benchmarks/setting_ab.py`:
  benchmarks/results/cpu-epyc-2core/precision-resnet9.md, precision-resnet9-as-avx2.md).
  A default that helps one side and handicaps the other is no fair comparison;
- a GPU without tensor cores: float32.

`mixed` and `fp32` keep their meaning when asked for; `mixed` on a CPU without native
bfloat16 runs, with a warning, and where doctor measured it slower than float32 in one
framework, with that handicap recorded (the report's caveat gives the two figures). Each
framework process resolves its own precision from the device it actually uses (the same rule
in both); the parent resolves it from NVML where it needs to know beforehand.
$CNNCOMPARE_CPU_FLAGS replaces the CPU's flags as read from /proc/cpuinfo, so a machine with
bfloat16 instructions can be run as one without.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from compare.experiment.frameworks import FRAMEWORK_NAMES, FRAMEWORK_PACKAGES
from compare.machine import gpu_metrics
from compare.machine.cpu import (  # noqa: F401 - FLAGS_ENV and cpu_flags: the rule's inputs
    FLAGS_ENV,
    cpu_description,
    cpu_flags,
    native_bfloat16,
)

CHOICES = ("auto", "mixed", "fp16", "fp32")  # --precision
# Not a choice of --precision: the parity check's probe computes in float64 on the CPU
# (compare.experiment.parity), where rounding is ~1e-16 of a value and only meaning differs.
PROBE_ONLY = "fp64"
TENSOR_CORES_FROM = (7, 0)  # Volta: the first GPUs with float16 tensor cores


@dataclass(frozen=True)
class Resolved:
    precision: str  # "mixed" or "fp32"
    compute_type: str  # "float16", "bfloat16" or "float32"
    reason: str  # why, in words
    warning: str | None = None  # a choice the user made that costs them (one line)
    handicap: str | None = None  # mixed measured slower than float32 in a framework here

    def describe(self) -> str:
        return f"{self.compute_type} ({self.reason})"

    def to_dict(self, requested: str) -> dict:
        return {"requested": requested, "precision": self.precision,
                "compute_type": self.compute_type, "reason": self.reason,
                "warning": self.warning, "handicap": self.handicap}


MEASURED_FILE = "precision-measured.json"  # under $CNNCOMPARE_HOME, written by doctor
# auto picks mixed on a CPU only where doctor measured its step under this share of float32's
# in both frameworks: doctor times three steps, and a smaller gain is within their spread
MIXED_FASTER = 0.95


def _measured_path() -> Path:
    from compare.experiment.datasets.cache import home
    return home() / MEASURED_FILE


def measurement_key(model: str) -> str:
    """What a measurement of mixed against float32 holds for: this CPU as described (its
    model, cores and instructions, under $CNNCOMPARE_CPU_FLAGS where set), the model and both
    frameworks' installed versions (read from their metadata, neither imported)."""
    from importlib import metadata

    versions = {}
    for package in FRAMEWORK_PACKAGES.values():
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return json.dumps({"cpu": cpu_description(), "model": model, **versions}, sort_keys=True)


def record_measurement(model: str, step_ms: dict[str, dict[str, float]]) -> dict:
    """Keep doctor's step times ({framework: {"fp32": ms, "mixed": ms}}) for this CPU, model
    and versions; returns the entry."""
    path = _measured_path()
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    entry = {"step_ms": step_ms, "measured_at": time.strftime("%Y-%m-%d"),
             "by": "cnncompare doctor", "key": json.loads(measurement_key(model))}
    kept[measurement_key(model)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept, indent=2))
    return entry


def measurement(model: str | None) -> dict | None:
    """doctor's step times of mixed and float32 on this CPU for `model` and these framework
    versions, or None where none was measured."""
    if not model:
        return None
    try:
        entry = json.loads(_measured_path().read_text()).get(measurement_key(model))
    except (OSError, ValueError):
        return None
    step_ms = (entry or {}).get("step_ms") or {}
    if all(isinstance(step_ms.get(fw), dict) and step_ms[fw].get("fp32") and
           step_ms[fw].get("mixed") for fw in FRAMEWORK_PACKAGES):
        return entry
    return None


def _figures(entry: dict) -> str:
    """'TensorFlow/Keras 20 -> 16 ms, PyTorch 21 -> 27 ms a step (float32 -> mixed)'."""
    step = entry["step_ms"]
    return (", ".join(f"{FRAMEWORK_NAMES[fw]} {step[fw]['fp32']:.3g} -> {step[fw]['mixed']:.3g} ms"
                      for fw in FRAMEWORK_PACKAGES)
            + f" a step (float32 -> mixed; cnncompare doctor, {entry['measured_at']})")


def resolve(requested: str, on_gpu: bool, capability: tuple[int, int] | None = None,
            flags: frozenset[str] | None = None, model: str | None = None) -> Resolved:
    """The precision a run computes in, on a GPU of `capability` or on this CPU (where
    doctor's measurement for `model`, if any, decides `auto`)."""
    if requested == PROBE_ONLY:
        return Resolved("fp64", "float64", "the parity check's float64 probe on the CPU")
    if requested not in CHOICES:
        raise ValueError(f"unknown precision {requested!r}; choose one of {', '.join(CHOICES)}")
    if requested == "fp32":
        return Resolved("fp32", "float32", "--precision fp32")
    if requested == "fp16":  # the GPU's mixed precision on any device, loss scaling included
        return Resolved("mixed", "float16", f"--precision fp16: float16 with dynamic loss "
                                            f"scaling on the {'GPU' if on_gpu else 'CPU'}")
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
    measured = measurement(model)
    steps = ((measured or {}).get("step_ms") or {}).items()
    slower = [FRAMEWORK_NAMES[fw] for fw, step in steps if step["mixed"] > step["fp32"]]
    not_faster = [FRAMEWORK_NAMES[fw] for fw, step in steps
                  if step["mixed"] > MIXED_FASTER * step["fp32"]]
    if requested == "mixed":
        handicap = (f"mixed was slower than float32 here in {' and '.join(slower)}: "
                    f"{_figures(measured)}" if measured and slower else None)
        if native:
            return Resolved("mixed", "bfloat16", f"--precision mixed on a CPU with native "
                                                 f"bfloat16, {native}", handicap=handicap)
        return Resolved("mixed", "bfloat16", "--precision mixed on a CPU",
                        warning="this CPU has no native bfloat16, neither AMX nor "
                                "AVX512-BF16: mixed precision emulates it, slower than float32",
                        handicap=handicap)
    if measured and not not_faster:
        return Resolved("mixed", "bfloat16", f"auto: mixed measured faster than float32 in "
                                             f"both frameworks on this CPU, {_figures(measured)}")
    if measured:
        return Resolved("fp32", "float32", f"auto: float32 on a CPU, mixed not measured faster "
                                           f"in {' and '.join(not_faster)}: "
                                           f"{_figures(measured)}")
    return Resolved("fp32", "float32", "auto: float32 on a CPU, where bfloat16 mixed precision "
                                       "speeds the two frameworks up unequally or is emulated; "
                                       "cnncompare doctor measures both here")


def expected(requested: str, device: str, model: str | None = None) -> Resolved:
    """What a run will resolve to, judged in the parent before any framework starts: the GPU
    from NVML (`device` auto or gpu), else this CPU's flags and doctor's measurement."""
    if requested in ("fp32", "fp16", PROBE_ONLY):  # the same on every device
        return resolve(requested, False)
    capability = nvml_capability() if device != "cpu" else None
    if capability is not None:
        return resolve(requested, True, capability)
    return resolve(requested, False, model=model)


def nvml_capability() -> tuple[int, int] | None:
    """The first GPU's CUDA compute capability from NVML; None without a GPU or NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver: no GPU to ask
        return None
    try:
        if not gpu_metrics.visible_gpu_count(pynvml):
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
        return gpu_metrics.visible_gpu_count(pynvml) > 0
    except Exception:  # noqa: BLE001
        return False
