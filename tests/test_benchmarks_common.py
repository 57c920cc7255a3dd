"""benchmarks/common.py: one A/B arm run in its checkout, its exit status said; a comparison's
figures read back and its folder pruned to them."""
from __future__ import annotations

import json
import os
import statistics
import sys

import pytest

from benchmarks.common import comparison_figures, prune, run_and_say


def test_an_arm_runs_in_its_folder_with_its_environment_and_says_how_it_ended(tmp_path, capsys):
    command = [sys.executable, "-c", "import os, pathlib, sys; pathlib.Path('arm.txt')"
               ".write_text(os.environ['ARM']); sys.exit(3)"]
    status = run_and_say("batch4-new-r0", command, tmp_path, {**os.environ, "ARM": "new"})
    assert status == 3
    assert (tmp_path / "arm.txt").read_text() == "new"  # ran in cwd, with the env given
    said = capsys.readouterr().out
    assert said.startswith("batch4-new-r0: exit 3, ") and said.rstrip().endswith(" s")


def _summary(folder, tf_own, torch_own, tf_torch):
    """A comparison's summary.json with the figures the benchmarks read; each ratio
    (centre, low, high)."""
    def entry(ratio):
        return dict(zip(("ratio", "low", "high"), ratio))
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({
        "created_at": "2026-11-28T10:00:00+0000", "config": {"batch_size": 4},
        "seeds": [0, 1, 2], "side_by_side": True,
        "ratios": {"train_time_s": entry(tf_torch), "steady_step_time_ms": {"ratio": 2.0},
                   "steady_train_time_s": entry(tf_own)},
        "own_loops": {"tf": {"time_ratio": entry(tf_own)},
                      "torch": {"time_ratio": entry(torch_own)}},
        "frameworks": {"tf": {"steady_step_time_ms": {"centre": 1.5}}, "torch": {}}}))


