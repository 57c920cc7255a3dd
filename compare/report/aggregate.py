"""Aggregates over seeds: one comparison's summary (summary.json) from its runs' results,
and the labels of the machine and precision a comparison ran on.

One *group* is one comparison: runs of both frameworks on one machine, at one precision,
of one model on one dataset. Groups are never pooled."""

from __future__ import annotations

import time
from typing import Any, Callable

from compare import schema
from compare.experiment.frameworks import FRAMEWORKS
from compare.report import best, own_loops, stats
from compare.report.labels import machine_of, seed_of

# Summary fields aggregated over seeds: key -> (how to read it from a result's summary, scale).
# "positive": log scale (geometric mean); "accuracy": logit scale with the test set's binomial
# variance; "fraction": logit scale from the seeds alone.
AGGREGATES: dict[str, tuple[Callable[[dict], Any], str]] = {
    "final_test_accuracy": (lambda s: s["final_test_accuracy"], "accuracy"),
    "best_test_accuracy": (lambda s: s["best_test_accuracy"], "accuracy"),
    "train_time_s": (lambda s: s["train_time_s"] if s.get("epochs_completed") else None,
                     "positive"),
    "warmup_time_s": (lambda s: s["warmup_time_s"], "positive"),
    "steady_train_time_s": (lambda s: s["train_time_s"] - s["warmup_time_s"]
                            if s.get("epochs_completed", 0) > 1 else None, "positive"),
    "eval_time_s": (lambda s: s.get("eval_time_s") if s.get("epochs_completed") else None,
                    "positive"),
    "images_per_s": (lambda s: s["images_per_s"], "positive"),
    "steady_step_time_ms": (lambda s: s["steady_step_time_ms"]["median"], "positive"),
    "steady_step_time_p90_ms": (lambda s: s["steady_step_time_ms"]["p90"], "positive"),
    "input_wait_fraction": (lambda s: s["input_wait_fraction"], "fraction"),
    "peak_device_memory_bytes": (lambda s: s["peak_device_memory_bytes"], "positive"),
    "host_peak_rss_bytes": (lambda s: s.get("host_peak_rss_bytes"), "positive"),
    "achieved_flops_per_s": (lambda s: s.get("achieved_flops_per_s"), "positive"),
    "time_to_target_s": (lambda s: s.get("time_to_target_s"), "positive"),
    "mfu": (lambda s: s.get("mfu"), "fraction"),
    "energy_j": (lambda s: s.get("energy_j"), "positive"),
    "energy_per_image_j": (lambda s: s.get("energy_per_image_j"), "positive"),
}


RATIO_KEYS = ("train_time_s", "images_per_s", "steady_step_time_ms", "warmup_time_s",
              "steady_train_time_s", "peak_device_memory_bytes", "energy_j")


def summarise(runs: list[dict], parity: dict | None, command: str | None,
              planned: list[dict] | None = None,
              margin: float = stats.EQUIVALENCE_MARGIN,
              order_note: str | None = None,
              own_loop_records: list[dict] | None = None,
              best_summary: dict | None = None) -> dict[str, Any]:
    """Aggregates per framework, paired TF/PyTorch ratios, accuracy difference and TOST, the
    machine, the files that could not be read, the shared loop against each framework's own
    (compare.report.own_loops), each at its own best (compare.report.best, from the
    best-settings comparison's summary), and the verdict sentences."""
    skipped = [{"path": r["path"], "reason": r["unreadable"]} for r in runs if r.get("unreadable")]
    runs = [r for r in runs if not r.get("unreadable")]
    by_framework: dict[str, list[dict]] = {"tf": [], "torch": []}
    for run in runs:
        by_framework.setdefault(run["framework"], []).append(run)
    test_size = next((r["data"].get("test_size") for r in runs if r.get("data")), None)

    def completed(fw: str) -> list[dict]:
        return [r for r in by_framework.get(fw, []) if r["summary"].get("status") == "completed"]

    frameworks = {}
    for fw, fw_runs in by_framework.items():
        entry = {"runs": len(fw_runs), "completed": len(completed(fw)),
                 "statuses": {r["path"]: r["summary"].get("status") for r in fw_runs},
                 "pipelines": sorted({_pipeline_kind(r) for r in fw_runs} - {None}),
                 "device_kinds": sorted({(r.get("fairness") or {}).get("device_kind")
                                         for r in fw_runs} - {None})}
        for key, (read, scale) in AGGREGATES.items():
            values = [_safe(read, r["summary"]) for r in completed(fw)]
            if scale == "positive":
                entry[key] = stats.positive_interval(values)
            else:
                entry[key] = stats.proportion_interval(
                    values, test_size if scale == "accuracy" else None)
        frameworks[fw] = entry

    def per_seed(fw: str, key: str) -> dict[int, float | None]:
        return {seed_of(r): _safe(AGGREGATES[key][0], r["summary"]) for r in completed(fw)}

    first = {fw: next((r for r in by_framework.get(fw, []) if r.get("environment")), None)
             for fw in FRAMEWORKS}
    base_config = next((r["config"] for r in runs if r.get("config")), {})
    environment = {fw: (r or {}).get("environment") for fw, r in first.items()}
    accuracy = (per_seed("tf", "final_test_accuracy"), per_seed("torch", "final_test_accuracy"))
    summary = {
        "schema_version": schema.SUMMARY_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "config": {k: v for k, v in base_config.items()
                   if k not in ("framework", "seed", "out", "quiet")},
        "seeds": sorted({seed_of(r) for r in runs if seed_of(r) is not None}),
        "parity": parity,
        "frameworks": frameworks,
        "ratios": {key: stats.paired_ratio(per_seed("tf", key), per_seed("torch", key))
                   for key in RATIO_KEYS},
        "accuracy_difference": stats.paired_difference(*accuracy),
        "accuracy_equivalence": stats.equivalence_test(*accuracy, margin=margin),
        "runs": [{"framework": r["framework"], "seed": seed_of(r), "path": r["path"],
                  "status": r["summary"].get("status"), "error": r.get("error"),
                  "exit": (r.get("exit") or {}).get("reason")} for r in runs],
        "not_run": planned or [],
        "order_note": order_note,  # the runs were not alternated (compare --framework)
        "skipped": skipped,
        "machine": machine_of(environment),
        "environment": environment,
        "fairness": {fw: (r or {}).get("fairness") for fw, r in first.items()},
        "model": next((r["model"] for r in runs if "name" in r.get("model", {})), None),
        "data": next((r["data"] for r in runs if r.get("data")), None),
        "measurement": schema.MEASUREMENT,
        "own_loops": own_loops.summarise(runs, own_loop_records or []),
        "best": best.summarise(best_summary),
    }
    from compare.report.verdict import verdict_sentences  # it reads summaries like this one
    summary["verdict"] = verdict_sentences(summary)
    return summary


def _pipeline_kind(run: dict) -> str | None:
    pipeline = run.get("config", {}).get("pipeline")
    return pipeline.get("kind") if isinstance(pipeline, dict) else pipeline


def _safe(read, summary: dict) -> float | None:
    try:
        return read(summary)
    except (KeyError, TypeError):
        return None
