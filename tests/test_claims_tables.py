"""The README's GPU table, its quickstart time and docs/benchmarks.md's claims table are
generated from the shipped result files (benchmarks/claims.py): regenerated here, they must
match the pages; the pages stay short and the results folder small."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks import claims

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted({page for page, _ in claims.MARKERS})


@pytest.mark.parametrize("page", PAGES)
def test_each_generated_block_is_what_its_files_give(page):
    text = (REPO / page).read_text()
    assert claims.regenerated(page, text) == text, (
        f"{page} is stale: run python -m benchmarks.claims")


def test_a_changed_figure_changes_its_cell_and_check_says_so(monkeypatch, capsys):
    """A result file whose ratio moved gives another README row; --check names the page."""
    load = claims.load
    moved = "gpu-h200-resnet9-verdict/summary.json"

    def drifted(path: str) -> Any:
        data = load(path)
        if path == moved:
            data = copy.deepcopy(data)
            data["ratios"]["train_time_s"].update(ratio=1.5, low=1.4, high=1.6)
        return data
    before = claims.gpu_table()
    monkeypatch.setattr(claims, "load", drifted)
    after = claims.gpu_table()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(changed) == 1 and "| 1.50x (1.40-1.60), compiled |" in changed[0][1]
    assert claims.main(["--check"]) == 1
    assert "README.md: table differs from its files" in capsys.readouterr().out


def test_a_ratio_is_written_with_its_interval_its_range_or_alone():
    ci = {"ratio": 2.2429, "low": 1.9472, "high": 2.5836, "interval": "ci95", "n": 3}
    assert claims.ratio_cell(ci) == "2.24x (1.95-2.58)"
    assert claims.ratio_cell(ci, digits=3) == "2.243x (1.947-2.584)"
    assert claims.ratio_cell({**ci, "interval": "range", "n": 2}) == "2.24x (range 1.95-2.58)"
    assert claims.ratio_cell({"ratio": 1.309, "n": 1, "low": None}) == "1.31x"
    assert claims.ratio_cell(None) == claims.ratio_cell({"ratio": None}) == "n/a"


def test_each_comparison_is_read_at_the_defaults_it_ran():
    """A comparison that ran both at their defaults is its own defaults row; a matched one
    reads its defaults run; one without either says so."""
    both_default = {"compile_states": {fw: {"is_default": True} for fw in ("tf", "torch")},
                    "ratios": {"train_time_s": {"ratio": 0.5, "n": 1}}}
    assert claims.at_defaults(both_default) == "0.50x"
    matched = {"compile_states": {"tf": {"is_default": True}, "torch": {"is_default": False}},
               "defaults": {"time_ratio": {"ratio": 2.0, "n": 1}}, "ratios": {}}
    assert claims.at_defaults(matched) == "2.00x"
    assert claims.at_defaults({"ratios": {}}) == "not run"


def test_time_to_target_says_which_framework_reached_it():
    summary = {"config": {"target_accuracy": 0.897},
               "frameworks": {"tf": {"time_to_target_s": {"centre": 43.1}},
                              "torch": {"time_to_target_s": {"centre": None}}}}
    assert claims.to_target(summary) == "43.1 s / not reached (to 89.7%)"
    summary["config"]["target_accuracy"] = None
    assert claims.to_target(summary) == "no target"


def test_the_readme_answers_first_and_stays_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    table = lines.index("<!-- gpu-table:begin -->")
    assert table < 40 and lines[table + 1].startswith("| GPU |")
    assert lines[table + 3].count("|") == 11  # a comparison's row, within the first screen


def test_the_cpu_timing_study_is_one_page_of_its_own():
    page = REPO / "docs" / "research" / "cpu-timing.md"
    assert len(page.read_text().splitlines()) <= 250
    research = {path.stem for path in (REPO / "benchmarks" / "research").glob("*.py")}
    assert {"turns_ab", "allocator_ab", "seed_spread", "two_threads"} <= research
    for path in (REPO / "compare").rglob("*.py"):
        assert "benchmarks" not in {line.split()[1].split(".")[0] for line in
                                    path.read_text().splitlines()
                                    if line.startswith(("import ", "from "))}, path


def test_the_results_carry_what_the_docs_cite_and_little_more():
    """At most 600 tracked files and 10 MB under benchmarks/results: raw per-window files are
    packed, one runs.tar.xz per study (test_structure checks that every cited path exists)."""
    tracked = subprocess.run(["git", "ls-files", "-z", "benchmarks/results"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split("\0")
    files = [REPO / name for name in tracked if name]
    assert 0 < len(files) <= 600
    assert sum(path.stat().st_size for path in files) <= 10 * 2**20
