"""The step's phases from PyTorch's profiler: its Chrome/Perfetto trace read into a
compare.run.phases Capture.

torch.profiler exports a trace whose host events include the record_function ranges the
trainer opens while it profiles (train.py, compare.run.phases.scope) and the collective ops
DDP runs; on a GPU, every kernel and copy is an event of its own ("kernel", "gpu_memcpy",
"gpu_memset"), tied by its `correlation` id to the CUDA runtime call that launched it,
which lies inside the host range of the phase that launched it.
"""

from __future__ import annotations

import json
from pathlib import Path

from compare.run import phases

DEVICE_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCHES = ("cuda_runtime", "cuda_driver")


def read_capture(trace: Path, on_gpu: bool) -> phases.Capture:
    """The phases of the steps in the trace file `trace`."""
    recorded = json.loads(Path(trace).read_text())
    events = [e for e in recorded.get("traceEvents", []) if e.get("ph") == "X"]
    host: dict[str, list[phases.Interval]] = {name: [] for name in phases.PHASES}
    for event in events:
        if event.get("cat") == "user_annotation":
            phase = phases.phase_of_scope(event["name"])
        elif event.get("cat") == "cpu_op" and _is_all_reduce(event["name"]):
            phase = "all_reduce"  # DDP's gradient buckets, from its backward hooks
        else:
            continue
        if phase is not None:
            host[phase].append(_interval(event))
    device = busy = missing = named = None
    if on_gpu:
        device, busy, named = _device_phases(events, host)
        if not busy:
            missing, busy = "no GPU events in the trace (CUPTI unavailable?)", None
    return phases.captured(
        host, device, busy, str(trace), "torch.profiler trace " + Path(trace).name,
        "kernels and copies by the phase range that launched them, phases by record_function",
        "record_function ranges on the host, phases by record_function", missing,
        events=named)


def _device_phases(events, host):
    """Per phase, the intervals of the GPU's kernels and copies, all of them, and each by
    name (name, seconds): a kernel belongs to the phase whose host range holds the runtime
    call that launched it."""
    launched_at = {e["args"]["correlation"]: e["ts"] for e in events
                   if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})}
    ranges = phases.Ranges((start, end, phase) for phase, spans in host.items()
                           for start, end in spans if phase != "all_reduce")
    device: dict[str, list[phases.Interval]] = {name: [] for name in phases.PHASES}
    busy: list[phases.Interval] = []
    named: list[tuple[str, float]] = []
    for event in events:
        if event.get("cat") not in DEVICE_EVENTS:
            continue
        interval = _interval(event)
        busy.append(interval)
        name = event.get("name", "")
        named.append((name, interval[1] - interval[0]))
        if event["cat"] == "gpu_memcpy" and "HtoD" in name:
            device["host_to_device"].append(interval)
        elif _is_all_reduce(name):
            device["all_reduce"].append(interval)
        else:
            at = launched_at.get(event.get("args", {}).get("correlation"))
            phase = ranges.phase_at(at * 1e-6) if at is not None else None  # us -> s
            if phase is not None:
                device[phase].append(interval)
    return device, busy, named


def _is_all_reduce(name: str) -> bool:
    lowered = name.lower()
    return "allreduce" in lowered or "all_reduce" in lowered


def _interval(event) -> phases.Interval:
    start = float(event["ts"]) * 1e-6  # the trace's microseconds, in seconds
    return start, start + float(event.get("dur", 0.0)) * 1e-6
