"""benchmarks/research/interleaved_overhead.py's worker: both loops of one run in one process,
an epoch each in turn, each epoch's median window step kept for each loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience

from benchmarks.research import interleaved_overhead

REPO = Path(__file__).resolve().parents[2]


# A process of 3 epochs of each loop (6-7 s under pytest -n 2): the own loop's first in the
# heavy tier
@pytest.mark.parametrize("first", [pytest.param("own", marks=pytest.mark.slow), "shared"])
def test_both_loops_train_every_epoch_in_one_process(tmp_path, first):
    out = tmp_path / "pairs.json"
    subprocess.run([sys.executable, "-m", "benchmarks.research.interleaved_overhead", "--worker",
                    "torch", "lenet", "32", "3", "128", first, str(out)], cwd=REPO,
                   check=True, timeout=patience(120), capture_output=True)
    found = json.loads(out.read_text())
    assert found["shared_first"] == (first == "shared")
    # an epoch of each loop, each epoch's median step (ms) of its windows
    assert len(found["own_ms"]) == len(found["shared_ms"]) == 3
    assert all(0 < ms < 1000 for ms in found["own_ms"] + found["shared_ms"])


def test_a_row_pairs_each_epoch_after_the_first_across_processes():
    # each loop's first epoch (tracing, warm-up) is no pair; the others pair epoch by epoch
    processes = [{"shared_ms": [50.0, 9.0, 11.0], "own_ms": [20.0, 10.0, 10.0]},
                 {"shared_ms": [70.0, 10.0, 10.5], "own_ms": [30.0, 10.0, 10.0]}]
    found = interleaved_overhead.row("torch", "lenet:32", processes)
    assert found["ratios"] == pytest.approx([0.9, 1.1, 1.0, 1.05])
    assert found["pairs"] == 4
    assert found["ratio"] == pytest.approx((0.9 * 1.1 * 1.0 * 1.05) ** 0.25)
    assert found["low"] < found["ratio"] < found["high"]
    assert found["width"] == pytest.approx(found["high"] / found["low"])


def test_a_row_of_two_pairs_has_no_interval():
    processes = [{"shared_ms": [50.0, 9.0, 11.0], "own_ms": [20.0, 10.0, 10.0]}]
    found = interleaved_overhead.row("tf", "lenet:4", processes)
    assert found["pairs"] == 2 and found["ratio"] is None and found["width"] is None
