"""The CPU timing study's scripts (benchmarks/research/): each table they write is read back
from the comparisons it sums up."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

from compare.records import OwnLoopRecord, StepTimes
from compare.schema import OWN_LOOP_VERSION


def _record(framework: str, seed: int, batch: int, pairs: list, own_first: list | None = None,
            steps: StepTimes | None = None) -> OwnLoopRecord:
    """A completed own loop trained beside its run, with its pairs of windows."""
    return OwnLoopRecord(schema_version=OWN_LOOP_VERSION, framework=framework, seed=seed,
                         status="completed", config={"batch_size": batch}, device_used="cpu",
                         steady_step_time_ms=steps, window_pairs=pairs,
                         own_first=own_first or [])

def test_the_order_of_a_pairs_windows_is_told_within_a_seed_or_between_seeds():
    """benchmarks/research/pair_orders.py: with `own_first`, each seed's two orders' medians apart
    (here the shared loop's window first costs it 10%); without, the seeds of each order."""
    from benchmarks.research.pair_orders import markdown, orders
    turning = _record("tf", 0, 4, [[1.1, 1.0], [1.0, 1.0]] * 3, [False, True] * 3,
                      StepTimes(median=2.0, steps_per_window=64))
    row, = orders([turning, dataclasses.replace(
        turning, seed=1, steady_step_time_ms=StepTimes(median=3.0, steps_per_window=64))])
    assert row["within_seeds"] and row["difference"] == pytest.approx(math.log(1.1))
    assert (row["seeds"], row["pairs"]) == (2, [6])
    assert row["window_s"] == pytest.approx(0.16)  # the median of 0.128 and 0.192 s
    # the first window after the other's turn: half the difference, in log and in ms
    assert markdown([row], "cmd").splitlines()[-1] == (
        "| 4 | tf | 2 | 6 | 0.095 (within each seed) | 0.048 | 0.160 s | 0.048 (log), 7.6 ms |")
    fixed = [_record("torch", seed, 32, [[ratio, 1.0]] * 4)
             for seed, ratio in ((0, 1.2), (1, 1.0), (2, 1.2))]  # even seeds: shared first
    row, = orders(fixed)
    assert not row["within_seeds"] and row["difference"] == pytest.approx(math.log(1.2))
    assert row["pair_spread"] == 0.0


def test_the_windows_benchmark_runs_the_other_length_and_names_it_in_its_table(tmp_path):
    """benchmarks/research/turns_ab.py --window-s: only its `window` comparisons ask for that window
    length, and the table's summary rows give each form's median width and centres."""
    from benchmarks.research.turns_ab import comparison_command, saved, table, window_of
    shorter = comparison_command(4, 12000, "window", tmp_path, 3, 0.125)
    default = comparison_command(4, 12000, "turns", tmp_path, 3, 0.125)
    assert shorter[shorter.index("--timing-window-s") + 1] == "0.125" and "--turns" in shorter
    assert "--timing-window-s" not in default and "--turns" in default

    def row(name: str, form: str, width: float, ratio: float) -> dict:
        entry = {"ratio": ratio, "low": ratio / width ** 0.5, "high": ratio * width ** 0.5,
                 "width": width}
        return {"comparison": name, "side_by_side": True, "form": form,
                "tf_shared_over_own": entry}
    text = table([row("batch4-turns-r1", "turns", 1.2, 1.0),
                  row("batch4-window-r1", "window", 1.1, 0.9),
                  row("batch4-window-r2", "window", 1.05, 1.0)], 0.125)
    summary = [line for line in text.splitlines() if "windows of 0.125 s" in line]
    assert [line.split("|")[7].strip() for line in summary] == ["1.08x", "0.949"]
    assert window_of(tmp_path) is None
    (tmp_path / "turns_ab.json").write_text(json.dumps({"window_s": 0.125, "command": "x"}))
    assert window_of(tmp_path) == 0.125
    assert saved(tmp_path, "command") == "x" and saved(tmp_path, "rows") is None


def test_the_turns_benchmark_tabulates_each_frameworks_step_per_batch_and_form():
    """benchmarks/research/turns_ab.py's second table: per batch and form, the geometric mean of the
    comparisons' median steps and their range; a comparison without one is left out."""
    from benchmarks.research.turns_ab import step_table
    rows = [{"batch": 4, "form": "turns", "tf_step_ms": 1.0, "torch_step_ms": 2.0},
            {"batch": 4, "form": "turns", "tf_step_ms": 4.0, "torch_step_ms": None},
            {"batch": 4, "form": "window", "tf_step_ms": 3.0, "torch_step_ms": 3.0},
            {"batch": 32, "form": "turns", "tf_step_ms": 5.0, "torch_step_ms": 6.0}]
    lines = step_table(rows, 0.125).splitlines()[2:]
    assert [line.split(" | ") for line in lines] == [
        ["| 32", "turns", "1", "5.000 (5.000-5.000)", "6.000 (6.000-6.000) |"],
        ["| 4", "turns", "2", "2.000 (1.000-4.000)", "2.000 (2.000-2.000) |"],
        ["| 4", "window, 0.125 s windows", "1", "3.000 (3.000-3.000)", "3.000 (3.000-3.000) |"]]


def test_the_allocator_benchmark_sums_up_each_setting_and_pairs_its_runs_in_time():
    """benchmarks/research/allocator_ab.py: each setting's shared / own interval over its runs, and
    each kept run's steps against the glibc-default run beside it."""
    from benchmarks.research.allocator_ab import markdown, summarise

    def run(setting, ratio, shared, own, faults):
        return {"setting": setting, "seed": 0, "host_allocator": "x", "shared_over_own": ratio,
                "shared_step_ms": shared, "own_step_ms": own, "minor_faults_per_step": faults}
    runs = [run("kept", 1.00, 4.0, 4.0, 60.0), run("glibc-default", 1.04, 4.16, 4.0, 100.0),
            run("glibc-default", 1.05, 4.41, 4.2, 110.0), run("kept", 1.01, 4.242, 4.2, 62.0),
            run("kept", 0.99, 3.96, 4.0, 61.0), run("glibc-default", 1.03, 4.12, 4.0, 90.0)]
    found = summarise(runs)
    assert found["kept"]["shared_over_own"]["ratio"] == pytest.approx(
        math.exp(statistics.mean(math.log(r) for r in (1.00, 1.01, 0.99))))
    assert found["glibc-default"]["minor_faults_per_step"] == 100.0
    assert found["kept"]["shared_step_ms"] == 4.0
    # pairs in order of their runs: (4.0, 4.16), (4.242, 4.41), (3.96, 4.12)
    shared = found["kept_over_default_shared_step"]
    assert shared["ratio"] == pytest.approx(math.exp(statistics.mean(
        math.log(k / d) for k, d in ((4.0, 4.16), (4.242, 4.41), (3.96, 4.12)))))
    assert shared["high"] < 1.0  # kept ran faster beside every default run
    assert found["kept_over_default_own_step"]["ratio"] == pytest.approx(1.0)
    table = markdown({"framework": "torch", "cpu": "a CPU", "date": "2026-11-29",
                      "command": "python -m benchmarks.research.allocator_ab",
                      "batches": [{"batch": 32, "summary": found}]})
    assert "| 32 | kept | 1.000 [" in table and "| 4.000 | 4.000 | 61.0 |" in table
    assert "| 32 | glibc-default | 1.040 [" in table and "| 100.0 |" in table


def test_the_chance_of_a_resolving_interval_is_the_one_three_normal_seeds_give():
    """benchmarks/research/seed_spread.py: the closed form against 3 seeds drawn many times, each
    interval computed as the report computes it (compare.report.stats)."""
    from benchmarks.research.seed_spread import chance_within, noise_for, spread_limit
    from compare.report import stats
    sigma = 0.03
    draws = np.random.default_rng(1).normal(0.0, sigma, size=(20000, 3))
    t = stats._t_quantile(2)
    widths = np.exp(2 * t * draws.std(axis=1, ddof=1) / math.sqrt(3))
    assert chance_within(sigma) == pytest.approx(float(np.mean(widths <= 1.2)), abs=0.01)
    entry = stats.seed_ratios(dict(enumerate(np.exp(draws[0]))), "shared/own loop")
    assert entry["high"] / entry["low"] == pytest.approx(widths[0])
    # at the limit itself a spread of sigma stays under it with 1 - 1/e
    assert chance_within(spread_limit()) == pytest.approx(1 - math.exp(-1))
    assert chance_within(noise_for(0.95)) == pytest.approx(0.95)
    assert chance_within(0.0) == 1.0


def _own_loop(folder: Path, framework: str, seed: int, pairs: list, own_first: list) -> None:
    path = folder / "own-loops" / f"{framework}-seed{seed}" / "own-loop.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_record(framework, seed, 4, pairs, own_first).to_dict()))


def test_the_seeds_spread_is_set_against_their_pairs_noise(tmp_path, monkeypatch):
    """benchmarks/research/seed_spread.py: seeds whose pairs move but whose ratios agree spread by 0
    while their pairs predict noise; seeds whose pairs agree within each seed but not across
    seeds spread while their pairs predict none. A draw of a seed's pairs keeps each order's
    among themselves: pairs that differ only by order move no draw."""
    from benchmarks.research import seed_spread
    from benchmarks.research.seed_spread import comparisons, rows, seed_noise
    orders = [False, True] * 4
    moving = [[ratio, 1.0] for ratio in (1.1, 0.9, 1.3, 1.0, 0.95, 1.2, 1.05, 0.85)]
    for seed in range(3):
        _own_loop(tmp_path / "agreeing", "tf", seed, moving, orders)
        _own_loop(tmp_path / "apart", "torch", seed, [[1.0 + 0.1 * seed, 1.0]] * 8, orders)
    found = comparisons([tmp_path])
    assert sorted(found) == [(tmp_path / "agreeing", "tf"), (tmp_path / "apart", "torch")]
    by_framework = {row["framework"]: row for row in rows(found)}
    agreeing, apart = by_framework["tf"], by_framework["torch"]
    assert agreeing["seeds_spread"] == 0.0 and agreeing["pairs_noise"] > 0.02
    assert agreeing["within"] == 1 and agreeing["chance_from_seeds"] == 1.0
    assert apart["pairs_noise"] == pytest.approx(0.0, abs=1e-12) and apart["within"] == 0
    assert apart["seeds_spread"] == pytest.approx(float(np.std(np.log([1.0, 1.1, 1.2]),
                                                               ddof=1)))
    # the script's table and rows, with the command that made them (benchmarks.common)
    out = tmp_path / "table.md"
    monkeypatch.setattr(sys, "argv", ["seed_spread.py", str(tmp_path), "--out", str(out)])
    seed_spread.main()
    saved = json.loads(out.with_suffix(".json").read_text())
    assert saved["command"] == f"python -m benchmarks.research.seed_spread {tmp_path} --out {out}"
    assert [row["framework"] for row in saved["rows"]] == ["torch", "tf"]
    assert "| 4 | torch | 1 | 0.091 | 0.000 | 0 of 1 | 0.15 | 1.00 |" in out.read_text()
    by_order = _record("tf", 0, 4, [[1.1, 1.0], [1.0, 1.0]] * 4, orders)
    assert seed_noise(by_order, np.random.default_rng(0)) == pytest.approx(0.0, abs=1e-12)
