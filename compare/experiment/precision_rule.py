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
framework, with that handicap recorded (the report's caveat gives the two figures). The
command resolves it once, before any framework starts, for each device kind the run may
train on (compare.machine.precision_choice.carry: the GPU from NVML, this CPU's flags), and
the run's config carries it; each framework reads the one for the device it uses
(`carried`), so both apply the same resolution. This module is the rule and its choices;
compare.machine.precision_choice reads the machine it is applied to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict

from compare.experiment.frameworks import FRAMEWORK_NAMES, FRAMEWORKS

CHOICES = ("auto", "mixed", "fp16", "fp32")  # --precision
# Not a choice of --precision: the parity check's probe computes in float64 on the CPU
# (compare.experiment.parity), where rounding is ~1e-16 of a value and only meaning differs.
PROBE_ONLY = "fp64"
# Precisions that mean the same on every device: nothing of the machine decides them
DEVICE_INDEPENDENT = ("fp32", "fp16", PROBE_ONLY)
TENSOR_CORES_FROM = (7, 0)  # Volta: the first GPUs with float16 tensor cores


class PrecisionMeasured(TypedDict):
    """doctor's step times of float32 and mixed on a CPU, kept for --precision auto."""

    step_ms: dict[str, dict[str, float]]  # framework: {"fp32": ms, "mixed": ms}
    measured_at: str  # the date
    by: str
    key: dict[str, str | None]  # what it holds for: the CPU, the model, the versions


class ResolvedRecord(TypedDict):
    """A Resolved as a config carries it, with the --precision it was resolved from."""

    requested: str
    precision: str
    compute_type: str
    reason: str
    warning: str | None
    handicap: str | None


@dataclass(frozen=True)
class Resolved:
    precision: str  # "mixed" or "fp32"
    compute_type: str  # "float16", "bfloat16" or "float32"
    reason: str  # why, in words
    warning: str | None = None  # a choice the user made that costs them (one line)
    handicap: str | None = None  # mixed measured slower than float32 in a framework here

    def describe(self) -> str:
        return f"{self.compute_type} ({self.reason})"

    def to_dict(self, requested: str) -> ResolvedRecord:
        return {"requested": requested, "precision": self.precision,
                "compute_type": self.compute_type, "reason": self.reason,
                "warning": self.warning, "handicap": self.handicap}


class CarriesPrecision(Protocol):
    """What `carried` reads of a RunConfig (compare.experiment.config sits above this module)."""

    @property
    def precision(self) -> str: ...

    @property
    def precision_resolved(self) -> dict[str, ResolvedRecord] | None: ...


def carried(config: CarriesPrecision, device_kind: str) -> Resolved:
    """The precision `config` (a RunConfig) carries for a run on `device_kind` ("cpu" or
    "gpu"), as the command resolved it before the framework started; a ValueError where it
    carries none for this --precision and device kind (resolve it first:
    compare.machine.precision_choice.carry)."""
    entry = (config.precision_resolved or {}).get(device_kind)
    if entry is None or entry.get("requested") != config.precision:
        raise ValueError(f"--precision {config.precision} was not resolved for the "
                         f"{device_kind.upper()} before this framework process started "
                         f"(compare.machine.precision_choice.carry)")
    return Resolved(entry["precision"], entry["compute_type"], entry["reason"],
                    entry.get("warning"), entry.get("handicap"))


# auto picks mixed on a CPU only where doctor measured its step under this share of float32's
# in both frameworks: doctor times three steps, and a smaller gain is within their spread
MIXED_FASTER = 0.95


def figures(entry: PrecisionMeasured) -> str:
    """'TensorFlow/Keras 20 -> 16 ms, PyTorch 21 -> 27 ms a step (float32 -> mixed)'."""
    step = entry["step_ms"]
    return (", ".join(f"{FRAMEWORK_NAMES[fw]} {step[fw]['fp32']:.3g} -> {step[fw]['mixed']:.3g} ms"
                      for fw in FRAMEWORKS)
            + f" a step (float32 -> mixed; cnncompare doctor, {entry['measured_at']})")


def choose(requested: str, on_gpu: bool, capability: tuple[int, int] | None = None,
           native: str | None = None, measured: PrecisionMeasured | None = None) -> Resolved:
    """The rule: the precision a run computes in, on a GPU of `capability` or on a CPU whose
    native bfloat16 instruction is `native` (None: emulated) and where doctor measured
    `measured` (compare.machine.precision_choice.measurement; None: not measured)."""
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
    steps = (measured["step_ms"] if measured else {}).items()
    slower = [FRAMEWORK_NAMES[fw] for fw, step in steps if step["mixed"] > step["fp32"]]
    not_faster = [FRAMEWORK_NAMES[fw] for fw, step in steps
                  if step["mixed"] > MIXED_FASTER * step["fp32"]]
    if requested == "mixed":
        handicap = (f"mixed was slower than float32 here in {' and '.join(slower)}: "
                    f"{figures(measured)}" if measured and slower else None)
        if native:
            return Resolved("mixed", "bfloat16", f"--precision mixed on a CPU with native "
                                                 f"bfloat16, {native}", handicap=handicap)
        return Resolved("mixed", "bfloat16", "--precision mixed on a CPU",
                        warning="this CPU has no native bfloat16, neither AMX nor "
                                "AVX512-BF16: mixed precision emulates it, slower than float32",
                        handicap=handicap)
    if measured and not not_faster:
        return Resolved("mixed", "bfloat16", f"auto: mixed measured faster than float32 in "
                                             f"both frameworks on this CPU, {figures(measured)}")
    if measured:
        return Resolved("fp32", "float32", f"auto: float32 on a CPU, mixed not measured faster "
                                           f"in {' and '.join(not_faster)}: "
                                           f"{figures(measured)}")
    return Resolved("fp32", "float32", "auto: float32 on a CPU, where bfloat16 mixed precision "
                                       "speeds the two frameworks up unequally or is emulated; "
                                       "cnncompare doctor measures both here")
