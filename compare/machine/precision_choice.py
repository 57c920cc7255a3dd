"""The precision rule (compare.experiment.precision_rule) applied to the machine at hand: this CPU's
flags, doctor's measurements of mixed against float32 kept for it, and the GPU NVML shows.
$CNNCOMPARE_CPU_FLAGS replaces the CPU's flags as read from /proc/cpuinfo, so a machine with
bfloat16 instructions can be run as one without.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from compare.experiment.config import RunConfig
from compare.experiment.frameworks import FRAMEWORK_PACKAGES
from compare.experiment.precision_rule import (
    DEVICE_INDEPENDENT,
    TENSOR_CORES_FROM,
    PrecisionMeasured,
    Resolved,
    choose,
)
from compare.machine import gpu_metrics
from compare.machine.cpu import (  # noqa: F401 - FLAGS_ENV and cpu_flags: the rule's inputs
    FLAGS_ENV,
    cpu_description,
    cpu_flags,
    native_bfloat16,
)

MEASURED_FILE = "precision-measured.json"  # under $CNNCOMPARE_HOME, written by doctor


def _measured_path() -> Path:
    from compare.experiment.datasets.cache import home
    return home() / MEASURED_FILE


def measurement_key(model: str) -> str:
    """What a measurement of mixed against float32 holds for: this CPU as described (its
    model, cores and instructions, under $CNNCOMPARE_CPU_FLAGS where set), the model and both
    frameworks' installed versions (read from their metadata, neither imported)."""
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for package in FRAMEWORK_PACKAGES.values():
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return json.dumps({"cpu": cpu_description(), "model": model, **versions}, sort_keys=True)


def record_measurement(model: str, step_ms: dict[str, dict[str, float]]) -> PrecisionMeasured:
    """Keep doctor's step times ({framework: {"fp32": ms, "mixed": ms}}) for this CPU, model
    and versions; returns the entry."""
    path = _measured_path()
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = {}
    entry: PrecisionMeasured = {"step_ms": step_ms, "measured_at": time.strftime("%Y-%m-%d"),
                                "by": "cnncompare doctor",
                                "key": json.loads(measurement_key(model))}
    kept[measurement_key(model)] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept, indent=2))
    return entry


def measurement(model: str | None) -> PrecisionMeasured | None:
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


def resolve(requested: str, on_gpu: bool, capability: tuple[int, int] | None = None,
            flags: frozenset[str] | None = None, model: str | None = None) -> Resolved:
    """The precision a run computes in, on a GPU of `capability` or on this CPU (its `flags`,
    read where not given, and doctor's measurement for `model`, if any, decide `auto`)."""
    if on_gpu or requested in DEVICE_INDEPENDENT:
        return choose(requested, on_gpu, capability)
    flags = cpu_flags() if flags is None else flags
    return choose(requested, False, native=native_bfloat16(flags), measured=measurement(model))


def expected(requested: str, device: str, model: str | None = None) -> Resolved:
    """What a run will resolve to, judged in the parent before any framework starts: the GPU
    from NVML (`device` auto or gpu), else this CPU's flags and doctor's measurement."""
    if requested in DEVICE_INDEPENDENT:
        return resolve(requested, False)
    capability = nvml_capability() if device != "cpu" else None
    if capability is not None:
        return resolve(requested, True, capability)
    return resolve(requested, False, model=model)


def carry(config: RunConfig) -> RunConfig:
    """`config` carrying its --precision resolved on this machine, made once by the command
    before any framework starts (and by a framework process started on a config without one,
    at its entry: compare.run.worker): for the CPU unless --device gpu, and for the GPU NVML
    shows (or --device gpu asks for) unless --device cpu. Under --device auto a framework that
    sees no GPU trains on the CPU, so both are carried and each framework reads the one for
    the device it uses (compare.experiment.precision_rule.carried)."""
    requested, kinds = config.precision, {}
    if config.device != "gpu":
        kinds["cpu"] = resolve(requested, False, model=config.model)
    capability = nvml_capability() if config.device != "cpu" else None
    if capability is not None or config.device == "gpu":  # gpu without NVML: cores assumed
        kinds["gpu"] = resolve(requested, True, capability, model=config.model)
    return config.replace(precision_resolved={kind: resolved.to_dict(requested)
                                              for kind, resolved in kinds.items()})


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


def _has_gpu(pynvml: Any) -> bool:
    try:
        return gpu_metrics.visible_gpu_count(pynvml) > 0
    except Exception:  # noqa: BLE001
        return False
