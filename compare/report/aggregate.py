"""Aggregates over seeds: one comparison's summary (summary.json) from its runs' results,
and the labels of the machine and precision a comparison ran on.

One *group* is one comparison: runs of both frameworks on one machine, at one precision,
of one model on one dataset. Groups are never pooled."""

from __future__ import annotations

import time
from typing import Any

from compare import figures, schema
from compare.experiment.frameworks import FRAMEWORKS
from compare.experiment.parity_record import ParityRecord
from compare.records import OwnLoopRecord
from compare.report import best, defaults, own_loops, stats
from compare.report.labels import machine_of, seed_of


def summarise(runs: list[schema.Result], parity: ParityRecord | None, command: str | None,
              planned: list[dict] | None = None,
              margin: float = stats.EQUIVALENCE_MARGIN,
              order_note: str | None = None,
              own_loop_records: list[OwnLoopRecord] | None = None,
              best_summary: schema.Summary | None = None,
              defaults_summary: schema.Summary | None = None) -> schema.Summary:
    """Aggregates per framework, paired TF/PyTorch ratios, accuracy difference and TOST, the
    machine, the files that could not be read, the shared loop against each framework's own
    (compare.report.own_loops), each framework's compile state, each at its own defaults
    (compare.report.defaults) and at its own best (compare.report.best), each from that
    comparison's summary, and the verdict sentences."""
    skipped = [{"path": r["path"], "reason": r["unreadable"]} for r in runs if r.get("unreadable")]
    runs = [r for r in runs if not r.get("unreadable")]
    by_framework: dict[str, list[schema.Result]] = {fw: [] for fw in FRAMEWORKS}
    for run in runs:
        by_framework.setdefault(run["framework"], []).append(run)
    test_size = next((r["data"].get("test_size") for r in runs if r.get("data")), None)

    def completed(fw: str) -> list[schema.Result]:
        return [r for r in by_framework.get(fw, []) if r["summary"].status == "completed"]

    frameworks: dict[str, dict[str, Any]] = {}
    for fw, fw_runs in by_framework.items():
        pipelines = {kind for r in fw_runs if (kind := _pipeline_kind(r)) is not None}
        kinds = {kind for r in fw_runs
                 if (kind := (r.get("fairness") or {}).get("device_kind")) is not None}
        entry: dict[str, Any] = {
            "runs": len(fw_runs), "completed": len(completed(fw)),
            "statuses": {r["path"]: r["summary"].status for r in fw_runs},
            "pipelines": sorted(pipelines), "device_kinds": sorted(kinds)}
        for figure in figures.FIGURES:  # each on its scale
            values = [figure.read(r["summary"]) for r in completed(fw)]
            if figure.scale == "positive":
                entry[figure.key] = stats.positive_interval(values)
            else:
                entry[figure.key] = stats.proportion_interval(
                    values, test_size if figure.scale == "accuracy" else None)
        frameworks[fw] = entry

    def per_seed(fw: str, key: str) -> dict[int, float | None]:
        return {seed: figures.BY_KEY[key].read(r["summary"]) for r in completed(fw)
                if (seed := seed_of(r)) is not None}

    first = {fw: next((r for r in by_framework.get(fw, []) if r.get("environment")), None)
             for fw in FRAMEWORKS}
    base_config: dict[str, Any] = next((r["config"] for r in runs if r.get("config")), {})
    environment = {fw: r.get("environment") if r else None for fw, r in first.items()}
    accuracy = (per_seed("tf", figures.DIFFERENCE_KEY), per_seed("torch", figures.DIFFERENCE_KEY))
    summary: schema.Summary = {
        "schema_version": schema.SUMMARY_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "config": {k: v for k, v in base_config.items()
                   if k not in ("framework", "seed", "out", "quiet", "own_loop_beside",
                                 "turns")},
        "seeds": sorted({seed for r in runs if (seed := seed_of(r)) is not None}),
        "parity": parity,
        "frameworks": frameworks,
        "ratios": {key: stats.paired_ratio(per_seed("tf", key), per_seed("torch", key))
                   for key in figures.RATIO_KEYS},
        "accuracy_difference": stats.paired_difference(*accuracy),
        "accuracy_equivalence": stats.equivalence_test(*accuracy, margin=margin),
        "runs": [{"framework": r["framework"], "seed": seed_of(r), "path": r["path"],
                  "status": r["summary"].status, "error": r.get("error"),
                  "exit": (r.get("exit") or {}).get("reason")} for r in runs],
        "not_run": planned or [],
        "order_note": order_note,  # the runs were not alternated (compare --framework)
        "side_by_side": bool(runs) and all((r.get("config") or {}).get("turns") for r in runs),
        "skipped": skipped,
        "machine": machine_of(environment),
        "environment": environment,
        "fairness": {fw: r.get("fairness") if r else None for fw, r in first.items()},
        "model": next((r["model"] for r in runs if "name" in r.get("model", {})), None),
        "data": next((r["data"] for r in runs if r.get("data")), None),
        "measurement": schema.MEASUREMENT,
        "own_loops": own_loops.summarise(runs, own_loop_records or []),
        "best": best.summarise(best_summary),
    }
    # compiled or eager, and whether that is each framework's own default (from the manifests)
    summary["compile_states"] = {fw: s.to_dict() for fw, s in defaults.states(summary).items()}
    summary["defaults"] = defaults.summarise(defaults_summary)
    from compare.report.verdict import verdict_sentences  # it reads summaries like this one
    summary["verdict"] = verdict_sentences(summary)
    return summary


def _pipeline_kind(run: schema.Result) -> str | None:
    pipeline = run.get("config", {}).get("pipeline")
    return pipeline.get("kind") if isinstance(pipeline, dict) else pipeline