def test_a_comparison_is_read_back_as_its_intervals_and_pruned_to_what_they_come_from(
        tmp_path):
    folder = tmp_path / "batch4-r1"
    _summary(folder, (1.0, 0.9, 1.2), (1.02, 1.0, 1.05), (2.0, 1.6, 2.4))
    for name in ("runs/tf-seed0/result.json", "runs/tf-seed0/model.keras",
                 "runs/tf-seed0/checkpoint/state.json", "own-loops/tf-seed0/own-loop.json"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
    figures = comparison_figures(folder)
    assert figures["tf_shared_over_own"]["width"] == pytest.approx(1.2 / 0.9)
    assert figures["torch_shared_over_own"]["width"] == pytest.approx(1.05)
    assert figures["tf_over_torch_train_time"]["width"] == pytest.approx(1.5)
    assert figures["tf_over_torch_steady_step"] is None  # no interval
    assert figures["tf_over_torch_after_first_epoch"]["width"] == pytest.approx(1.2 / 0.9)
    assert figures["tf_over_torch_first_epoch"] is None  # not in the summary
    assert (figures["batch"], figures["seeds"]) == (4, 3)
    assert (figures["tf_step_ms"], figures["torch_step_ms"]) == (1.5, None)
    prune(folder)
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert left == ["own-loops/tf-seed0/own-loop.json", "runs/tf-seed0/result.json",
                    "summary.json"]
    assert not (folder / "runs/tf-seed0/checkpoint").exists()


def test_the_repeats_are_summed_up_by_how_many_resolve():
    from benchmarks.tool_overhead import _over_repeats
    entries = [{"ratio": r, "width": w} for r, w in ((1.0, 1.1), (1.04, 1.3), (0.98, 1.19))]
    found = _over_repeats(entries + [None], 1.2)
    assert found == {"n": 3, "median_centre": 1.0, "median_width": 1.19, "widest": 1.3,
                     "resolving": 2}


def test_the_beside_benchmark_refuses_a_comparison_it_does_not_have(tmp_path):
    """benchmarks/tool_overhead.py --beside --comparisons: an unknown name ends it in one line
    naming the ones there are, before any comparison runs."""
    import argparse
    from benchmarks.tool_overhead import measure_beside
    args = argparse.Namespace(comparisons="batch4, nope", out=tmp_path, repeats=1)
    with pytest.raises(SystemExit, match="no comparison named nope .there are batch32, batch4"):
        measure_beside(args)
    assert not any(tmp_path.iterdir())


def test_the_beside_benchmark_runs_only_the_comparisons_named_turning_their_order(
        tmp_path, monkeypatch):
    """--comparisons quickstart,batch4: each repeat runs those two comparisons' commands, the
    order turned every repeat, batch 4 at the PyTorch tutorial's learning rate; the summary
    and the commands it records hold them alone."""
    import argparse

    from benchmarks import common, tool_overhead
    ran = []
    monkeypatch.setattr(common, "run_and_say", lambda label, command, cwd: ran.append(
        (label, command)) or 1)  # every comparison "fails": no figures to read
    monkeypatch.setattr(common, "prune", lambda folder: None)
    args = argparse.Namespace(comparisons="quickstart,batch4", out=tmp_path, repeats=2)
    found = tool_overhead.measure_beside(args)
    assert [label for label, _ in ran] == ["quickstart-r1", "batch4-r1", "batch4-r2",
                                           "quickstart-r2"]
    batch4 = ran[1][1]
    assert batch4[batch4.index("--batch-size") + 1] == "4"
    assert batch4[batch4.index("--lr") + 1] == "0.001"
    assert batch4[batch4.index("--out") + 1] == str((tmp_path / "overhead-beside" / "batch4-r1")
                                                    .resolve())
    assert sorted(found["summary"]) == sorted(found["comparisons"]) == ["batch4", "quickstart"]
    assert found["summary"]["batch4"]["tf_shared_over_own"]["n"] == 0 and not found["rows"]


def test_a_setting_is_summed_up_by_its_medians_and_by_its_runs_paired_in_time():
    """The paired ratio follows each run's neighbour in time, which a drift of the host moves
    together, where the medians' ratio mixes runs from either end of the drift."""
    from benchmarks.common import ratio_interval
    from benchmarks.setting_ab import markdown, summarise
    # the host slows by 30% over the runs; B is 5% slower than the A beside it, every time
    drift = [1.0, 1.1, 1.2, 1.3]
    runs = {"0.5": [{"seconds": 2.0 * d, "step_ms": 4.0 * d} for d in drift],
            "0.125": [{"seconds": 2.1 * d, "step_ms": 4.0 * d * (1.05 if i % 2 else 0.95)}
                      for i, d in enumerate(drift)]}
    row = summarise("torch", runs, ["0.5", "0.125"])
    assert row["paired_s"]["ratio"] == pytest.approx(1.05)
    assert row["paired_s"]["width"] == pytest.approx(1.0)  # every pair the same ratio
    step = ratio_interval([0.95, 1.05, 0.95, 1.05])
    assert row["paired_step_ms"] == pytest.approx(step)
    assert step["low"] < 1.0 < step["high"] and step["width"] == pytest.approx(
        step["high"] / step["low"])
    assert row["ratio_s"] == pytest.approx((2.1 * 1.15) / (2.0 * 1.15))
    assert row["ratio_step_ms"] == pytest.approx(
        statistics.median([4.0 * 0.95, 4.4 * 1.05, 4.8 * 0.95, 5.2 * 1.05]) / 4.6)
    assert ratio_interval([1.0, 1.1]) is None  # too few pairs for an interval
    table = markdown({"setting": "timing-window-s", "values": ["0.5", "0.125"], "cpu": "a CPU",
                      "date": "2026-11-29", "command": "python -m benchmarks.setting_ab",
                      "rows": [row]})
    assert ("| torch | 2.300 [2.000-2.600] | 2.415 [2.100-2.730] | 1.050 | "
            "1.050 [1.050, 1.050] (1.00x) |") in table
    assert ("| torch | 4.600 [4.000-5.200] | 4.590 [3.800-5.460] | 0.998 | "
            "0.999 [0.911, 1.095] (1.20x) |") in table


def test_a_setting_whose_runs_lack_a_figure_is_summed_up_without_it():
    """An own loop records no windows (`step_ms` None): the table leaves that figure out."""
    from benchmarks.setting_ab import markdown, summarise
    runs = {"a": [{"seconds": s, "step_ms": None} for s in (1.0, 1.2, 1.1)],
            "b": [{"seconds": s, "step_ms": None} for s in (1.1, 1.3, 1.2)]}
    row = summarise("tf", runs, ["a", "b"])
    assert "paired_step_ms" not in row and row["ratio"] == pytest.approx(1.2 / 1.1)
    table = markdown({"setting": "s", "values": ["a", "b"], "cpu": "c", "date": "d",
                      "command": "x", "rows": [row]})
    assert "Median step time" not in table and "| tf | 1.100 [1.000-1.200] |" in table
