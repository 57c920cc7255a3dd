"""Typed records read by attribute: a run's summary (what compare.run.summary computes,
result.json's `summary` holds and every report reads) and a framework's own loop
(own-loop.json, compare.run.own_loop).

`to_dict` writes a record's JSON form and `from_dict` reads it back, older files included (a
field they lack takes its default); a required field missing, or one of the wrong kind, is a
RecordError naming the field, so a misspelt or retyped field fails where the file is read,
not in a report. The other records of result.json stay TypedDicts in compare.schema.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypedDict, Union, cast


class ClockWindow(TypedDict):
    """One synchronised timing window of either loop: its epoch (1-based), steps and seconds."""

    epoch: int
    steps: int
    seconds: float


class RecordError(ValueError):
    """A record whose JSON form lacks a required field or holds one of the wrong kind."""


class JsonRecord:
    """A dataclass written as, and read back from, its JSON form."""

    WHERE: ClassVar[str] = "record"  # what a RecordError calls it, unless told

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return dataclasses.asdict(cast(Any, self))

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> Self:
        """The record of a JSON form; fields an older file lacks take their defaults, fields
        this version does not know are left out. RecordError (naming `where` and the field)
        for a missing required field or a value of the wrong kind."""
        built: Self = _record(cls, data, where or cls.WHERE)
        return built


@dataclass
class StepTimes:
    """Milliseconds per step over the synchronised timing windows of the epochs after the
    first (compare.run.summary.steady_step_times)."""

    median: float | None = None
    p90: float | None = None
    windows: int = 0  # windows used
    steps_per_window: int | None = None  # the median steps of the windows used
    window_target_s: float | None = None  # the window's target length; None for fixed sizes


@dataclass
class ProcessClock:
    """One process's own clock over the steady epochs (several processes only)."""

    rank: int
    train_time_s: float
    input_wait_fraction: float | None
    median_step_ms: float


@dataclass
class RunSummary(JsonRecord):
    """A run's figures, recomputed from its epochs and windows after every epoch; each
    reported figure (compare.figures) reads one of its fields. Times in seconds, memory in
    bytes, accuracies and shares as fractions in [0, 1], energy in joules."""

    status: str  # one of compare.schema.STATUSES
    replicas: int
    train_flops_per_image: int
    train_time_s: float = 0.0  # all epochs, the first included
    steady_step_time_ms: StepTimes = field(default_factory=StepTimes)
    steps_per_call: int | None = None
    epochs_completed: int = 0
    eval_time_s: float = 0.0
    time_to_result_s: float | None = None  # training and every evaluation: a user's wait
    final_test_accuracy: float | None = None
    best_test_accuracy: float | None = None
    warmup_time_s: float | None = None  # the first epoch's training time
    # the first epoch beyond its steps at the steady median step: compiling, tracing,
    # autotuning, allocator growth (both frameworks alike, on the run's own clock)
    startup_overhead_s: float | None = None
    images_per_s: float | None = None  # epochs after the first
    input_wait_fraction: float | None = None
    peak_device_memory_bytes: int | None = None
    warmup_peak_device_memory_bytes: int | None = None
    peak_device_memory_note: str | None = None
    host_peak_rss_bytes: int | None = None
    processes: list[ProcessClock] | None = None
    achieved_flops_per_s: float | None = None
    mfu: float | None = None
    peak_flops_per_s: float | None = None
    mfu_note: str | None = None
    energy_j: float | None = None
    energy_per_image_j: float | None = None
    energy_note: str | None = None
    target_accuracy: float | None = None
    time_to_target_s: float | None = None
    epochs_to_target: int | None = None

    WHERE: ClassVar[str] = "summary"


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RunSummary))


@dataclass
class OwnLoopRecord(JsonRecord):
    """own-loop.json: a framework's own idiomatic loop (Keras fit; a plain PyTorch loop) on a
    run's model, initial weights, batches and recipe (compare.run.own_loop). Times in
    seconds and milliseconds, accuracy a fraction."""

    schema_version: int
    framework: str
    seed: int
    status: str  # one of compare.schema.STATUSES
    config: dict[str, Any]  # the RunConfig, as the matched run's
    device_used: str
    loop: str = ""  # the loop in words
    # where it trained: in a process of its own, or in its run's process with an epoch of
    # each loop in turn (compare.run.own_loop.APART, BESIDE); "" in older files: apart
    trained: str = ""
    steps_per_epoch: int = 0
    steps_per_call: int = 0
    epoch_times_s: list[float] = field(default_factory=list)  # synchronised at both ends
    # synchronised timing windows, as result.json's: {"epoch" (1-based), "steps", "seconds"}
    windows: list[ClockWindow] = field(default_factory=list)
    # over the windows of the epochs after the first, as a run's summary figure of that name
    # (compare.run.summary.steady_step_times); None until done, and in version 1 files
    steady_step_time_ms: StepTimes | None = None
    # trained beside its run: [shared, own] ms per step of each pair of adjacent windows
    # after the first epoch (compare.run.schedule.Schedule); empty otherwise and in older files
    window_pairs: list[list[float]] = field(default_factory=list)
    # for each of window_pairs, whether the own loop's window came first; empty in older files
    own_first: list[bool] = field(default_factory=list)
    mean_losses: list[list[float]] = field(default_factory=list)  # first epoch: [steps, mean]
    final_test_accuracy: float | None = None
    final_test_loss: float | None = None
    error: str | None = None

    WHERE: ClassVar[str] = "own loop"


def _record(kind: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise RecordError(f"{where}: not a JSON object")
    hints = typing.get_type_hints(kind)
    values = {}
    for spec in dataclasses.fields(kind):
        if spec.name not in data:
            if (spec.default is dataclasses.MISSING
                    and spec.default_factory is dataclasses.MISSING):
                raise RecordError(f"{where} lacks {spec.name}")
            continue
        values[spec.name] = _value(hints[spec.name], data[spec.name], f"{where}.{spec.name}")
    return kind(**values)


def _value(hint: Any, value: Any, where: str) -> Any:
    """`value` checked against the type `hint` (records built, ints taken for floats)."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise RecordError(f"{where} is null")
    for option in (o for o in options if o is not type(None)):
        origin = typing.get_origin(option)
        if isinstance(option, type) and dataclasses.is_dataclass(option):
            return _record(option, value, where)
        if origin is list:
            if not isinstance(value, list):
                break
            (item,) = typing.get_args(option)
            return [_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        if option is bool and isinstance(value, bool):
            return value
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if option is str and isinstance(value, str):
            return value
        if (option is dict or origin is dict) and isinstance(value, dict):
            return value
        if typing.is_typeddict(option) and isinstance(value, dict):
            missing = sorted(set(getattr(option, "__required_keys__")) - set(value))
            if missing:
                raise RecordError(f"{where} lacks {', '.join(missing)}")
            return value
    raise RecordError(f"{where}: {value!r} is not {_name(hint)}")


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _name(hint: Any) -> str:
    return " or ".join("null" if o is type(None) else o.__name__
                       for o in (typing.get_args(hint) if _is_union(hint) else (hint,)))
