"""Every reported figure is declared once (compare.figures) and reaches every place that
shows it: the run's summary, the schema, MEASUREMENT, summary.json, the report's table and
docs/measurement.md."""

from __future__ import annotations

import ast
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from report_runs import as_read, fake_result, write_runs

from compare import figures, report, schema
from compare.cli import docs as cli_docs
from compare.experiment.config import RunConfig
from compare.records import FIELDS, RunSummary
from compare.report import sections, tables
from compare.run import summary as run_summary

REPO = Path(__file__).resolve().parents[1]


def _summarised_run() -> RunSummary:
    """A two-epoch run's summary as compare.run.summary writes it (CPU, a target accuracy)."""
    epochs = [{"epoch": e, "train_time_s": 2.0, "eval_time_s": 0.5, "test_accuracy": 0.4 * e,
               "images": 1000, "steps": 16, "input_wait_s": 0.1,
               "peak_device_memory_bytes": None,
               "gpu": {"energy_j": None, "note": "no NVML"}} for e in (1, 2)]
    windows = [{"epoch": e, "seconds": 0.5, "steps": 8} for e in (1, 1, 2, 2)]
    return run_summary.summarise_run(
        RunConfig(target_accuracy=0.7), epochs, windows, status="completed", replicas=1,
        train_flops_per_image=100, device_name=None, on_gpu=False, peak_memory_note=None,
        host_peak_rss_bytes=2**30)


def test_each_figure_is_computed_by_the_run_summary_and_declared_in_the_schema():
    summary = _summarised_run()
    for figure in figures.FIGURES:
        for key in figure.read.keys:
            assert key in FIELDS, f"{figure.key}: RunSummary (compare/records.py) lacks {key}"
    read = {f.key: f.read(summary) for f in figures.FIGURES}
    assert read["steady_train_time_s"] == 2.0 and read["train_time_s"] == 4.0
    assert read["steady_step_time_ms"] == read["steady_step_time_p90_ms"] == 62.5
    assert read["time_to_target_s"] == 4.0 and read["host_peak_rss_bytes"] == 2**30
    assert read["mfu"] is None and read["energy_j"] is None  # CPU: no peak, no NVML
    # the steady epoch: 1000 images in 2 s, 0.1 s of it waiting; two 0.5 s evaluations
    assert (read["images_per_s"], read["input_wait_fraction"], read["eval_time_s"]) == (
        500.0, pytest.approx(0.05), 1.0)
    assert read["final_test_accuracy"] == read["best_test_accuracy"] == 0.8
    assert read["warmup_time_s"] == 2.0 and read["achieved_flops_per_s"] == 100 * 500.0
    assert read["time_to_result_s"] == 5.0  # 4 s of training and two evaluations of 0.5 s
    # the first epoch's 2 s less its 16 steps at the steady median of 62.5 ms
    assert read["startup_overhead_s"] == 1.0
    assert read["peak_device_memory_bytes"] is None and read["energy_per_image_j"] is None


def test_a_figure_is_read_as_null_where_its_run_cannot_give_it():
    one_epoch = RunSummary(status="completed", replicas=1, train_flops_per_image=1,
                           epochs_completed=1, train_time_s=3.0, warmup_time_s=3.0)
    assert figures.BY_KEY["steady_train_time_s"].read(one_epoch) is None  # needs two epochs
    assert figures.BY_KEY["train_time_s"].read(one_epoch) == 3.0
    none = RunSummary(status="failed", replicas=1, train_flops_per_image=1)
    assert figures.BY_KEY["train_time_s"].read(none) is None  # no epoch
    assert figures.BY_KEY["steady_step_time_p90_ms"].read(one_epoch) is None
    assert figures.BY_KEY["mfu"].read(one_epoch) is None  # an older result without it
    no_start = replace(one_epoch, epochs_completed=2, warmup_time_s=None)
    assert figures.BY_KEY["steady_train_time_s"].read(no_start) is None  # nothing to take away
    # an older file's summary lacks the fields that came later: read, they are null
    older = RunSummary.from_dict({"status": "completed", "replicas": 1,
                                  "train_flops_per_image": 1, "epochs_completed": 2,
                                  "train_time_s": 5.0, "warmup_time_s": 3.0,
                                  "steady_step_time_ms": {"median": 4.0, "p90": 5.0}})
    assert figures.BY_KEY["steady_train_time_s"].read(older) == 2.0
    assert figures.BY_KEY["steady_step_time_ms"].read(older) == 4.0
    assert figures.BY_KEY["energy_j"].read(older) is None


