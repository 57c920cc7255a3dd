"""Where a training step's time goes: the phases of a step, from each framework's profiler.

After the last epoch, `--profile N` runs N more training steps (whole calls, after one
unrecorded warm call; they count in no other figure) under the framework's own profiler
(compare.run.loop.profile_phases). Each framework marks its phases with the names `scope`
gives (PyTorch: torch.profiler.record_function ranges, only while it profiles; TensorFlow:
tf.name_scope in the traced step, which costs nothing at run time), reads its own trace
(tf_impl/profile.py, torch_impl/profile.py) into a `Capture` of time intervals per phase,
and `split` turns those into milliseconds per step, the same arithmetic for both.

A phase's time is the wall time during which at least one of its operations ran (the
union of its intervals, so work spread over several threads or streams is not counted
twice), divided by the steps. Phases can overlap one another (DDP all-reduces gradient
buckets while the backward pass goes on; a prefetching pipeline loads while the device
computes), so they need not add up to the step: `other_ms` is the time in which none ran
(Python, launch and framework overhead, synchronisation, idle).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, TypedDict

from compare.run import kernels

# The phases of a training step, in order, and what each holds (the report's legend).
PHASES = {
    "input": "waiting for the next batch (the loader or iterator, and for the device "
             "pipeline the gather of the batch from the resident images)",
    "host_to_device": "copying the batch from host to device memory (on a CPU run only "
                      "PyTorch's .to() call, which copies nothing)",
    "forward": "the forward pass and the loss",
    "backward": "the backward pass (gradients)",
    "all_reduce": "averaging gradients over replicas (several devices or processes only)",
    "update": "the optimizer's update (learning rate, loss scaling, SGD with momentum)",
}
_SCOPE = "cnncompare."  # a valid tf.name_scope and record_function name prefix
_SCOPE_PATTERN = re.compile(r"cnncompare\.(" + "|".join(PHASES) + r")(?:_\d+)?(?:/|$)")

Interval = tuple[float, float]  # (start, end), seconds on the profiler's clock


def scope(phase: str) -> str:
    """The name a framework gives the code of `phase` (a name scope, a profiler range)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    return _SCOPE + phase


def phase_of_scope(name: str) -> str | None:
    """The phase whose `scope` appears in an operation's or range's name (the innermost
    one: TensorFlow nests scopes in op names, and may number repeats, e.g. `_1`)."""
    found = _SCOPE_PATTERN.findall(name)
    return found[-1] if found else None


@dataclass
class Capture:
    """What a framework's profiler saw during the profiled steps.

    host: per phase, the intervals in which the host ran that phase's work (PyTorch: its
        record_function ranges; TensorFlow: its ops on the executor's threads).
    device: on a GPU, per phase, the intervals of the kernels and copies that phase put
        on the device (replica 0's device); None on CPU, where the host is the device.
    device_busy: on a GPU, every kernel, copy and set on that device, of any phase.
    device_events: on a GPU, each of those by name, (name, seconds), for the kernel table
        (compare.run.kernels).
    files: the trace written (a file or folder), for the framework's own viewer.
    source: how the intervals were read, for the report.
    """

    host: dict[str, list[Interval]]
    device: dict[str, list[Interval]] | None = None
    device_busy: list[Interval] | None = None
    device_events: list[tuple[str, float]] | None = None
    files: str = ""
    source: str = ""
    notes: list[str] = field(default_factory=list)
    origin_s: float = 0.0  # the intervals' zero, seconds since the epoch (where known)


def captured(host: dict[str, list[Interval]], device: dict[str, list[Interval]] | None,
             busy: list[Interval] | None, files: str, tool: str, on_device: str, on_host: str,
             missing: str | None = None, origin_s: float = 0.0,
             events: list[tuple[str, float]] | None = None) -> Capture:
    """A framework's Capture, its source saying how the phases were read: by `tool`, `on_device`
    where the device's intervals are known, else `on_host`. `missing` says why a GPU's
    intervals could not be tied to phases: the phases are then the host's, with a note."""
    if missing:
        device = None
    return Capture(host=host, device=device, device_busy=busy, device_events=events or None,
                   files=files,
                   notes=[f"{missing}: phases on the host clock"] if missing else [],
                   origin_s=origin_s,
                   source=f"{tool}: {on_device if device is not None else on_host}")


def with_input_waits(capture: Capture, waits: Iterable[Interval]) -> Capture:
    """`capture` with the steps' own waits for their batches as its input phase, each
    (before, after) the wait on the host clock, seconds since the epoch (TensorFlow's
    profiler leaves get_next out: tf_impl/train.py stamps it), placed on the capture's clock
    from its origin_s."""
    waits = list(waits)
    if waits and not capture.origin_s:
        capture.notes.append("the profile has no start time: its input phase is empty "
                             "(the input waits cannot be placed on its clock)")
    elif waits:
        capture.host["input"] += [(float(before) - capture.origin_s,
                                   float(after) - capture.origin_s) for before, after in waits]
    return capture


