"""What the GPU ran in a profiled step: each kernel's time per step and the family it
belongs to, read the same way from both frameworks' profilers.

A kernel's family comes from its name alone, so the two frameworks' kernels can be set side
by side although their libraries and compilers name them differently. Generated kernels
(torch.compile's Triton kernels, XLA's fusions) are classed first, by what they do
(a matrix product, a reduction, else pointwise work), whatever ops their names list: a fused
kernel does the work of every op it names, so it cannot be split between them. Library
kernels (cuDNN, cuBLAS, CUTLASS, PyTorch's own) are classed by the operation they name.
The families are a reading aid; the report lists the kernels' own names beside them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TypedDict, cast

TOP_KERNELS = 12  # the kernels listed by name, longest total time first
NAME_LENGTH = 160  # characters of a kernel's name kept (CUTLASS names run to 300)

_GENERATED = re.compile(r"^triton_|fusion")  # Triton (inductor, XLA's GEMMs), XLA fusions
_GENERATED_FAMILIES = (
    ("matmul", re.compile(r"gemm|_dot|dot_|_mm\b|_mm_|^triton_tem_")),
    ("pooling", re.compile(r"reduce_window|select_and_scatter|pool")),  # XLA's max pooling
    ("generated reduction", re.compile(r"^triton_(red|per)_|^input_|reduc")),
    ("generated pointwise", re.compile(r"")),
)
_LIBRARY_FAMILIES = (
    ("normalization", re.compile(r"bn_|batch_?norm|welford")),
    ("layout", re.compile(r"nchwtonhwc|nhwctonchw|transpose|permute")),
    ("convolution", re.compile(r"conv(?!ert)|dgrad|wgrad|fprop|implicit_gemm|cudnn")),
    ("matmul", re.compile(r"gemm|cublas|cutlass|matmul")),
    ("pooling", re.compile(r"pool")),
    ("optimizer", re.compile(r"multi_tensor|foreach")),
    ("reduction", re.compile(r"reduce")),
    # TensorFlow's own kernel of an op is "<Op>_GPU_DT_<type>_kernel" (Mul, AddV2, ...)
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|fill|copy|cast|convert|"
                               r"_gpu_dt_")),
)
FAMILIES = ("convolution", "matmul", "normalization", "generated pointwise",
            "generated reduction", "pooling", "layout", "reduction", "elementwise",
            "optimizer", "copy", "all_reduce", "other")


def family(name: str) -> str:
    """The family of a GPU kernel or copy, from its name (one of FAMILIES)."""
    lowered = name.lower()
    if "memcpy" in lowered or "memset" in lowered:
        return "copy"
    if "nccl" in lowered:
        return "all_reduce"
    rules = _GENERATED_FAMILIES if _GENERATED.search(lowered) else _LIBRARY_FAMILIES
    return next((kind for kind, pattern in rules if pattern.search(lowered)), "other")


@dataclass(frozen=True)
class KernelTime:
    """One kernel name's time in the profiled steps, per step."""

    name: str
    family: str
    ms: float  # milliseconds per step, the sum of its launches' durations
    calls: float  # launches per step
    share: float  # of the profiled step's wall time


class KernelRow(TypedDict):
    """A KernelTime as the profile records it."""

    name: str
    family: str
    ms: float
    calls: float
    share: float


class KernelSplit(TypedDict):
    """The profiled steps' kernels, per step (result.json's profile.kernels)."""

    total_ms: float  # every launch's duration, summed
    launches: float
    families_ms: dict[str, float]  # FAMILIES, those with time
    top: list[KernelRow]  # the longest TOP_KERNELS


def per_step(events: Iterable[tuple[str, float]], steps: int, step_ms: float) -> KernelSplit:
    """The kernels of `steps` profiled steps, each (name, seconds) one launch: their total and
    each family's milliseconds per step, and the TOP_KERNELS longest by name. Durations add
    up even where kernels overlap on several streams, so the total can exceed the GPU's busy
    time."""
    seconds: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for name, duration_s in events:
        seconds[name] += duration_s
        calls[name] += 1
    per_ms = 1000.0 / steps  # ms per step, per second of the profile
    families = {kind: 0.0 for kind in FAMILIES}
    for name, total in seconds.items():
        families[family(name)] += total * per_ms
    longest = sorted(seconds, key=lambda name: (-seconds[name], name))[:TOP_KERNELS]
    top = [KernelTime(name=name[:NAME_LENGTH], family=family(name),
                      ms=seconds[name] * per_ms, calls=calls[name] / steps,
                      share=seconds[name] * per_ms / step_ms if step_ms else 0.0)
           for name in longest]
    return {"total_ms": sum(seconds.values()) * per_ms,
            "launches": sum(calls.values()) / steps,
            "families_ms": {kind: ms for kind, ms in families.items() if ms > 0},
            "top": [cast(KernelRow, asdict(kernel)) for kernel in top]}
