"""The step's phases from TensorFlow's profiler: its XSpace file read into a compare.phases
Capture.

tf.profiler.experimental writes plugins/profile/<run>/<host>.xplane.pb (the file
TensorBoard's profile plugin shows). On the host plane every op the graph executor runs
is an event named "op_name:op_type"; on a GPU plane ("/device:GPU:N") every kernel and copy
is an event on its stream's line, a kernel naming the op that launched it in its `tf_op`
stat. The op names carry the phases' name scopes (tf_impl/train.py, compare.phases.scope);
gradients are TensorFlow's own "gradient_tape/" ops.
"""

from __future__ import annotations

import re
from pathlib import Path

from tensorflow.tsl.profiler.protobuf import xplane_pb2

from compare import phases

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
    device = busy = None
    origin_s = 0.0
    for plane in space.planes:
        if plane.name == "/host:CPU":
            for start, end, name in _events(plane):
                op = _OP_EVENT.match(name)
                phase = _phase_of_op(*op.groups()) if op else None
                if phase is not None:
                    host[phase].append((start, end))
        elif on_gpu and plane.name == "/device:GPU:0":  # replica 0's device, as its memory
            device, busy = _device_phases(plane)
        elif plane.name == "Task Environment":  # the lines' times count from the start
            origin_s = _profile_start_s(plane)
    notes = []
    if on_gpu and device is None:
        notes.append("no /device:GPU:0 plane in the profile (CUPTI unavailable?): phases "
                     "on the host clock")
    elif device is not None and not (device["forward"] or device["backward"]):
        notes.append("the GPU's kernels name no op of a phase in their tf_op stat: phases on "
                     "the host clock (kernel launches), device idle from the GPU's events")
        device = None
    return phases.Capture(
        host=host, device=device, device_busy=busy, files=str(trace), notes=notes,
        origin_s=origin_s,
        source=("TensorFlow profiler (tf.profiler.experimental), XSpace " + newest.name + ": "
                + ("kernels and copies on GPU:0 by the op that launched them"
                   if device is not None else "op events on the host's executor threads")
                + ", phases by name scope"))


def _phase_of_op(op_name: str, op_type: str) -> str | None:
    """The phase of one TensorFlow op, or None for the loop's own control ops."""
    if op_type in ALL_REDUCE_OPS:
        return "all_reduce"
    if op_name.startswith("gradient_tape/") or "/gradient_tape/" in op_name:
        return "backward"
    return phases.phase_of_scope(op_name)


def _events(plane):
    """(start s, end s, name) of every event of a plane, on the profile's clock."""
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line in plane.lines:
        if line.name == "CUPTI overhead":
            continue
        origin_ps = line.timestamp_ns * 1000
        for event in line.events:
            start = (origin_ps + event.offset_ps) * 1e-12
            yield start, start + event.duration_ps * 1e-12, names.get(event.metadata_id, "")


def _device_phases(plane):
    """Per phase, the intervals of the kernels and copies on a GPU plane, and all of them."""
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    tf_op = next((key for key, name in stat_names.items() if name == "tf_op"), None)
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    device: dict[str, list[phases.Interval]] = {name: [] for name in phases.PHASES}
    busy: list[phases.Interval] = []
    for line in plane.lines:
        if line.name == "CUPTI overhead":
            continue
        origin_ps = line.timestamp_ns * 1000
        for event in line.events:
            start = (origin_ps + event.offset_ps) * 1e-12
            interval = (start, start + event.duration_ps * 1e-12)
            busy.append(interval)
            name = names.get(event.metadata_id, "")
            if name == "MemcpyH2D":
                device["host_to_device"].append(interval)
                continue
            if name.startswith("nccl") and "AllReduce" in name:
                device["all_reduce"].append(interval)
                continue
            launched = _stat_text(event, tf_op, stat_names)  # "op_name:op_type"
            op = _OP_EVENT.match(launched) if launched else None
            phase = _phase_of_op(*op.groups()) if op else None
            if phase is not None:
                device[phase].append(interval)
    return device, busy


def _profile_start_s(plane) -> float:
    """When the profile started, seconds since the epoch (the zero of its lines' times)."""
    names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    for stat in plane.stats:
        if names.get(stat.metadata_id) == "profile_start_time":
            return (stat.uint64_value or stat.int64_value) * 1e-9
    return 0.0


def _stat_text(event, key, stat_names) -> str | None:
    for stat in event.stats:
        if stat.metadata_id == key:
            return stat_names.get(stat.ref_value) if stat.ref_value else stat.str_value
    return None