def test_measurement_holds_each_definition_once_with_the_epoch_records():
    for figure in figures.FIGURES:
        assert schema.MEASUREMENT[figure.measured] == figure.how, figure.key
    assert set(schema.MEASUREMENT) == {f.measured for f in figures.FIGURES} | {"test_loss",
                                                                               "train_loss"}
    assert set(schema.Epoch.__annotations__) >= {"test_accuracy", "test_loss", "train_loss"}


def test_two_figures_cannot_define_one_measurement_in_different_words():
    p90 = figures.BY_KEY["steady_step_time_p90_ms"]
    assert figures._definitions(figures.FIGURES) == figures.DEFINITIONS
    with pytest.raises(ValueError) as refused:
        figures._definitions((*figures.FIGURES[:3], replace(p90, how="the 90th percentile")))
    assert str(refused.value) == ("steady_step_time_p90_ms: 'steady_step_time_ms' is defined in "
                                  "other words by another figure")


def test_each_figure_is_declared_whole_and_once():
    keys = [f.key for f in figures.FIGURES]
    assert len(set(keys)) == len(keys) and len({f.label for f in figures.FIGURES}) == len(keys)
    for figure in figures.FIGURES:
        assert figure.unit in tables.FORMATS, figure.key
        assert figure.scale in figures.SCALES, figure.key
        assert figure.versus in ("ratio", "difference", None), figure.key
        assert figure.how.strip(), figure.key
    assert figures.RATIO_KEYS == ("train_time_s", "images_per_s", "steady_step_time_ms",
                                  "warmup_time_s", "startup_overhead_s", "steady_train_time_s",
                                  "time_to_result_s", "peak_device_memory_bytes", "energy_j")
    assert [f.key for f in figures.FIGURES if f.versus == "difference"] == [
        figures.DIFFERENCE_KEY] == ["final_test_accuracy"]


