"""The typed records (compare.records): read back from their JSON form field by field, each
value checked against its field's type, with one line naming the field that is wrong."""

from __future__ import annotations

import json

import pytest

from compare.records import (
    FIELDS,
    OwnLoopRecord,
    ProcessClock,
    RecordError,
    RunSummary,
    StepTimes,
)

REQUIRED = {"status": "completed", "replicas": 2, "train_flops_per_image": 100}


def test_a_summary_round_trips_through_json_with_its_nested_records():
    summary = RunSummary(**REQUIRED, train_time_s=4.0, epochs_completed=2,
                         steady_step_time_ms=StepTimes(median=5.0, p90=6.0, windows=3,
                                                       steps_per_window=8, window_target_s=0.5),
                         processes=[ProcessClock(rank=0, train_time_s=2.0,
                                                 input_wait_fraction=None, median_step_ms=5.0),
                                    ProcessClock(rank=1, train_time_s=2.5,
                                                 input_wait_fraction=0.1, median_step_ms=5.5)],
                         energy_note="CPU run")
    written = json.loads(json.dumps(summary.to_dict()))
    assert written["processes"][1] == {"rank": 1, "train_time_s": 2.5,
                                       "input_wait_fraction": 0.1, "median_step_ms": 5.5}
    assert RunSummary.from_dict(written) == summary
    assert tuple(written) == FIELDS  # every field written, in the declared order


def test_an_older_summary_takes_the_defaults_and_an_unknown_field_is_left_out():
    read = RunSummary.from_dict({**REQUIRED, "train_time_s": 3, "a_later_field": [1, 2]})
    assert read.train_time_s == 3.0 and isinstance(read.train_time_s, float)  # JSON's 3
    assert read.steady_step_time_ms == StepTimes() and read.processes is None
    assert read.mfu is None and read.epochs_completed == 0 and read.eval_time_s == 0.0


@pytest.mark.parametrize("change, message", [
    ({"status": None}, "run: summary.status is null"),
    ({"replicas": 2.5}, r"run: summary.replicas: 2.5 is not int"),
    ({"replicas": True}, r"run: summary.replicas: True is not int"),
    ({"train_time_s": "4"}, r"run: summary.train_time_s: '4' is not float"),
    ({"train_time_s": {}}, r"run: summary.train_time_s: \{\} is not float"),
    ({"mfu": [0.1]}, r"run: summary.mfu: \[0.1\] is not float or null"),
    ({"mfu_note": 3}, r"run: summary.mfu_note: 3 is not str or null"),
    ({"steady_step_time_ms": [5.0]}, "run: summary.steady_step_time_ms: not a JSON object"),
    ({"steady_step_time_ms": {"median": "fast"}},
     r"run: summary.steady_step_time_ms.median: 'fast' is not float or null"),
    ({"processes": {"rank": 0}}, r"run: summary.processes: \{'rank': 0\} is not list or null"),
    ({"processes": [{"rank": 0, "train_time_s": 1.0, "input_wait_fraction": None}]},
     r"run: summary.processes\[0\] lacks median_step_ms"),
])
def test_a_wrong_field_is_refused_in_one_line_naming_it(change, message):
    with pytest.raises(RecordError, match=f"^{message}$"):
        RunSummary.from_dict({**REQUIRED, **change}, "run: summary")


def test_a_missing_required_field_or_a_non_object_is_refused():
    with pytest.raises(RecordError, match="^summary lacks replicas$"):
        RunSummary.from_dict({"status": "completed", "train_flops_per_image": 1})
    with pytest.raises(RecordError, match="^summary: not a JSON object$"):
        RunSummary.from_dict([REQUIRED])


def test_an_own_loop_record_keeps_its_config_windows_and_loss_pairs():
    data = {"schema_version": 2, "framework": "torch", "seed": 3, "status": "completed",
            "config": {"model": "lenet", "pipeline": {"kind": "tuned"}},
            "device_used": "CPU", "loop": "plain", "trained": "in its run's process",
            "steps_per_epoch": 8, "steps_per_call": 4,
            "epoch_times_s": [1, 0.5], "windows": [{"epoch": 1, "steps": 8, "seconds": 1.0}],
            "steady_step_time_ms": {"median": 62.5, "p90": 70.0, "windows": 1},
            "mean_losses": [[4, 2.25], [8, 2.0]], "final_test_accuracy": 0.5,
            "final_test_loss": 1.5, "error": None}
    record = OwnLoopRecord.from_dict(data)
    assert record.config["pipeline"] == {"kind": "tuned"}
    assert record.epoch_times_s == [1.0, 0.5] and record.mean_losses == [[4.0, 2.25], [8.0, 2.0]]
    assert record.steady_step_time_ms == StepTimes(median=62.5, p90=70.0, windows=1)
    assert record.to_dict() == {**data, "epoch_times_s": [1.0, 0.5], "window_pairs": [],
                                "own_first": [],
                                "steady_step_time_ms": {**data["steady_step_time_ms"],
                                                        "steps_per_window": None,
                                                        "window_target_s": None}}
    with pytest.raises(RecordError, match=r"^own loop.mean_losses\[1\]\[0\]: 'x' is not float$"):
        OwnLoopRecord.from_dict({**data, "mean_losses": [[4, 2.0], ["x", 2.0]]})
    with pytest.raises(RecordError, match=r"^own loop.config: \[\] is not dict$"):
        OwnLoopRecord.from_dict({**data, "config": []})
    # a window is a ClockWindow: every key of it, in an object
    with pytest.raises(RecordError, match=r"^own loop.windows\[0\] lacks seconds, steps$"):
        OwnLoopRecord.from_dict({**data, "windows": [{"epoch": 1}]})
    with pytest.raises(RecordError, match=r"^own loop.windows\[0\]: 8 is not ClockWindow$"):
        OwnLoopRecord.from_dict({**data, "windows": [8]})