def union_seconds(intervals: Iterable[Interval]) -> float:
    """Seconds covered by at least one interval."""
    return sum(end - start for start, end in merged(intervals))


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The same coverage as disjoint intervals, in order."""
    out: list[list[float]] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


class Ranges:
    """Phase ranges, (start, end, phase), that do not overlap one another (a thread's ops,
    a step's record_function ranges), to ask which one holds an instant."""

    def __init__(self, ranges: Iterable[tuple[float, float, str]]):
        self.ranges = sorted(ranges)
        self.starts = [start for start, _, _ in self.ranges]

    def phase_at(self, at: float) -> str | None:
        i = bisect.bisect_right(self.starts, at) - 1
        return self.ranges[i][2] if i >= 0 and self.ranges[i][1] >= at else None


def overlap_seconds(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Seconds covered by both a and b."""
    left, right = merged(a), merged(b)
    total, i, j = 0.0, 0, 0
    while i < len(left) and j < len(right):
        start = max(left[i][0], right[j][0])
        end = min(left[i][1], right[j][1])
        total += max(0.0, end - start)
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return total


def gaps(intervals: Iterable[Interval], start: float, end: float) -> list[Interval]:
    """The parts of [start, end] no interval covers."""
    out, at = [], start
    for s, e in merged(intervals):
        if s > at:
            out.append((at, min(s, end)))
        at = max(at, e)
        if at >= end:
            break
    if at < end:
        out.append((at, end))
    return [(s, e) for s, e in out if e > s]


class PhaseSplit(TypedDict):
    """Milliseconds per step of each phase of the profiled steps (result.json's profile)."""

    steps: int
    step_ms: float  # on the loop's clock, the profiler's overhead in it
    clock: str  # "device" or "host": where the phases were read
    phases_ms: dict[str, float]  # PHASES
    other_ms: float
    host_phases_ms: dict[str, float] | None  # on a GPU, the host's view; None on a CPU
    device_idle_ms: float | None
    input_stall_ms: float
    source: str
    files: str  # the trace written (a file or folder)
    notes: list[str]
    kernels: kernels.KernelSplit | None


def split(capture: Capture, steps: int, wall_s: float) -> PhaseSplit:
    """Milliseconds per step of each phase, of the rest, and (GPU) of device idle time.

    wall_s: the profiled steps' time on the loop's clock, from a device synchronisation
    before the first to one after the last (with the profiler's own overhead in it).
    The phases are read on the device where there is one (`clock`: "device"), on the host
    otherwise. `input_stall_ms` means the same in both frameworks: time per step in which
    the device computed nothing because the step was still waiting for its batch (on a
    GPU, device-idle time inside the host's input phase; on CPU, where the host computes,
    the input phase itself).
    """
    per_step = 1000.0 / steps  # ms per step, per second of the profile
    on_device = capture.device is not None
    timed = capture.device if capture.device is not None else capture.host
    phases_ms = {name: union_seconds(timed.get(name, ())) * per_step for name in PHASES}
    busy = [i for name in PHASES for i in timed.get(name, ())]
    step_ms = wall_s * per_step
    result: PhaseSplit = {
        "steps": steps, "step_ms": step_ms, "clock": "device" if on_device else "host",
        "phases_ms": phases_ms,
        "other_ms": max(0.0, step_ms - union_seconds(busy) * per_step),
        "host_phases_ms": ({name: union_seconds(capture.host.get(name, ())) * per_step
                            for name in PHASES} if on_device else None),  # CPU: phases_ms
        "device_idle_ms": None, "input_stall_ms": phases_ms["input"],
        "source": capture.source, "files": capture.files, "notes": list(capture.notes),
        "kernels": (kernels.per_step(capture.device_events, steps, step_ms)
                    if capture.device_events else None),
    }
    if capture.device_busy:
        every = [i for intervals in capture.host.values() for i in intervals]
        every += capture.device_busy
        start, end = min(s for s, _ in every), max(e for _, e in every)
        span_s = max(end - start, 1e-12)
        busy_s = union_seconds(capture.device_busy)
        # The profiler's span and the loop's synchronised wall clock differ by the sync and
        # the profiler's start/stop; idle is read within the profiler's span, in its clock.
        result["device_idle_ms"] = max(0.0, span_s - busy_s) * per_step
        idle = gaps(capture.device_busy, start, end)
        result["input_stall_ms"] = overlap_seconds(idle, capture.host.get("input", ())) * per_step
    return result


def profiler_cost(profiled_step_ms: float, unprofiled_step_ms: float | None,
                  device_idle_ms: float | None) -> dict[str, float | None]:
    """What the profiler costs a step: its profiled step over the run's own unprofiled median
    step (the same training, the profiler off), and the device's idle time less the time the
    profiler added, as a share of the unprofiled step (the profiler works on the host, so on a
    GPU its time shows as the device idling: an estimate, never below 0). None where the run
    has no unprofiled step or the device's idle time was not read."""
    if not unprofiled_step_ms:
        return {"slowdown": None, "device_idle_less_profiler": None}
    added = max(0.0, profiled_step_ms - unprofiled_step_ms)
    idle = (None if device_idle_ms is None
            else max(0.0, device_idle_ms - added) / unprofiled_step_ms)
    return {"slowdown": profiled_step_ms / unprofiled_step_ms, "device_idle_less_profiler": idle}


def shares(split_result: dict[str, Any]) -> dict[str, float | None]:
    """Each figure's fraction of the profiled step: the phases (which can add to over 1
    where they overlap), other, device idle and input stall; None where not measured."""
    step = split_result["step_ms"]
    figures = {**split_result["phases_ms"], "other": split_result["other_ms"],
               "device_idle": split_result["device_idle_ms"],
               "input_stall": split_result["input_stall_ms"]}
    return {name: ms / step if ms is not None and step else None
            for name, ms in figures.items()}