def test_the_report_names_every_figure_through_compare_figures():
    """No figure's summary.json key is written out in compare/report: each is read through
    its Figure (compare.figures) or a record's attribute, so renaming a figure is one edit and
    a misspelt one fails mypy."""
    keys = {f.key for f in figures.FIGURES} | {k for f in figures.FIGURES for k in f.read.keys}
    found = [f"{path.name}:{node.lineno} {node.value}"
             for path in sorted((REPO / "compare" / "report").glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and node.value in keys]
    assert found == []


@pytest.mark.parametrize("module", ["figures.py", "records.py"])
def test_figures_and_records_stand_on_the_standard_library_alone(module):
    tree = ast.parse((REPO / "compare" / module).read_text())
    for node in ast.walk(tree):  # imports for the type checker alone never run
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    # mutation testing (benchmarks/mutation.py) runs a copy whose trampolines import mutmut
    under_mutation = {"mutmut"} if "MUTANT_UNDER_TEST" in os.environ else set()
    assert imported - under_mutation <= set(sys.stdlib_module_names) | {"__future__"}, imported


def _rich_result(framework: str, seed: int, train_time: float) -> dict:
    """A result whose summary holds every figure, time to target and energy included."""
    result = fake_result(framework, seed, train_time, 0.6 + 0.01 * seed)
    result["summary"].update(host_peak_rss_bytes=2**30, achieved_flops_per_s=1e12 / train_time,
                             mfu=0.1, energy_j=50.0 * train_time, energy_per_image_j=0.01,
                             time_to_target_s=train_time / 2,
                             time_to_result_s=train_time + 1.0,
                             startup_overhead_s=train_time / 10,
                             peak_device_memory_bytes=2**28 * (1 + seed))
    return result


def test_every_figure_is_aggregated_paired_and_in_the_report(tmp_path):
    write_runs(tmp_path, [_rich_result(fw, seed, t) for fw, times in (("tf", (10, 12, 11)),
                                                                      ("torch", (8, 9, 8.5)))
                          for seed, t in enumerate(times)])
    report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    markdown = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    rows = {r["figure"]: r for r in report.verdict_rows(summary)}
    assert list(rows) == [f.label for f in figures.FIGURES]
    for figure in figures.FIGURES:
        for fw in ("tf", "torch"):
            assert summary["frameworks"][fw][figure.key]["n"] == 3, (figure.key, fw)
        row = rows[figure.label]
        assert row["tf"] != "n/a" and row["torch"] != "n/a" and row["how"] == figure.how
        if figure.versus == "ratio":
            assert summary["ratios"][figure.key]["n"] == 3 and row["versus"].endswith("]")
        elif figure.versus == "difference":
            assert summary["accuracy_difference"]["n"] == 3 and "pts" in row["versus"]
        else:
            assert figure.key not in summary["ratios"] and row["versus"] == ""
        assert f"| {figure.label} | {row['tf']} | {row['torch']} |" in markdown, figure.key
        assert f"<td>{figure.label}</td><td>{row['tf']}</td>" in html, figure.key
    headline = [r["figure"] for r in report.verdict_rows(summary, headline=True)]
    assert headline == [f.label for f in figures.FIGURES if f.headline]
    assert summary["measurement"] == schema.MEASUREMENT


def test_a_figure_shown_only_when_measured_leaves_the_table_without_it(tmp_path):
    write_runs(tmp_path, [fake_result(fw, seed, t, 0.6) for fw, t in (("tf", 10.0),
                                                                      ("torch", 8.0))
                          for seed in range(2)])
    report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    shown = {r["figure"] for r in report.verdict_rows(summary)}
    for figure in figures.FIGURES:
        assert (figure.label in shown) != figure.only_when_measured, figure.key


def test_the_figures_table_in_the_measurement_page_is_current():
    page = cli_docs.MEASUREMENT_PAGE.read_text()
    assert page == cli_docs.measurement_page(page), (
        "docs/measurement.md's table of figures is stale: run python -m compare.cli.docs")
    for figure in figures.FIGURES:
        assert f"| {figure.label} | `{figure.key}` | {figure.scale} |" in page


def test_a_comparisons_table_of_runs_shows_the_figures_declared_for_it():
    done = {**as_read(fake_result("torch", 3, train_time=12.5, accuracy=0.61)),
            "path": "runs/a.json"}
    failed = {**as_read(fake_result("tf", 3, 1.0, 0.0, status="failed", epochs=0, error="boom")),
              "path": "runs/b.json"}
    summary = {"not_run": [{"framework": "tf", "seed": 4, "reason": "stopped"}]}
    table = sections.runs(sections.Group(summary, [done, failed]))
    assert table.columns == ("Framework", "Seed", "Status", "Epochs", "Training time",
                             "Throughput", "Final test accuracy", "Error", "Result")
    assert table.rows == [  # by framework, then seed
        ["TensorFlow/Keras", 3, "failed", 0, "n/a", "n/a", "n/a", "boom", "`runs/b.json`"],
        ["PyTorch", 3, "completed", 2, "12.50 s", "160 img/s", "0.6100", "", "`runs/a.json`"],
        ["TensorFlow/Keras", 4, "not run", 0, "n/a", "n/a", "n/a", "stopped", ""]]
