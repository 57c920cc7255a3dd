"""What a parity check records, declared once: the gate's record (parity.json, and
summary.json's `parity`) and the timed configuration's drift inside it. compare.experiment.parity
computes them, compare.process.parity_check runs the probes, the report reads them; each
reads and writes by these keys, so a misspelt one is a type error (mypy) where it is written.
"""

# no `from __future__ import annotations`: TypedDict reads NotRequired from the annotations
import math
from typing import Any, Literal, NotRequired, TypedDict, cast

# A gated figure's name: compare.experiment.parity.Tolerances has a limit of each name
Figure = Literal["logits_max_abs_diff", "loss_abs_diff", "grad_max_rel_diff",
                 "params_rel_update_diff_after_steps", "bn_running_stats_max_rel_diff"]
GATED: tuple[Figure, ...] = ("logits_max_abs_diff", "loss_abs_diff", "grad_max_rel_diff",
                             "params_rel_update_diff_after_steps",
                             "bn_running_stats_max_rel_diff")
# the figures measured after the probe's SGD steps, not on its first batch
AFTER_STEPS: tuple[Figure, ...] = ("params_rel_update_diff_after_steps",
                                   "bn_running_stats_max_rel_diff")


class TimedDrift(TypedDict):
    """The timed configuration (float32, mixed precision, a compiler, on the run's device):
    TF against PyTorch beside each framework against itself moved by 1 ulp. Measured, not
    gated. A probe that could not run leaves `configuration` and `error` only."""

    configuration: dict[str, Any]  # precision, tf32, compile, cuda_graphs, device, images...
    figures: NotRequired[dict[Figure, float]]  # TF against PyTorch
    noise_floor: NotRequired[dict[Figure, float]]  # the larger of the two frameworks' floors
    noise_floors: NotRequired[dict[str, dict[Figure, float]]]  # by framework
    within_noise: NotRequired[dict[Figure, bool]]
    agrees: NotRequired[bool]  # every figure within its noise rule
    drift_within_own: NotRequired[bool]  # the figures after the steps within their floors
    method: NotRequired[str]
    error: NotRequired[str]


class ParityRecord(TypedDict):
    """The gate: the two builds on the data plan's first batch and after a few SGD steps, in
    float64 on the CPU (float32 against its noise floor where a framework has no float64
    kernel for a layer). A check that could not run has `error`, its figures None and
    `failed` ["probe"]. Figures are absolute (logits, loss) or relative (the rest)."""

    passed: bool
    steps: int  # SGD steps the probe took after its first batch
    tolerances: dict[str, float] | None  # the limit of each gated figure
    failed: list[str]  # the gated figures over their limits ("probe": could not run)
    logits_max_abs_diff: float | None
    loss_abs_diff: float | None
    grad_max_rel_diff: float | None
    params_rel_update_diff_after_steps: float | None
    bn_running_stats_max_rel_diff: float | None
    params_max_abs_diff_after_steps: float | None  # recorded, not gated
    precision: NotRequired[str]  # float64, or float32 where the gate fell back
    loss: NotRequired[dict[str, float]]  # by framework
    grad_rel_diff_per_layer: NotRequired[dict[str, float]]
    bn_running_stats_rel_diff: NotRequired[dict[str, float]]
    param_abs_diff_per_weight: NotRequired[dict[str, float]]
    conventions: NotRequired[list[str]]  # conventions mapped before comparing, in words
    method: NotRequired[str]
    # the float32 gate: its figures after the steps judged against PyTorch's own drift
    update_noise_floor: NotRequired[float]
    noise_floors: NotRequired[dict[Figure, float]]
    update_gate: NotRequired[str]
    float64_unsupported: NotRequired[str]  # why the gate fell back to float32
    timed_configuration: NotRequired[TimedDrift]
    error: NotRequired[str]  # the check could not run: which framework, where, its line
    errors: NotRequired[dict[str, dict[str, str]]]  # by framework: device, line
    runs: NotRequired[str]  # a report of other runs than the matched ones: whose it is


def from_json(data: Any) -> ParityRecord | None:
    """The parity record in a file's JSON form (parity.json, summary.json's `parity`); None
    where there is none or it is not one (no boolean `passed`), as if no check had run."""
    if not isinstance(data, dict) or not isinstance(data.get("passed"), bool):
        return None
    return cast(ParityRecord, data)


def figure(record: ParityRecord, name: Figure) -> float:
    """A gated figure of `record`; NaN where the check could not measure it (NaN fails every
    limit)."""
    value = record[name]
    return math.nan if value is None else value
