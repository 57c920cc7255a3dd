"""Where a step's time goes (--profile): the interval arithmetic of compare.run.phases, each
framework's reading of its own profiler's trace (real CPU runs, and GPU traces built in
the profilers' documented formats), and the report's table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import tiny_config

from compare import report, schema
from compare.experiment import datasets
from compare.report import tables
from compare.run import fairness, loop, phases, recorder


def test_union_overlap_and_gaps_count_shared_time_once():
    spans = [(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]
    assert phases.union_seconds(spans) == pytest.approx(4.0)
    assert phases.merged(spans) == [(0.0, 3.0), (5.0, 6.0)]
    assert phases.overlap_seconds(spans, [(2.5, 5.5)]) == pytest.approx(1.0)
    assert phases.gaps(spans, 0.0, 7.0) == [(3.0, 5.0), (6.0, 7.0)]
    assert phases.union_seconds([]) == 0.0


def test_phase_names_are_read_back_from_scopes_as_the_frameworks_write_them():
    assert phases.scope("forward") == "cnncompare.forward"
    assert phases.phase_of_scope("while/body/_1/cnncompare.update_1/sgd/Mul") == "update"
    assert phases.phase_of_scope("cnncompare.host_to_device") == "host_to_device"
    assert phases.phase_of_scope("outer/cnncompare.input/cnncompare.forward/x") == "forward"
    assert phases.phase_of_scope("lenet/conv1/Conv2D") is None
    with pytest.raises(ValueError):
        phases.scope("lunch")


def test_split_on_the_host_gives_each_phase_per_step_and_the_rest():
    capture = phases.Capture(host={"input": [(0.0, 0.1), (1.0, 1.1)],
                                   "forward": [(0.1, 0.4), (1.1, 1.4)],
                                   "backward": [(0.4, 0.9), (1.4, 1.9)],
                                   "update": [(0.9, 0.95), (1.9, 1.95)]})
    split = phases.split(capture, steps=2, wall_s=2.0)
    assert split["clock"] == "host" and split["step_ms"] == pytest.approx(1000.0)
    assert split["phases_ms"]["forward"] == pytest.approx(300.0)
    assert split["phases_ms"]["backward"] == pytest.approx(500.0)
    assert split["phases_ms"]["all_reduce"] == 0.0
    assert split["other_ms"] == pytest.approx(50.0)  # 1000 - 950 ms covered per step
    assert split["input_stall_ms"] == pytest.approx(100.0)  # on CPU: the input phase
    assert split["device_idle_ms"] is None
    assert phases.shares(split)["backward"] == pytest.approx(0.5)


def test_split_on_a_gpu_reads_the_device_and_the_stall_inside_the_input_phase():
    """One step: the host waits for input 0-4 ms; the device is busy 1-2 ms (the previous
    step's tail) and 5-9 ms. Device idle: 0-1, 2-5, 9-10 = 5 ms; inside the input phase
    (0-4): 0-1 and 2-4 = 3 ms of stall."""
    ms = 1e-3
    capture = phases.Capture(
        host={"input": [(0 * ms, 4 * ms)], "forward": [(4 * ms, 6 * ms)],
              "update": [(9.5 * ms, 10 * ms)]},
        device={"forward": [(5 * ms, 7 * ms)], "backward": [(7 * ms, 9 * ms)],
                "update": [(1 * ms, 2 * ms)]},
        device_busy=[(1 * ms, 2 * ms), (5 * ms, 7 * ms), (7 * ms, 9 * ms)])
    split = phases.split(capture, steps=1, wall_s=10 * ms)
    assert split["clock"] == "device"
    assert split["phases_ms"]["forward"] == pytest.approx(2.0)
    assert split["host_phases_ms"]["input"] == pytest.approx(4.0)
    assert split["device_idle_ms"] == pytest.approx(5.0)
    assert split["input_stall_ms"] == pytest.approx(3.0)
    assert split["other_ms"] == pytest.approx(5.0)


def test_torch_reads_kernels_into_the_phase_that_launched_them(tmp_path):
    """A torch.profiler (kineto) trace of one GPU step: kernels are tied to their launch
    by `correlation`; the copy, the NCCL kernel and an unlaunched kernel are placed too."""
    from torch_impl import profile as torch_profile
    us = [
        {"ph": "X", "cat": "user_annotation", "name": "cnncompare.input", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "cnncompare.forward", "ts": 100,
         "dur": 50},
        {"ph": "X", "cat": "user_annotation", "name": "cnncompare.backward", "ts": 150,
         "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 5,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 160, "dur": 5,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "sm90_conv_fprop", "ts": 120, "dur": 40,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "sm90_conv_dgrad", "ts": 170, "dur": 60,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 90,
         "dur": 10, "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
         "ts": 200, "dur": 30, "args": {"correlation": 10}},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": us}))
    capture = torch_profile.read_capture(path, on_gpu=True)
    seconds = {name: phases.union_seconds(spans) * 1e6 for name, spans in capture.device.items()}
    assert seconds == pytest.approx({"input": 0, "host_to_device": 10, "forward": 40,
                                     "backward": 60, "all_reduce": 30, "update": 0})
    busy_us = phases.union_seconds(capture.device_busy) * 1e6
    assert busy_us == pytest.approx(110)  # 90-100, 120-160, 170-230
    assert phases.union_seconds(capture.host["input"]) * 1e6 == pytest.approx(100)
    named = {name: seconds * 1e6 for name, seconds in capture.device_events}
    assert named == pytest.approx({"sm90_conv_fprop": 40, "sm90_conv_dgrad": 60,
                                   "Memcpy HtoD (Pinned -> Device)": 10,
                                   "ncclDevKernel_AllReduce_Sum_f32_RING_LL": 30})


def test_tf_reads_gpu_kernels_by_the_op_in_their_tf_op_stat(tmp_path, tf_two_cpus):
    """An XSpace as TensorFlow's profiler writes it on a GPU (tf_op a ref to stat metadata,
    times on each line's clock): kernels go to the phase of the op that launched them."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from tf_impl import profile as tf_profile
    space = xplane_pb2.XSpace()
    task = space.planes.add(name="Task Environment")
    task.stat_metadata[1].name = "profile_start_time"
    task.stats.add(metadata_id=1, uint64_value=1_795_000_000_000_000_000)  # ns since 1970
    host = space.planes.add(name="/host:CPU")
    host.event_metadata[1].name = "while/cnncompare.update/AssignVariableOp:AssignVariableOp"
    host.event_metadata[2].name = ("while/gradient_tape/cnncompare.forward/lenet/fc1/MatMul:"
                                   "MatMul")
    host.event_metadata[3].name = "cuLaunchKernel"  # CUPTI's record of a launch
    host.stat_metadata[1].name = "correlation_id"
    line = host.lines.add(id=77, name="tf_Compute", timestamp_ns=1000)
    line.events.add(metadata_id=1, offset_ps=1_000_000, duration_ps=4_000_000)  # 2 to 6 us
    line.events.add(metadata_id=2, offset_ps=19_000_000, duration_ps=10_000_000)  # 20 to 30
    launch = line.events.add(metadata_id=3, offset_ps=24_000_000, duration_ps=1_000_000)
    launch.stats.add(metadata_id=1, uint64_value=42)
    gpu = space.planes.add(name="/device:GPU:0")
    gpu.stat_metadata[1].name = "tf_op"
    gpu.stat_metadata[2].name = "correlation_id"
    # The outermost annotation of a launch may be the tf.function's, not the op's: such a
    # kernel goes to the op that launched it (the launch with its correlation id).
    gpu.stat_metadata[13].name = "__inference__distributed_steps_1131"
    ops = {10: "while/StatefulPartitionedCall/cnncompare.forward/lenet/conv1/Conv2D:Conv2D",
           11: "while/StatefulPartitionedCall/gradient_tape/cnncompare.forward/lenet/conv1/"
               "Conv2DBackpropFilter:Conv2DBackpropFilter",
           12: "while/cnncompare.update/torch_form_sgd/AssignSubVariableOp:AssignSubVariableOp"}
    for key, op in ops.items():
        gpu.stat_metadata[key].name = op
    kernels = [(1, "volta_scudnn_128x64_relu", 10, 6, 4), (2, "wgrad_kernel", 11, 10, 5),
               (3, "axpy_kernel", 12, 15, 1), (4, "MemcpyH2D", None, 2, 1),
               (5, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", None, 16, 2),
               (6, "gemm_kernel", 13, 40, 3)]
    stream = gpu.lines.add(name="Stream #14(Compute,MemcpyH2D)", timestamp_ns=1000)
    derived = gpu.lines.add(name="XLA Ops", timestamp_ns=1000)
    derived.events.add(metadata_id=6, offset_ps=40_000_000, duration_ps=3_000_000)
    for key, name, op, start_us, length_us in kernels:
        gpu.event_metadata[key].name = name
        event = stream.events.add(metadata_id=key, offset_ps=start_us * 1_000_000,
                                  duration_ps=length_us * 1_000_000)
        if op is not None:
            event.stats.add(metadata_id=1, ref_value=op)
        if key == 6:
            event.stats.add(metadata_id=2, uint64_value=42)
    folder = tmp_path / "plugins" / "profile" / "2026_11_21_00_00_00"
    folder.mkdir(parents=True)
    (folder / "gpu-host.xplane.pb").write_bytes(space.SerializeToString())
    capture = tf_profile.read_capture(tmp_path, on_gpu=True)
    us = {name: phases.union_seconds(spans) * 1e6 for name, spans in capture.device.items()}
    assert us == pytest.approx({"input": 0, "host_to_device": 1, "forward": 4, "backward": 8,
                                "all_reduce": 2, "update": 1})
    assert phases.union_seconds(capture.host["update"]) * 1e6 == pytest.approx(4.0)
    assert capture.origin_s == pytest.approx(1_795_000_000.0)
    assert not capture.notes
    # the kernel table counts the streams' kernels, not a line derived from them
    assert [(name, round(seconds * 1e6)) for name, seconds in capture.device_events] == [
        (name, length_us) for _, name, _, _, length_us in kernels]


def _profiled_run(tmp_path, module, **changes):
    settings = {"epochs": 2, "steps_per_call": 2, "profile_steps": 3, **changes}
    config = tiny_config(tmp_path, **settings)
    trainer = module.Trainer(config, datasets.config_dataset(config), module.select_device(config))
    manifest = fairness.manifest(config, trainer.choice, trainer.replicas, trainer.manifest())
    record = recorder.Recorder(config, trainer, trainer.spec, {}, manifest, {})
    assert loop.train_epochs(trainer, config, record) == 0
    trainer.close()  # the profile's part-read epoch: its pipeline is freed here, as runs do
    return config, record


@pytest.mark.machine_sensitive  # durations
@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_profile_splits_extra_steps_after_training_into_phases(tmp_path, framework,
                                                               tf_two_cpus):
    """--profile 3 with 2 steps per call: one warm call, then 4 profiled steps after the
    last epoch, which no other figure holds; the step's compute shows in forward and
    backward, and a single replica all-reduces nothing."""
    module = tf_two_cpus if framework == "tf" else __import__("torch_impl.train").train
    config, record = _profiled_run(tmp_path, module)
    profile = record.result["profile"]
    assert profile["steps"] == 4 and profile["warm_steps"] == 2 and profile["clock"] == "host"
    took = profile["phases_ms"]
    assert took["forward"] > 0 and took["backward"] > 0 and took["update"] > 0
    assert took["input"] > 0 and took["all_reduce"] == 0
    assert all(0 <= ms <= profile["step_ms"] for ms in took.values())  # each within the step
    assert 0 <= profile["other_ms"] < profile["step_ms"]
    with open(Path(config.out) / "steps.csv") as f:
        assert len(list(csv.DictReader(f))) == 16  # 8 steps x 2 epochs: none of the profile's
    assert sum(w["steps"] for w in record.windows) == 16
    written = Path(profile["files"])
    if framework == "torch":  # a Chrome/Perfetto trace holding the phase ranges
        events = json.loads(written.read_text())["traceEvents"]
        assert any(e.get("name") == phases.scope("backward") for e in events)
    else:  # TensorBoard's profile plugin layout
        assert list(written.glob("plugins/profile/*/*.xplane.pb"))
    result = schema.read_result(Path(config.out) / "result.json")
    assert result["files"]["profile"] == profile["files"]
    rows = tables.phase_rows([{**result, "path": str(Path(config.out) / "result.json")}])
    assert rows[0]["clock"] == "host" and len(rows[0]["cells"]) == len(phases.PHASES)
    slowdown = profile["step_ms"] / result["summary"].steady_step_time_ms.median
    assert rows[0]["profiler_cost"] == f"{slowdown:.2f}x"
    assert rows[0]["device_idle_less_profiler"] == "n/a"  # a CPU: no device to idle


def test_the_profilers_cost_is_taken_out_of_the_devices_idle_time():
    """PyTorch's ResNet-9 on an H200: profiled 13.25 ms a step against 9.49 ms unprofiled,
    9.0 ms of it the GPU idle: 3.76 ms of that idle time is the profiler's."""
    cost = phases.profiler_cost(13.25, 9.49, 9.0)
    assert cost["slowdown"] == pytest.approx(13.25 / 9.49)
    assert cost["device_idle_less_profiler"] == pytest.approx((9.0 - 3.76) / 9.49)
    assert phases.profiler_cost(7.0, 7.41, 2.0)["device_idle_less_profiler"] == pytest.approx(
        2.0 / 7.41)  # a profiler that cost nothing: the idle time stands
    assert phases.profiler_cost(20.0, 9.49, 1.0)["device_idle_less_profiler"] == 0.0
    assert phases.profiler_cost(13.25, None, 9.0) == {"slowdown": None,
                                                      "device_idle_less_profiler": None}


def test_tf_two_replicas_show_their_all_reduce(tmp_path, tf_two_cpus):
    _, record = _profiled_run(tmp_path, tf_two_cpus, devices=2)
    assert record.result["profile"]["phases_ms"]["all_reduce"] > 0


def test_a_failing_profiler_leaves_a_note_and_a_completed_run(tmp_path, monkeypatch):
    from torch_impl import train as torch_train

    def broken(self):
        self.profiler.stop()
        raise RuntimeError("trace export failed")
    monkeypatch.setattr(torch_train.Trainer, "stop_profile", broken)
    _, record = _profiled_run(tmp_path, torch_train)
    assert record.result["profile"] == {"error": "RuntimeError: trace export failed"}
    assert record.result["summary"]["status"] == "completed"
    assert len(record.epochs) == 2
    from click.testing import CliRunner

    from compare.cli import cli
    outcome = CliRunner().invoke(cli, ["report", str(tmp_path / "run"), "--out",
                                       str(tmp_path / "report")])
    assert outcome.exit_code == 0, outcome.output
    text = (tmp_path / "report" / "report.md").read_text()
    table = text.split("Where a step's time goes")[1].split("\n\n")[2].splitlines()
    assert "profile failed: RuntimeError: trace export failed" in table[2]
    assert len({row.count("|") for row in table}) == 1  # every row has the header's cells


@pytest.mark.machine_sensitive  # durations
def test_tf_input_waits_land_on_the_profile_clock(tmp_path, tf_two_cpus):
    """TensorFlow's profiler leaves get_next out once its cost model finds it cheap, so the
    input phase comes from the step function's own stamps, placed on the trace's clock."""
    config = tiny_config(tmp_path, steps_per_call=4)
    trainer = tf_two_cpus.Trainer(config, datasets.config_dataset(config),
                                  tf_two_cpus.select_device(config))
    batches = trainer.batches(0)
    trainer.train_steps(batches, [0.01] * 4)  # traced before the profile starts
    trainer.start_profile(tmp_path / "profile")
    trainer.train_steps(batches, [0.01] * 4)
    trainer.sync()
    capture = trainer.stop_profile()
    trainer.close()
    waits = capture.host["input"]
    work = capture.host["forward"] + capture.host["backward"]
    assert len(waits) >= 4 and work and not capture.notes
    first, last = min(s for s, _ in work), max(e for _, e in work)
    # seconds, on one clock: each wait lies within the steps' work, give or take the whole
    # span of it (a wait on another clock would be off by the clocks' offset, seconds to
    # hours; the span, 8 steps of LeNet, is milliseconds, and a slow machine stretches both)
    span = last - first
    assert all(first - span <= s <= e <= last + span for s, e in waits)


def test_a_stop_during_the_profile_keeps_the_run_completed(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM in the extra steps: every epoch was final, so the run stays
    completed (exit 0) and the profile says it was interrupted."""
    from torch_impl import train as torch_train
    original = torch_train.Trainer.train_steps

    def stopped(self, batches, lrs):
        if self.profiling:
            raise KeyboardInterrupt
        return original(self, batches, lrs)
    monkeypatch.setattr(torch_train.Trainer, "train_steps", stopped)
    config, record = _profiled_run(tmp_path, torch_train)
    assert record.result["profile"] == {"error": "interrupted"}
    assert record.result["summary"]["status"] == "completed" and len(record.epochs) == 2


@pytest.mark.parametrize("steps_per_call, expected", [(2, (4, 2)), (8, (8, 8)), (3, (3, 3)),
                                                      (16, (8, 8))])
def test_the_profile_takes_whole_calls_and_leaves_one_to_warm_up(tmp_path, steps_per_call,
                                                                 expected):
    """8 steps an epoch, --profile 3: whole calls of the traced length, one left for the
    warm call when the epoch holds two; an epoch of fewer than two calls is all warm-up and
    the next epoch's call is profiled: never a cold one."""
    from torch_impl import train as torch_train
    _, record = _profiled_run(tmp_path, torch_train, steps_per_call=steps_per_call)
    profile = record.result["profile"]
    assert (profile["steps"], profile["warm_steps"]) == expected


def test_a_device_clock_split_is_not_set_beside_a_host_clock_one():
    """TensorFlow read on the host (no GPU trace) beside PyTorch read on the device: the
    report says the two are not comparable; on one clock it says nothing."""
    host = {"framework": "tf", "profile": {"clock": "host"}}
    device = {"framework": "torch", "profile": {"clock": "device"}}
    said = report.phase_clocks_differ([host, device])
    assert said.startswith("Not comparable side by side")
    assert "TensorFlow/Keras on the host clock" in said and "PyTorch on the device clock" in said
    assert report.phase_clocks_differ([host, {**device, "profile": {"clock": "host"}}]) is None
    assert report.phase_clocks_differ([device]) is None
