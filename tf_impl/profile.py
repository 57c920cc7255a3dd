"""The step's phases from TensorFlow's profiler: its XSpace file read into a compare.run.phases
Capture.

tf.profiler.experimental writes plugins/profile/<run>/<host>.xplane.pb (the file
TensorBoard's profile plugin shows). On the host plane every op the graph executor runs
is an event named "op_name:op_type"; on a GPU plane ("/device:GPU:N") every kernel and copy
is an event on its stream's line, a kernel naming the op that launched it in its `tf_op`
stat. The op names carry the phases' name scopes (tf_impl/train.py, compare.run.phases.scope);
gradients are TensorFlow's own "gradient_tape/" ops.
"""

from __future__ import annotations

import re
from pathlib import Path

from tensorflow.tsl.profiler.protobuf import xplane_pb2

from compare.run import phases

# Ops that average gradients over replicas (MirroredStrategy, MultiWorkerMirroredStrategy).
ALL_REDUCE_OPS = {"NcclAllReduce", "CollectiveReduce", "CollectiveReduceV2",
                  "CollectiveReduceV3", "CollectiveReduceScatterV2", "CollectiveAllReduce"}
_OP_EVENT = re.compile(r"^([^:]+):([A-Za-z0-9_]+)$")  # "op_name:op_type"


def read_capture(trace: Path, on_gpu: bool) -> phases.Capture:
    """The phases of the steps recorded in the folder `trace` (its newest profiling session)."""
    files = sorted(Path(trace).glob("plugins/profile/*/*.xplane.pb"))
    if not files:
        raise FileNotFoundError(f"no TensorFlow profile (*.xplane.pb) in {trace}")
    newest = max(files, key=lambda path: path.parent.name)
    space = xplane_pb2.XSpace()
    space.ParseFromString(newest.read_bytes())
    host: dict[str, list[phases.Interval]] = {name: [] for name in phases.PHASES}
    ops: dict[int, list[tuple[float, float, str]]] = {}  # per host thread: its phase ops
    launches: dict[int, tuple[int, float]] = {}  # CUDA correlation id: (thread, launch time)
    gpu, origin_s = None, 0.0
    for plane in space.planes:
        if plane.name.startswith("/host:"):  # the executor's ops; CUPTI's kernel launches
            correlation = _stat_key(plane, "correlation_id")
            for line, start, end, name, event in _events(plane):
                op = _OP_EVENT.match(name)
                phase = _phase_of_op(*op.groups()) if op else None
                if phase is not None:
                    host[phase].append((start, end))
                    ops.setdefault(line.id, []).append((start, end, phase))
                launched = _stat_number(event, correlation)
                if launched is not None:
                    launches[launched] = (line.id, start)
        elif on_gpu and plane.name == "/device:GPU:0":  # replica 0's device, as its memory
            gpu = plane
        elif plane.name == "Task Environment":  # the lines' times count from the start
            origin_s = _profile_start_s(plane)
    device = busy = named = None
    if gpu is not None:
        device, busy, named = _device_phases(gpu, _launching_phase(ops, launches))
    missing = None
    if on_gpu and gpu is None:
        missing = "no /device:GPU:0 plane in the profile (CUPTI unavailable?)"
    elif device is not None and not (device["forward"] or device["backward"]):
        missing = ("no GPU kernel could be tied to an op of a phase (tf_op stat or launch "
                   "correlation); device idle from the GPU")
    return phases.captured(
        host, device, busy, str(trace),
        "TensorFlow profiler (tf.profiler.experimental), XSpace " + newest.name,
        "kernels and copies on GPU:0 by the op that launched them, phases by name scope",
        "op events on the host's executor threads, phases by name scope", missing, origin_s,
        events=named)


def _phase_of_op(op_name: str, op_type: str) -> str | None:
    """The phase of one TensorFlow op, or None for the loop's own control ops."""
    if op_type in ALL_REDUCE_OPS:
        return "all_reduce"
    if op_name.startswith("gradient_tape/") or "/gradient_tape/" in op_name:
        return "backward"
    return phases.phase_of_scope(op_name)


def _launching_phase(ops, launches):
    """A kernel's phase from its CUDA launch: the phase op running on the launching thread
    when the launch happened (for kernels whose tf_op names no phase op)."""
    threads = {thread: phases.Ranges(spans) for thread, spans in ops.items()}

    def phase(correlation: int | None) -> str | None:
        thread, at = launches.get(correlation, (None, 0.0))
        return threads[thread].phase_at(at) if thread in threads else None
    return phase


def _events(plane):
    """(line, start s, end s, name, event) of every event of a plane, on the profile's
    clock."""
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line in plane.lines:
        if line.name == "CUPTI overhead":
            continue
        origin_ps = line.timestamp_ns * 1000
        for event in line.events:
            start = (origin_ps + event.offset_ps) * 1e-12
            yield (line, start, start + event.duration_ps * 1e-12,
                   names.get(event.metadata_id, ""), event)


def _device_phases(plane, launching_phase):
    """Per phase, the intervals of the kernels and copies on a GPU plane, all of them, and
    each by name (name, seconds): a kernel's phase is that of the op in its tf_op stat,
    else of the op that launched it."""
    tf_op, correlation = _stat_key(plane, "tf_op"), _stat_key(plane, "correlation_id")
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    device: dict[str, list[phases.Interval]] = {name: [] for name in phases.PHASES}
    busy: list[phases.Interval] = []
    named: list[tuple[str, float]] = []
    for line, start, end, name, event in _events(plane):
        interval = (start, end)
        busy.append(interval)
        if line.name.startswith("Stream"):  # CUPTI's; not a line derived from them (XLA Ops)
            named.append((name, end - start))
        if name == "MemcpyH2D":
            device["host_to_device"].append(interval)
            continue
        if name.startswith("nccl") and "AllReduce" in name:
            device["all_reduce"].append(interval)
            continue
        launched = _stat_text(event, tf_op, stat_names)  # "op_name:op_type"
        op = _OP_EVENT.match(launched) if launched else None
        phase = _phase_of_op(*op.groups()) if op else None
        if phase is None:
            phase = launching_phase(_stat_number(event, correlation))
        if phase is not None:
            device[phase].append(interval)
    return device, busy, named


def _stat_key(plane, name: str) -> int | None:
    """The id under which a plane's events carry the stat called `name`."""
    return next((key for key, meta in plane.stat_metadata.items() if meta.name == name), None)


def _stat_number(event, key) -> int | None:
    for stat in event.stats:
        if key is not None and stat.metadata_id == key:
            return stat.uint64_value or stat.int64_value
    return None


def _profile_start_s(plane) -> float:
    """When the profile started, seconds since the epoch (the zero of its lines' times)."""
    key = _stat_key(plane, "profile_start_time")
    for stat in plane.stats:
        if stat.metadata_id == key:
            return (stat.uint64_value or stat.int64_value) * 1e-9
    return 0.0


def _stat_text(event, key, stat_names) -> str | None:
    for stat in event.stats:
        if key is not None and stat.metadata_id == key:
            return stat_names.get(stat.ref_value) if stat.ref_value else stat.str_value
    return None
