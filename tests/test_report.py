"""Aggregation on known numbers; reports rendered from fixture results, failures included."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from compare import report, results, stats


def test_aggregate_mean_std_and_t_interval_on_known_numbers():
    agg = stats.aggregate([1.0, 2.0, 3.0, None])
    half = 4.302652729911275 / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(n), sd = 1
    assert agg == pytest.approx({"mean": 2.0, "std": 1.0, "ci95_low": 2 - half, "ci95_high": 2 + half, "n": 3})
    single = stats.aggregate([5.0])
    assert single["mean"] == 5.0 and single["ci95_low"] is None and single["n"] == 1
    assert stats.aggregate([])["mean"] is None


def test_paired_ratio_is_a_geometric_mean_with_a_log_scale_interval():
    r = stats.paired_ratio({0: 2.0, 1: 8.0, 2: None}, {0: 1.0, 1: 2.0, 2: 1.0})
    assert r["ratio"] == pytest.approx(math.sqrt(2 * 4)) and r["n"] == 2 and r["seeds"] == [0, 1]
    logs = [math.log(2), math.log(4)]
    half = 12.706204736174698 * (abs(logs[1] - logs[0]) / math.sqrt(2)) / math.sqrt(2)
    assert r["ci95_low"] == pytest.approx(math.exp(sum(logs) / 2 - half))
    inverse = stats.paired_ratio({0: 1.0, 1: 2.0}, {0: 2.0, 1: 8.0})
    assert inverse["ratio"] == pytest.approx(1 / r["ratio"])
    assert inverse["ci95_high"] == pytest.approx(1 / r["ci95_low"])


def test_paired_difference():
    d = stats.paired_difference({0: 0.60, 1: 0.62}, {0: 0.58, 1: 0.58})
    assert d["mean"] == pytest.approx(0.03) and d["n"] == 2


def fake_result(framework: str, seed: int, train_time: float, accuracy: float,
                status: str = "completed", epochs: int = 2, error: str | None = None) -> dict:
    """A result.json as a trainer writes it, with chosen figures."""
    records = [{"epoch": e, "train_loss": 1.0 / e, "test_loss": 1.2 / e, "test_accuracy": accuracy * e / epochs,
                "train_time_s": train_time / epochs, "eval_time_s": 0.5, "images_per_s": 1000.0 * epochs / train_time,
                "images": 500, "input_wait_s": 0.1, "steps": 10} for e in range(1, epochs + 1)]
    summary = results.empty_summary(1, 3_910_320, status)
    if records:
        summary.update(final_test_accuracy=accuracy, best_test_accuracy=accuracy, train_time_s=train_time,
                       warmup_time_s=train_time / epochs, images_per_s=1000.0 * epochs / train_time,
                       input_wait_fraction=0.05, eval_time_s=1.0, epochs_completed=epochs,
                       steady_step_time_ms={"median": train_time, "p90": train_time * 1.1})
    return {"schema_version": 1, "framework": framework,
            "model": {"name": "lenet", "parameters": 62006},
            "config": {"framework": framework, "seed": seed, "model": "lenet", "dataset": "synthetic"},
            "data": {"source": "synthetic", "origin": "generated", "train_size": 5000, "test_size": 1000},
            "environment": {"device_used": "CPU", framework if framework == "torch" else "tensorflow": "x.y"},
            "fairness": {"precision_policy": "float32", "global_batch": 32}, "measurement": results.MEASUREMENT,
            "epochs": records, "summary": summary, "error": error}


def write_runs(root: Path, runs: list[dict]) -> None:
    for r in runs:
        results.write_json_atomic(root / "runs" / f"{r['framework']}-seed{r['config']['seed']}" / "result.json", r)


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.external = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "poster") and value and not value.startswith("#"):
                self.external.append((tag, name, value))
        if tag in ("link", "script", "iframe", "img"):
            self.external.append((tag, "", ""))


def test_report_figures_match_summary_json(tmp_path):
    write_runs(tmp_path, [fake_result("tf", 0, 10.0, 0.60), fake_result("tf", 1, 12.0, 0.62),
                          fake_result("torch", 0, 8.0, 0.58), fake_result("torch", 1, 8.0, 0.58)])
    paths = report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    tf = summary["frameworks"]["tf"]
    assert tf["train_time_s"]["mean"] == pytest.approx(11.0) and tf["train_time_s"]["n"] == 2
    assert summary["ratios"]["train_time_s"]["ratio"] == pytest.approx(math.sqrt(10 / 8 * 12 / 8))
    assert summary["accuracy_difference"]["mean"] == pytest.approx(0.03)
    assert len(summary["runs"]) == 4
    markdown = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    for row in report.verdict_rows(summary):  # every figure in the page is the summary's
        for page in (markdown, html):
            assert row["tf"] in page and row["torch"] in page
    assert "11.00 s [" in markdown and "+3.00 pts" in markdown and "1.369x" in markdown
    assert "synthetic" in markdown and "not CIFAR-10" in markdown
    assert [p.name for p in paths] == ["summary.json", "report.md", "report.html"]


def test_a_failed_framework_renders_and_the_other_is_still_reported(tmp_path):
    write_runs(tmp_path, [fake_result("tf", 0, 10.0, 0.6, status="failed", epochs=0,
                                      error="out of device memory at --batch-size 512; try --batch-size 256"),
                          fake_result("torch", 0, 8.0, 0.58)])
    report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["frameworks"]["tf"]["completed"] == 0 and summary["frameworks"]["torch"]["completed"] == 1
    assert summary["frameworks"]["tf"]["train_time_s"]["mean"] is None
    assert summary["ratios"]["train_time_s"]["ratio"] is None
    html = (tmp_path / "report.html").read_text()
    assert "failed" in html and "try --batch-size 256" in html
    assert "8.00 s" in html  # PyTorch's figures are still there


def test_html_parses_and_references_nothing_external(tmp_path):
    write_runs(tmp_path, [fake_result("tf", 0, 10.0, 0.6), fake_result("torch", 0, 8.0, 0.58)])
    report.rebuild(tmp_path, [tmp_path])
    html = (tmp_path / "report.html").read_text()
    collector = _Collector()
    collector.feed(html)
    collector.close()
    assert collector.external == []
    assert collector.tags.count("svg") == 2  # learning curves and time breakdown, inline
    assert not re.search(r"url\((?!#)", html)  # only in-page references such as clip-path="url(#id)"
    assert "@import" not in html and "<!DOCTYPE svg" not in html
    for start, end in (("<html", "</html>"), ("<body", "</body>"), ("<table", "</table>")):
        assert html.count(start) == html.count(end)


def test_report_without_results_is_a_clear_error(tmp_path):
    from compare.errors import UserError
    with pytest.raises(UserError, match="no result.json"):
        report.rebuild(tmp_path, [tmp_path])


def test_unreadable_result_shows_as_a_failed_run(tmp_path):
    write_runs(tmp_path, [fake_result("torch", 0, 8.0, 0.58)])
    broken = tmp_path / "runs" / "tf-seed0" / "result.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"framework": "tf", "summ')
    report.rebuild(tmp_path, [tmp_path])
    summary = json.loads((tmp_path / "summary.json").read_text())
    statuses = {r["framework"]: r["status"] for r in summary["runs"]}
    assert statuses == {"tf": "failed", "torch": "completed"}
