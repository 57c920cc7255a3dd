"""summary.json, report.md and a self-contained report.html from saved result files alone.

One *group* is one comparison: runs of both frameworks on one machine, at one precision,
of one model on one dataset. A report holds one group, or several side by side (results
from several machines, or shipped summary.json files); groups are never pooled.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from compare import schema
from compare.experiment.config import FRAMEWORK_NAMES
from compare.machine import devices
from compare.report import stats
from compare.run import phases

COLOURS = {"tf": "#e8710a", "torch": "#1f5fbf"}
SUMMARY_VERSION = 2  # 2: intervals per scale (low/high/interval/method), verdict, machine, skipped
READABLE_SUMMARY_VERSIONS = (1, 2)
COMBINED_NAME = "combined.json"  # several groups; summary.json always holds one comparison

MACHINE_IDENTITY = (
    "A machine is the device the runs trained on, as each result's environment records it "
    "(hardware: the GPU model and count, or CPU), together with the host's platform string "
    "(environment.platform: operating system, kernel, architecture). Results of different "
    "machines, precisions, models or datasets are never averaged together; a shipped "
    "summary.json is shown as it was summarised.")

# Summary fields aggregated over seeds: key -> (how to read it from a result's summary, scale).
# "positive": log scale (geometric mean); "accuracy": logit scale with the test set's binomial
# variance; "fraction": logit scale from the seeds alone.
AGGREGATES: dict[str, tuple[Callable[[dict], Any], str]] = {
    "final_test_accuracy": (lambda s: s["final_test_accuracy"], "accuracy"),
    "best_test_accuracy": (lambda s: s["best_test_accuracy"], "accuracy"),
    "train_time_s": (lambda s: s["train_time_s"] if s.get("epochs_completed") else None,
                     "positive"),
    "warmup_time_s": (lambda s: s["warmup_time_s"], "positive"),
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
              "peak_device_memory_bytes", "energy_j")


# --------------------------------------------------------------------------- reading

def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """Every result.json under `paths`, each with `path`.

    A file that cannot be used (torn JSON, another schema version, missing fields) becomes a
    placeholder with `unreadable` set to why; summarise() lists it apart, never as a run.
    """
    runs = []
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("result.json"))
        for file in files:
            try:
                result = read_result(file)
            except schema.SchemaError as exc:
                why = str(exc).replace(f"cannot read {file}: ", "not valid JSON (torn?): ")
                result = {"framework": _guess_framework(file), "unreadable": why,
                          "epochs": [], "summary": {"status": "unreadable"}, "config": {}}
            result["path"] = str(file)
            runs.append(result)
    return runs


def read_result(file: Path) -> dict[str, Any]:
    """A validated result of the schema version this cnncompare writes, or SchemaError."""
    result = schema.read_result(file)
    if result.get("schema_version") != schema.SCHEMA_VERSION:
        raise schema.SchemaError(f"schema version {result.get('schema_version')!r}; this "
                                  f"cnncompare reads version {schema.SCHEMA_VERSION}")
    return result


def _guess_framework(file: Path) -> str:
    name = file.parent.name
    return "tf" if name.startswith("tf") else "torch"


def _seed(run: dict) -> int | None:
    return run.get("config", {}).get("seed")


# --------------------------------------------------------------------------- summarising

def summarise(runs: list[dict], parity: dict | None, command: str | None,
              planned: list[dict] | None = None,
              margin: float = stats.EQUIVALENCE_MARGIN,
              order_note: str | None = None) -> dict[str, Any]:
    """Aggregates per framework, paired TF/PyTorch ratios, accuracy difference and TOST, the
    machine, the files that could not be read, and the verdict sentences."""
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
        return {_seed(r): _safe(AGGREGATES[key][0], r["summary"]) for r in completed(fw)}

    first = {fw: next((r for r in by_framework.get(fw, []) if r.get("environment")), None)
             for fw in ("tf", "torch")}
    base_config = next((r["config"] for r in runs if r.get("config")), {})
    environment = {fw: (r or {}).get("environment") for fw, r in first.items()}
    accuracy = (per_seed("tf", "final_test_accuracy"), per_seed("torch", "final_test_accuracy"))
    summary = {
        "schema_version": SUMMARY_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "config": {k: v for k, v in base_config.items()
                   if k not in ("framework", "seed", "out", "quiet")},
        "seeds": sorted({_seed(r) for r in runs if _seed(r) is not None}),
        "parity": parity,
        "frameworks": frameworks,
        "ratios": {key: stats.paired_ratio(per_seed("tf", key), per_seed("torch", key))
                   for key in RATIO_KEYS},
        "accuracy_difference": stats.paired_difference(*accuracy),
        "accuracy_equivalence": stats.equivalence_test(*accuracy, margin=margin),
        "runs": [{"framework": r["framework"], "seed": _seed(r), "path": r["path"],
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
    }
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


def device_label(environment: dict | None) -> str | None:
    """'GPU: <count>x <model>' or 'CPU' from a result's environment (None when unknown): the
    hardware both frameworks record alike (compare.devices.hardware)."""
    return devices.label_of(environment)


def machine_of(environment: dict[str, dict | None]) -> dict[str, Any]:
    """{id, device, host}: where a comparison ran (see MACHINE_IDENTITY)."""
    labels = {fw: device_label(env) for fw, env in environment.items() if device_label(env)}
    hosts = sorted({env["platform"] for env in environment.values() if env and env.get("platform")})
    if len(set(labels.values())) > 1:  # a comparison deliberately run on mixed devices
        device = "; ".join(f"{FRAMEWORK_NAMES[fw]} on {d}" for fw, d in sorted(labels.items()))
    else:
        device = next(iter(labels.values()), "unknown device")
    host = " / ".join(hosts) or "unknown host"
    return {"id": f"{device} | {host}", "device": device, "host": host}


# --------------------------------------------------------------------------- the verdict

def verdict_sentences(summary: dict) -> list[str]:
    """Two to four plain sentences computed from the summary's figures: speed, accuracy,
    where and how it was measured, and any fairness caveat. Pure: reads `summary` only."""
    ratio = (summary.get("ratios") or {}).get("train_time_s") or {}
    if ratio.get("ratio") is None and not (summary.get("accuracy_difference") or {}).get("n"):
        nothing = "Nothing to compare: no seed completed in both frameworks."
        setup = _setup_sentence(summary) if summary.get("seeds") else ""
        return [s for s in (nothing, setup, _caveat_sentence(summary)) if s]
    return [_speed_sentence(summary), _accuracy_sentence(summary), _setup_sentence(summary),
            _caveat_sentence(summary)]


def _speed_sentence(summary: dict) -> str:
    ratio = (summary.get("ratios") or {}).get("train_time_s") or {}
    if ratio.get("ratio") is None:
        return "Training time could not be compared: no seed completed in both frameworks."
    r, low, high = ratio["ratio"], _low(ratio), _high(ratio)
    if r >= 1:  # TF took longer: PyTorch is faster by r
        faster, slower, factor, span = "torch", "tf", r, (low, high)
    else:
        faster, slower, factor = "tf", "torch", 1 / r
        span = (1 / high if high else None, 1 / low if low else None)
    n = ratio.get("n", 0)
    if ratio.get("interval") == "ci95":
        detail = f"95% CI {span[0]:.2f}x-{span[1]:.2f}x over {n} seeds"
        if span[0] <= 1:
            return (f"{FRAMEWORK_NAMES[faster]} trained {factor:.2f}x faster than "
                    f"{FRAMEWORK_NAMES[slower]} on average, but the {detail} includes no "
                    f"difference.")
    elif ratio.get("interval") == "range":
        detail = f"n={n}: range {span[0]:.2f}x-{span[1]:.2f}x, too few seeds for an interval"
    else:
        detail = "n=1: a single seed, no interval"
    return (f"{FRAMEWORK_NAMES[faster]} trained {factor:.2f}x faster than "
            f"{FRAMEWORK_NAMES[slower]} (training time, {detail}).")


def _accuracy_sentence(summary: dict) -> str:
    test = summary.get("accuracy_equivalence") or {}
    margin = 100 * test.get("margin", stats.EQUIVALENCE_MARGIN)
    diff = summary.get("accuracy_difference") or {}
    if diff.get("n", 0) == 0:
        return "Final test accuracy could not be compared: no seed completed in both frameworks."
    mean = 100 * diff["mean"]
    if "accuracy_equivalence" not in summary:
        return (f"Final test accuracy: TF - PyTorch = {mean:+.2f} points (n={diff['n']}); this "
                f"summary predates the equivalence test.")
    if test.get("equivalent") is None:
        return (f"Not enough seeds to test equivalence of the final test accuracy (n={diff['n']}; "
                f"TF - PyTorch = {mean:+.2f} points); run 2 or more seeds, 3+ for an interval.")
    if test["ci90_low"] == test["ci90_high"]:  # no spread: t is infinite, so is the evidence
        interval = f"the same difference on each of {test['n']} seeds"
    else:
        p_value = "p<0.001" if test["p_value"] < 0.001 else f"p={test['p_value']:.3f}"
        interval = (f"90% CI {100 * test['ci90_low']:+.2f} to {100 * test['ci90_high']:+.2f} "
                    f"points, TOST {p_value}, n={test['n']}")
    if test["equivalent"]:
        return (f"Final test accuracy is equivalent within +-{margin:g} points: TF - PyTorch = "
                f"{mean:+.2f} points ({interval}).")
    higher = "TensorFlow/Keras" if mean > 0 else "PyTorch"
    return (f"Final test accuracy is not shown equivalent within +-{margin:g} points: "
            f"{higher} scored {abs(mean):.2f} points higher on average ({interval}).")


def _setup_sentence(summary: dict) -> str:
    machine = summary.get("machine") or machine_of(summary.get("environment") or {})
    config = summary.get("config") or {}
    model = (summary.get("model") or {}).get("name") or config.get("model") or "?"
    source = (summary.get("data") or {}).get("source") or config.get("dataset") or "?"
    seeds = len(summary.get("seeds") or [])
    spread = [f"{FRAMEWORK_NAMES[fw]} {f['replicas']} replicas in {f['processes']} processes "
              f"on {f['nodes']} machine(s) ({f['launcher']})"
              for fw, f in (summary.get("fairness") or {}).items()
              if (f or {}).get("processes", 1) > 1 or (f or {}).get("nodes", 1) > 1]
    return (f"Measured on {machine['device']} ({machine['host']}), {_precision_phrase(summary)}"
            + (f", {_wrapper_phrase(summary)}" if _wrapper_phrase(summary) else "")
            + f", {model} on {source} data, {seeds} seed{'s' if seeds != 1 else ''}"
            + (f"; {', '.join(spread)}" if spread else "") + ".")


def _precision_phrase(summary: dict) -> str:
    """'float32 in both frameworks (auto: ...)', or each framework's where they differ;
    results written before the precision was resolved give the requested one."""
    fairness = {fw: f for fw, f in (summary.get("fairness") or {}).items() if f}
    resolved = {fw: f.get("precision") for fw, f in fairness.items()
                if isinstance(f.get("precision"), dict)}
    policies = ", ".join(f"{FRAMEWORK_NAMES[fw]} {f['precision_policy']}"
                         for fw, f in fairness.items() if f.get("precision_policy"))
    if not resolved:
        config = summary.get("config") or {}
        return f"precision {config.get('precision', '?')}" + (f" ({policies})" if policies
                                                              else "")
    chosen = {(r["compute_type"], r["reason"]) for r in resolved.values()}
    if len(chosen) == 1 and len(resolved) == len(FRAMEWORK_NAMES):
        (compute, reason), = chosen
        return f"{compute} in both frameworks ({reason}; {policies})"
    return "; ".join(f"{FRAMEWORK_NAMES[fw]} in {r['compute_type']} ({r['reason']})"
                     for fw, r in resolved.items())


def _wrappers(summary: dict) -> dict[str, str | None]:
    """Each framework's distribution wrapper (None: none), where its manifest says."""
    found = {}
    for fw, f in (summary.get("fairness") or {}).items():
        described = (f or {}).get("strategy")
        if isinstance(described, dict):
            found[fw] = described.get("wrapper")
    return found


def _wrapper_phrase(summary: dict) -> str:
    wrappers = _wrappers(summary)
    if len(wrappers) < 2:
        return ""
    if not any(wrappers.values()):
        return "no distribution wrapper in either framework"
    return ", ".join(f"{FRAMEWORK_NAMES[fw]} " + (f"under {w}" if w else "without a wrapper")
                     for fw, w in wrappers.items())


def precision_label(run_or_summary: dict) -> str | None:
    """The precision a result or comparison computed in, for grouping and labels: the
    resolved compute type where recorded ('float32', 'bfloat16', 'float16'), else the
    requested --precision of an older result."""
    fairness = run_or_summary.get("fairness") or {}
    if "tf" in fairness or "torch" in fairness:  # a summary: one per framework
        types = {(f or {}).get("precision", {}).get("compute_type")
                 for f in fairness.values() if isinstance((f or {}).get("precision"), dict)}
        if types:
            return "/".join(sorted(t for t in types if t))
    elif isinstance(fairness.get("precision"), dict):
        return fairness["precision"].get("compute_type")
    return (run_or_summary.get("config") or {}).get("precision")


def fairness_caveats(summary: dict) -> list[str]:
    """What keeps this comparison from being like for like, one phrase each."""
    caveats = []
    parity = summary.get("parity")
    has_runs = bool(summary.get("runs"))
    if parity is None:
        caveats.append("no parity check was recorded")
    elif not parity.get("passed"):
        caveats.append("the parity check FAILED" + (" and was ignored" if has_runs else ""))
    fairness = summary.get("fairness") or {}
    kinds = {fw: (f or {}).get("device_kind") for fw, f in fairness.items() if f}
    config = summary.get("config") or {}
    if len(set(kinds.values())) > 1:
        caveats.append("the frameworks ran on different device kinds ("
                       + ", ".join(f"{FRAMEWORK_NAMES[fw]} {k}" for fw, k in kinds.items()) + ")")
    elif summary.get("allow_mixed_devices") or config.get("allow_mixed_devices"):
        caveats.append("different device kinds were allowed (allow_mixed_devices), so the "
                       "frameworks may not share a device")
    frameworks = summary.get("frameworks") or {}
    pipelines = {fw: tuple(frameworks.get(fw, {}).get("pipelines") or ())
                 for fw in ("tf", "torch")}
    if all(pipelines.values()) and pipelines["tf"] != pipelines["torch"]:
        caveats.append("different input pipelines (" + ", ".join(
            f"{FRAMEWORK_NAMES[fw]} {'/'.join(p)}" for fw, p in pipelines.items()) + ")")
    wrappers = _wrappers(summary)
    if len(wrappers) == 2 and len({bool(w) for w in wrappers.values()}) == 2:
        caveats.append("one framework trained under its distribution wrapper and the other "
                       "without (" + _wrapper_phrase(summary) + "): the wrapper's cost falls "
                       "on one side only")
    failed = [r for r in summary.get("runs") or [] if r.get("status") != "completed"]
    if failed:
        caveats.append(f"{len(failed)} run{'s' if len(failed) != 1 else ''} did not complete ("
                       + ", ".join(f"{FRAMEWORK_NAMES.get(r['framework'], r['framework'])} seed "
                                   f"{r['seed']} {r['status']}"
                                   + (f" ({r['exit']})" if r.get("exit") else "")
                                   for r in failed) + ")")
    if summary.get("not_run"):
        caveats.append(f"{len(summary['not_run'])} planned run(s) did not run")
    if summary.get("order_note"):
        caveats.append(summary["order_note"])
    if summary.get("skipped"):
        caveats.append(f"{len(summary['skipped'])} result file(s) could not be read and are "
                       f"left out")
    return caveats


def _caveat_sentence(summary: dict) -> str:
    caveats = fairness_caveats(summary)
    if caveats:
        return "Caveat: " + "; ".join(caveats) + "."
    return ("No fairness caveat: the parity check passed, both frameworks ran on the same "
            "device kind with the same pipeline preset, and every run completed.")


def _low(entry: dict) -> float | None:  # version-1 summaries called the bounds ci95_low/high
    return entry.get("low", entry.get("ci95_low"))


def _high(entry: dict) -> float | None:
    return entry.get("high", entry.get("ci95_high"))


# --------------------------------------------------------------------------- plots

def svg(fig) -> str:
    """An inline <svg> element (no XML prolog, no DOCTYPE: nothing that points outside)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def read_csv(path: Path) -> dict[str, np.ndarray]:
    """A numeric CSV with a header as {column: array}; empty when missing or unreadable."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}
    if not rows:
        return {}
    try:
        return {key: np.array([float(row[key]) for row in rows]) for key in rows[0]}
    except (TypeError, ValueError):  # a torn last line of a killed run
        return {}


def smooth(values: np.ndarray, steps_per_epoch: int) -> np.ndarray:
    """Exponential moving average, span about a tenth of an epoch (at least 5 steps), started
    at the first value so the curve does not rise from zero."""
    from scipy.signal import lfilter
    span = max(5, steps_per_epoch // 10)
    alpha = 2 / (span + 1)
    smoothed, _ = lfilter([alpha], [1, alpha - 1], values, zi=[values[0] * (1 - alpha)])
    return smoothed


def window_step_ms(run: dict) -> np.ndarray:
    """Per-step time of each steady-state timing window, ms: epochs after the first (a
    one-epoch run: its windows after the first), as steady_step_time_ms is measured."""
    windows = read_csv(Path(run["path"]).parent / "windows.csv")
    if not windows or not len(windows.get("epoch", [])):
        return np.array([])
    later = windows["epoch"] > windows["epoch"].min()
    if not later.any():
        later = np.arange(len(windows["epoch"])) > 0
    return 1000 * windows["seconds"][later] / windows["steps"][later]


def plots(runs: list[dict]) -> dict[str, str]:
    """Learning curves, steady step times and the time breakdown as inline SVG strings."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    runs = [r for r in runs if not r.get("unreadable")]
    return {"curves": svg(_curves_figure(runs)), "step_times": svg(_step_time_figure(runs)),
            "breakdown": svg(_breakdown_figure(runs))}


def _curves_figure(runs: list[dict]):
    """Per-step training loss (EMA), test accuracy against time and per epoch, test loss."""
    import matplotlib.pyplot as plt
    dashes = ("-", "--", ":", "-.")  # one line style per seed, one colour per framework
    seeds = sorted({_seed(r) for r in runs if _seed(r) is not None})
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    loss_ax, time_ax, epoch_ax, test_loss_ax = axes.flat
    for run in sorted(runs, key=lambda r: (r["framework"], _seed(r) or 0)):
        fw = run["framework"]
        # TF wide underneath, PyTorch narrow on top: identical curves (fp32 parity) stay visible.
        style = {"color": COLOURS[fw], "linestyle": dashes[seeds.index(_seed(run)) % len(dashes)]
                 if _seed(run) in seeds else "-",
                 "linewidth": 2.6 if fw == "tf" else 1.2, "zorder": 2 if fw == "tf" else 3,
                 "label": f"{FRAMEWORK_NAMES[fw]} seed {_seed(run)}"}
        steps = read_csv(Path(run["path"]).parent / "steps.csv")
        if steps and len(steps.get("loss", [])):
            per_epoch = max(1, int(len(steps["loss"]) / max(1, steps["epoch"].max())))
            loss_ax.plot(steps["global_step"], steps["loss"], color=COLOURS[fw], alpha=0.08,
                         linewidth=0.6)
            loss_ax.plot(steps["global_step"], smooth(steps["loss"], per_epoch), **style)
        if not run["epochs"]:
            continue
        marked = {**style, "marker": "o", "markersize": 3}
        epochs = [e["epoch"] for e in run["epochs"]]
        elapsed = np.cumsum([e["train_time_s"] for e in run["epochs"]])
        time_ax.plot(elapsed, [e["test_accuracy"] for e in run["epochs"]], **marked)
        epoch_ax.plot(epochs, [e["test_accuracy"] for e in run["epochs"]], **marked)
        test_loss_ax.plot(epochs, [e["test_loss"] for e in run["epochs"]], **marked)
    titles = [("training loss per step (EMA; raw faint)", "training step", "loss"),
              ("test accuracy against training time", "cumulative training time (s)", "accuracy"),
              ("test accuracy per epoch", "epoch", "accuracy"),
              ("test loss per epoch", "epoch", "loss")]
    for ax, (title, xlabel, ylabel) in zip(axes.flat, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    for ax in (epoch_ax, test_loss_ax):
        ax.xaxis.get_major_locator().set_params(integer=True)
    handles, labels = loss_ax.get_legend_handles_labels()
    if not handles:
        handles, labels = time_ax.get_legend_handles_labels()
    legend_rows = -(-len(handles) // 4)  # one legend row per four runs, below the plots
    if handles:
        fig.legend(handles, labels, fontsize=8, ncol=min(4, len(handles)), loc="lower center")
    fig.tight_layout(rect=(0, 0.035 * legend_rows, 1, 1))
    return fig


def _step_time_figure(runs: list[dict]):
    """Every steady-state window's ms per step, a box per framework with the windows drawn."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, ax = plt.subplots(figsize=(8, 2.8))
    samples = {fw: np.concatenate([window_step_ms(r) for r in runs if r["framework"] == fw]
                                  or [np.array([])]) for fw in ("tf", "torch")}
    present = [fw for fw in ("tf", "torch") if len(samples[fw])]
    scale_note = ""
    if present:
        boxes = ax.boxplot([samples[fw] for fw in present], vert=False, widths=0.5,
                           patch_artist=True, showfliers=True,
                           medianprops={"color": "black", "linewidth": 1.5},
                           flierprops={"marker": "o", "markersize": 4, "alpha": 0.7})
        for patch, fw in zip(boxes["boxes"], present):
            patch.set_facecolor(COLOURS[fw])
            patch.set_alpha(0.35)
        for row, fw in enumerate(present, start=1):  # every window, so stragglers stand out
            jitter = np.random.default_rng(row).uniform(-0.12, 0.12, len(samples[fw]))
            ax.scatter(samples[fw], row + jitter, s=6, color=COLOURS[fw], alpha=0.6, zorder=3)
        ax.set_yticks(range(1, len(present) + 1),
                      [f"{FRAMEWORK_NAMES[fw]}\n({len(samples[fw])} windows)" for fw in present])
        every = np.concatenate([samples[fw] for fw in present])
        if every.min() > 0 and every.max() / every.min() > 10:  # one box would be a sliver
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            scale_note = " (log scale)"
    else:
        ax.text(0.5, 0.5, "no steady-state timing windows recorded", ha="center",
                transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("milliseconds per step (timing window / steps), epochs after the first"
                  + scale_note)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _breakdown_figure(runs: list[dict]):
    """Mean seconds per framework: warm-up, later epochs, input wait, evaluation."""
    import matplotlib.pyplot as plt
    parts = ("warm-up (epoch 1)", "later epochs", "input wait", "evaluation")
    colours = ("#bbbbbb", "#4c9a2a", "#d62728", "#9467bd")
    fig, ax = plt.subplots(figsize=(8, 2.6))
    names = []
    for row, fw in enumerate(("tf", "torch")):
        done = [r for r in runs if r["framework"] == fw and r["epochs"]]
        names.append(FRAMEWORK_NAMES[fw])
        if not done:
            continue
        breakdown = np.mean([_breakdown(r) for r in done], axis=0)
        left = 0.0
        for value, label, colour in zip(breakdown, parts, colours):
            ax.barh(row, value, left=left, color=colour, label=label)
            left += value
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("seconds (mean over seeds)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    if unique:
        ax.legend(unique.values(), unique.keys(), fontsize=8, ncol=4, loc="upper center",
                  bbox_to_anchor=(0.5, -0.35))
    ax.grid(axis="x", alpha=0.3)
    return fig


def _breakdown(run: dict) -> tuple[float, float, float, float]:
    """(first epoch, later epochs, input wait, evaluation) seconds; the two training parts
    exclude the input wait, which is counted over all epochs."""
    epochs = run["epochs"]
    first = epochs[0]["train_time_s"] - epochs[0].get("input_wait_s", 0.0)
    later = sum(e["train_time_s"] - e.get("input_wait_s", 0.0) for e in epochs[1:])
    wait = sum(e.get("input_wait_s", 0.0) for e in epochs)
    evaluation = sum(e["eval_time_s"] for e in epochs)
    return first, later, wait, evaluation


# --------------------------------------------------------------------------- rendering

FORMATS = {  # how each kind of figure is printed in tables
    "pct": lambda v: f"{100 * v:.1f}%",
    "acc": lambda v: f"{v:.4f}",
    "mib": lambda v: f"{v / 2**20:,.0f} MiB",
    "s": lambda v: f"{v:,.2f} s",
    "ms": lambda v: f"{v:,.2f} ms",
    "ips": lambda v: f"{v:,.0f} img/s",
    "flops": lambda v: f"{v / 1e9:,.1f} GFLOP/s",
    "x": lambda v: f"{v:.3f}x",
    "j": lambda v: f"{v:,.0f} J" if v >= 10 else f"{v:.4g} J",
}


def fmt(value: float | None, kind: str) -> str:
    return "n/a" if value is None else FORMATS[kind](value)


def _with_interval(agg: dict | None, kind: str) -> str:
    """'value [low, high] (n=3)', '... (n=2: range)' or 'value (n=1)'."""
    if not agg or agg.get("n", 0) == 0:
        return "n/a"
    centre = agg.get("centre", agg.get("mean"))
    text = fmt(centre, kind)
    if _low(agg) is not None:
        text += f" [{fmt(_low(agg), kind)}, {fmt(_high(agg), kind)}]"
    suffix = ": range" if agg.get("interval") == "range" else ""
    return text + f" (n={agg['n']}{suffix})"


def _ratio(r: dict | None) -> str:
    if not r or r.get("ratio") is None:
        return "n/a"
    text = fmt(r["ratio"], "x")
    if _low(r) is not None:
        text += f" [{fmt(_low(r), 'x')}, {fmt(_high(r), 'x')}]"
    return text + (" (range)" if r.get("interval") == "range" else "")


def _difference(diff: dict | None) -> str:
    if not diff or diff.get("mean") is None:
        return "n/a"
    text = f"{100 * diff['mean']:+.2f} pts"
    if _low(diff) is not None:
        text += f" [{100 * _low(diff):+.2f}, {100 * _high(diff):+.2f}]"
    return text + (" (range)" if diff.get("interval") == "range" else "")


def _methods(*entries: dict | None) -> str:
    """The distinct interval methods behind a table row, for its 'how measured'."""
    found = [e.get("method") for e in entries if e and e.get("n") and e.get("method")]
    return "; ".join(dict.fromkeys(found))


def verdict_rows(summary: dict) -> list[dict[str, str]]:
    """The side-by-side table: figure, TF, PyTorch, TF vs PyTorch, how it was measured (the
    definition, then the interval methods in use)."""
    f = summary["frameworks"]
    tf, torch = f.get("tf", {}), f.get("torch", {})
    r = summary["ratios"]
    m = schema.MEASUREMENT
    diff = summary["accuracy_difference"]
    rows = [
        ("Training time", "train_time_s", "s", r["train_time_s"], m["train_time_s"]),
        ("Throughput", "images_per_s", "ips", r["images_per_s"], m["images_per_s"]),
        ("Steady step time (median)", "steady_step_time_ms", "ms", r["steady_step_time_ms"],
         m["steady_step_time_ms"]),
        ("Steady step time (p90)", "steady_step_time_p90_ms", "ms", None, m["steady_step_time_ms"]),
        ("Warm-up (first epoch)", "warmup_time_s", "s", r["warmup_time_s"], m["warmup_time_s"]),
        ("Input wait", "input_wait_fraction", "pct", None, m["input_wait_fraction"]),
        ("Evaluation time", "eval_time_s", "s", None, m["eval_time_s"]),
        ("Final test accuracy", "final_test_accuracy", "acc", diff, m["test_accuracy"]),
        ("Best test accuracy", "best_test_accuracy", "acc", None, m["test_accuracy"]),
        ("Peak device memory", "peak_device_memory_bytes", "mib", r["peak_device_memory_bytes"],
         m["peak_device_memory_bytes"]),
        ("Host peak RSS", "host_peak_rss_bytes", "mib", None,
         "getrusage ru_maxrss of the trainer process"),
        ("Achieved FLOP/s", "achieved_flops_per_s", "flops", None,
         "analytic training FLOPs per image (3 x forward, multiply-add = 2) x images/s"),
        ("MFU", "mfu", "pct", None, "achieved FLOP/s / the device's dense peak for the precision "
         "(table in compare/gpu_metrics.py); n/a on CPU or an unknown GPU"),
        ("Energy (training)", "energy_j", "j", r["energy_j"],
         "NVML cumulative energy counter, difference over each epoch's training; n/a without NVML"),
        ("Energy per image", "energy_per_image_j", "j", None, "training energy / images trained"),
    ]
    if any((x.get("time_to_target_s") or {}).get("n") for x in (tf, torch)):
        rows.append(("Time to target accuracy", "time_to_target_s", "s", None,
                     "cumulative training time at the end of the first epoch reaching the target"))
    table = []
    for name, key, kind, versus, how in rows:
        versus_text = "" if versus is None else (
            _difference(versus) if versus is diff else _ratio(versus))
        methods = _methods(tf.get(key), torch.get(key))
        if versus is not None and versus.get("n"):
            methods += ("; " if methods else "") + "TF vs PyTorch: " + versus.get("method", "")
        table.append({"figure": name, "tf": _with_interval(tf.get(key), kind),
                      "torch": _with_interval(torch.get(key), kind), "versus": versus_text,
                      "how": how + (f". Across seeds: {methods}" if methods else "")})
    return table


# Manifest entries that name each framework's own machinery: expected to read differently.
IMPLEMENTATION_KEYS = {"optimizer_implementation", "distribution", "pipeline", "device",
                       "strategy", "step_batching", "input_wait", "loss_scale_check",
                       "batchnorm_kernel"}
# The frameworks' own behaviour that no setting changes, named in the report's notes.
BEHAVIOUR_KEYS = {"loss_scale_check": "Loss scaling", "batchnorm_kernel": "BatchNorm"}


def behaviour_notes(summary: dict) -> list[str]:
    """What each framework does its own way that the settings cannot match, one note each
    (from the manifests): e.g. Keras' per-step host check of the loss scale."""
    notes = []
    for key, what in BEHAVIOUR_KEYS.items():
        said = {fw: (f or {}).get(key) for fw, f in (summary.get("fairness") or {}).items()}
        if any(said.values()):
            notes.append(f"{what}: " + "; ".join(f"{FRAMEWORK_NAMES[fw]}: {text or 'n/a'}"
                                                  for fw, text in said.items()))
    return notes


def fairness_rows(summary: dict) -> list[dict[str, str]]:
    """Each setting per framework, and whether the two agree (compared in one convention)."""
    tf, torch = summary["fairness"].get("tf") or {}, summary["fairness"].get("torch") or {}
    keys = list(dict.fromkeys(list(tf) + list(torch)))
    rows = []
    for key in keys:
        a, b = _plain(tf.get(key)), _plain(torch.get(key))
        if key in IMPLEMENTATION_KEYS:
            same = "(implementation)"
        elif isinstance(tf.get(key), dict) and "torch_convention" in tf.get(key, {}):
            same = "yes" if tf[key]["torch_convention"] == (torch.get(key) or {}).get(
                "torch_convention") else "differs"
        else:
            same = "yes" if a == b else "differs"
        rows.append({"setting": key, "tf": a, "torch": b, "same": same})
    return rows


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items())
    return "n/a" if value is None else str(value)


def environment_rows(summary: dict) -> list[dict[str, str]]:
    tf, torch = summary["environment"].get("tf") or {}, summary["environment"].get("torch") or {}
    keys = ["hardware", "device_used", "tensorflow", "keras", "torch", "torchvision", "cuda",
            "cudnn", "gpus", "tf32_default", "mixed_precision", "python", "platform"]
    return [{"key": k, "tf": _plain(tf.get(k)) if k in tf else "",
             "torch": _plain(torch.get(k)) if k in torch else ""}
            for k in keys if k in tf or k in torch]


def _per_run(runs: list[dict]) -> list[dict[str, str]]:
    rows = []
    for r in sorted((r for r in runs if not r.get("unreadable")),
                    key=lambda r: (r["framework"], _seed(r) or 0)):
        s = r["summary"]
        rows.append({"framework": FRAMEWORK_NAMES.get(r["framework"], r["framework"]),
                     "seed": _seed(r), "status": s.get("status"), "epochs": len(r["epochs"]),
                     "accuracy": fmt(s.get("final_test_accuracy"), "acc"),
                     "train_time": fmt(s.get("train_time_s") if r["epochs"] else None, "s"),
                     "throughput": fmt(s.get("images_per_s"), "ips"),
                     "error": r.get("error") or "", "path": r["path"],
                     "tensorboard": (r.get("files") or {}).get("tensorboard") or ""})
    return rows


PHASE_HEADINGS = {"input": "Input", "host_to_device": "Host to device", "forward": "Forward",
                  "backward": "Backward", "all_reduce": "All-reduce", "update": "Update"}


def _phases(runs: list[dict]) -> list[dict[str, Any]]:
    """Where a step's time goes, per run with a phase profile (compare.phases): each
    phase's milliseconds per profiled step and share of the step, the rest, and on a GPU the
    device's idle time."""
    rows = []
    profiled = [r for r in runs if not r.get("unreadable")
                and {"phases_ms", "error"} & set(r.get("profile") or {})]
    for r in sorted(profiled, key=lambda r: (r["framework"], _seed(r) or 0)):
        profile = r["profile"]
        row = {"framework": FRAMEWORK_NAMES.get(r["framework"], r["framework"]),
               "seed": _seed(r), "error": profile.get("error") or ""}
        if "phases_ms" in profile:
            share = phases.shares(profile)

            def cell(name: str, ms: float | None) -> str:
                if ms is None:
                    return "n/a"
                return fmt(ms, "ms") + (f" ({share[name]:.0%})" if share[name] is not None
                                        else "")
            row.update({"steps": profile["steps"], "clock": profile["clock"],
                        "step": fmt(profile["step_ms"], "ms"),
                        "other": cell("other", profile["other_ms"]),
                        "device_idle": cell("device_idle", profile["device_idle_ms"]),
                        "input_stall": cell("input_stall", profile["input_stall_ms"]),
                        "files": profile.get("files") or "",
                        "notes": "; ".join(profile.get("notes") or []),
                        "cells": [cell(name, profile["phases_ms"].get(name))
                                  for name in phases.PHASES]})
        rows.append(row)
    return rows


def phase_clocks_differ(runs: list[dict]) -> str | None:
    """Where one framework's phase split was read on the device clock and the other's only on
    the host clock (no GPU trace), the sentence that keeps the two from being read side by
    side; None when they share a clock."""
    clocks: dict[str, set] = {}
    for r in runs:
        clock = (r.get("profile") or {}).get("clock")
        if clock and not r.get("unreadable"):
            clocks.setdefault(r["framework"], set()).add(clock)
    if len(clocks) < 2 or len(set().union(*clocks.values())) < 2:
        return None
    said = ", ".join(f"{FRAMEWORK_NAMES[fw]} on the {'/'.join(sorted(c))} clock"
                     for fw, c in sorted(clocks.items()))
    return (f"Not comparable side by side: {said}. A device-clock split times the kernels, a "
            "host-clock split the host's launches; compare each framework's shares only with "
            "runs on the same clock.")


def _per_process(runs: list[dict]) -> list[dict[str, str]]:
    """Multi-process runs (DDP, MultiWorkerMirroredStrategy, several machines): each
    process's own steady-state clock, from the run's summary."""
    rows = []
    for r in sorted((r for r in runs if not r.get("unreadable")),
                    key=lambda r: (r["framework"], _seed(r) or 0)):
        manifest = r.get("fairness") or {}
        for p in r["summary"].get("processes") or []:
            rows.append({"framework": FRAMEWORK_NAMES.get(r["framework"], r["framework"]),
                         "seed": _seed(r), "rank": p["rank"],
                         "where": f"{manifest.get('nodes', 1)} machine(s), "
                                  f"{manifest.get('launcher', '')}",
                         "train_time": fmt(p["train_time_s"], "s"),
                         "input_wait": fmt(p["input_wait_fraction"], "pct"),
                         "step_ms": fmt(p["median_step_ms"], "ms")})
    return rows


def _summary_runs(summary: dict) -> list[dict[str, str]]:
    """The runs table of a group read from a summary.json alone (no per-run figures)."""
    return [{"framework": FRAMEWORK_NAMES.get(r["framework"], r["framework"]), "seed": r["seed"],
             "status": r["status"], "epochs": "", "accuracy": "", "train_time": "",
             "throughput": "", "error": r.get("error") or "", "path": r["path"]}
            for r in summary.get("runs") or []]


@dataclass
class Group:
    """One comparison to show: its summary, and its runs when read from result files."""

    summary: dict[str, Any]
    runs: list[dict[str, Any]] | None = None  # None: read from a summary.json
    source: str = ""

    @property
    def label(self) -> str:
        machine = self.summary.get("machine") or machine_of(self.summary.get("environment") or {})
        return f"{machine['device']}, {precision_label(self.summary) or '?'} ({machine['host']})"


def _group_context(group: Group, index: int) -> dict[str, Any]:
    summary = group.summary
    return {"summary": summary, "label": group.label, "source": group.source, "index": index,
            "sentences": verdict_sentences(summary), "verdict": verdict_rows(summary),
            "fairness": fairness_rows(summary), "environment": environment_rows(summary),
            "behaviour": behaviour_notes(summary),
            "plots": plots(group.runs) if group.runs is not None else None,
            "per_run": _per_run(group.runs) if group.runs is not None else _summary_runs(summary),
            "per_process": _per_process(group.runs) if group.runs is not None else [],
            "phases": _phases(group.runs) if group.runs is not None else [],
            "phase_clocks_differ": phase_clocks_differ(group.runs or []),
            "machine": summary.get("machine") or machine_of(summary.get("environment") or {})}


def overview_rows(groups: list[Group]) -> list[dict[str, str]]:
    """One line per group for the cross-machine table."""
    rows = []
    for g in groups:
        s = g.summary
        f = s["frameworks"]
        machine = s.get("machine") or machine_of(s.get("environment") or {})
        rows.append({"device": machine["device"], "host": machine["host"],
                     "precision": precision_label(s) or "?",
                     "model": f"{(s.get('model') or {}).get('name', '?')} on "
                              f"{(s.get('data') or {}).get('source', '?')}",
                     "seeds": str(len(s.get("seeds") or [])),
                     "tf_time": _with_interval(f.get("tf", {}).get("train_time_s"), "s"),
                     "torch_time": _with_interval(f.get("torch", {}).get("train_time_s"), "s"),
                     "time_ratio": _ratio(s["ratios"].get("train_time_s")),
                     "tf_accuracy": _with_interval(
                         f.get("tf", {}).get("final_test_accuracy"), "acc"),
                     "torch_accuracy": _with_interval(
                         f.get("torch", {}).get("final_test_accuracy"), "acc"),
                     "source": g.source})
    return rows


def _stacked(text: str):
    """'3.95 s [3.66 s, 4.26 s] (n=3)' as the value over its interval in small print (HTML),
    so a table of several machines fits the page."""
    import markupsafe
    value, *detail = re.split(r" (?=[\[(])", text, maxsplit=1)
    return markupsafe.Markup('{}<br><span class="how">{}</span>').format(value, "".join(detail))


def render(groups: list[Group], out_dir: Path) -> list[Path]:
    """Write report.md and report.html into out_dir: one group, or several side by side."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.PackageLoader("compare.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True,
                             lstrip_blocks=True)
    env.filters["g3"] = lambda v: "n/a" if v is None else f"{v:.3g}"
    env.filters["stacked"] = _stacked
    contexts = [_group_context(g, i) for i, g in enumerate(groups)]
    skipped = [s for g in groups for s in g.summary.get("skipped") or []]
    context = {"groups": contexts, "combined": len(groups) > 1, "names": FRAMEWORK_NAMES,
               "phase_names": PHASE_HEADINGS, "phase_legend": phases.PHASES,
               "overview": overview_rows(groups), "machine_identity": MACHINE_IDENTITY,
               "skipped": skipped, "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    written = []
    for name in ("report.md", "report.html"):
        text = env.get_template(f"{name}.j2").render(**context)
        written.append(schema.write_atomic(out_dir / name, lambda f, t=text: f.write(t)))
    return written


def write(out_dir: Path, runs: list[dict], parity: dict | None, command: str | None,
          planned: list[dict] | None = None,
          margin: float = stats.EQUIVALENCE_MARGIN, order_note: str | None = None) -> list[Path]:
    """summary.json, report.md and report.html for these runs (one comparison). A report
    already there that counted more completed runs is moved aside first, never overwritten."""
    summary = summarise(runs, parity, command, planned, margin, order_note)
    keep_a_fuller_report(out_dir, _completed(summary))
    paths = [schema.write_json_atomic(out_dir / "summary.json", summary)]
    return paths + render([Group(summary, runs, str(out_dir))], out_dir)


REPORT_FILES = ("summary.json", "report.md", "report.html")


def _completed(summary: dict) -> int:
    return sum(1 for r in summary.get("runs") or [] if r.get("status") == "completed")


def keep_a_fuller_report(out_dir: Path, completed_now: int) -> Path | None:
    """Move the report in `out_dir` to out_dir/earlier/<when>/ when it counted more completed
    runs than the one about to be written (a rerun that failed early must not erase it)."""
    previous = _read_json(out_dir / "summary.json")
    if not isinstance(previous, dict) or _completed(previous) <= completed_now:
        return None
    target = out_dir / "earlier" / time.strftime("%Y%m%d-%H%M%S")
    target.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        if (out_dir / name).exists():
            (out_dir / name).replace(target / name)
    print(f"note: the earlier report in {out_dir} had {_completed(previous)} completed run(s), "
          f"this one {completed_now}: it is kept in {target}", file=sys.stderr, flush=True)
    return target


# --------------------------------------------------------------------------- `cnncompare report`

@dataclass
class Built:
    """What `build` wrote, and the files it could not use (path, why)."""

    paths: list[Path]
    groups: list[Group]
    skipped: list[dict[str, str]] = field(default_factory=list)


def _comparison_dir(result_path: Path) -> Path:
    """The `compare` output directory of a result (DIR/runs/<fw>-seed<n>/result.json)."""
    run_dir = result_path.parent
    return run_dir.parent.parent if run_dir.parent.name == "runs" else run_dir


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_summaries(path: Path) -> list[dict]:
    """The comparisons in a summary.json (one) or a combined.json (several); SchemaError when
    it is torn, of another version, or lacks the figures."""
    data = _read_json(path)
    if data is None:
        raise schema.SchemaError(f"cannot read {path}: not a JSON object (torn or truncated?)")
    summaries = data["groups"] if isinstance(data.get("groups"), list) else [data]
    for s in summaries:
        if s.get("schema_version") not in READABLE_SUMMARY_VERSIONS:
            raise schema.SchemaError(f"{path}: summary schema version "
                                      f"{s.get('schema_version')!r}; this cnncompare reads "
                                      f"{', '.join(map(str, READABLE_SUMMARY_VERSIONS))}")
        missing = [k for k in ("frameworks", "ratios", "accuracy_difference", "environment",
                               "fairness", "config") if k not in s]
        if missing:
            raise schema.SchemaError(f"{path}: summary lacks {', '.join(missing)}")
    return summaries


def _run_group_key(runs: list[dict]) -> tuple:
    first = runs[0]
    return (precision_label(first), (first.get("model") or {}).get("name"),
            (first.get("data") or {}).get("source"))


def _groups_from_runs(runs: list[dict], margin: float) -> list[Group]:
    """Runs split into comparisons: by compare directory, then pooled across directories
    whose machine, precision, model and data agree; never across machines."""
    hosts: dict[Path, set] = {}  # a run that failed before recording its host gets its dir's
    for run in runs:
        platform = (run.get("environment") or {}).get("platform")
        hosts.setdefault(_comparison_dir(Path(run["path"])), set()).update({platform} - {None})
    units: dict[tuple, list[dict]] = {}
    for run in runs:  # one unit per compare directory, precision, model, data and host
        directory = _comparison_dir(Path(run["path"]))
        platform = (run.get("environment") or {}).get("platform") or (
            next(iter(hosts[directory])) if len(hosts[directory]) == 1 else None)
        key = (str(directory), *_run_group_key([run]), platform)
        units.setdefault(key, []).append(run)
    pooled: dict[tuple, list[dict]] = {}
    for key, unit in units.items():
        environment = {fw: next((r.get("environment") for r in unit if r["framework"] == fw
                                 and r.get("environment")), None) for fw in ("tf", "torch")}
        machine = machine_of(environment)
        pooled.setdefault((machine["id"], *key[1:4]), []).append(unit)
    groups = []
    for units_of_group in pooled.values():
        group_runs = [r for unit in units_of_group for r in unit]
        parity, command, planned, order = None, None, [], None
        for directory in dict.fromkeys(_comparison_dir(Path(r["path"])) for r in group_runs):
            previous = _read_json(directory / "summary.json") or {}
            if isinstance(previous.get("groups"), list):
                previous = {}
            found = previous.get("parity")
            if found is not None and (parity is None or not found.get("passed")):
                parity = found  # a failed check anywhere in the group is the one to show
            command = command or previous.get("command")
            planned += previous.get("not_run") or []
            order = order or previous.get("order_note")
        summary = summarise(group_runs, parity, command, planned, margin, order)
        groups.append(Group(summary, group_runs, ", ".join(sorted({str(
            _comparison_dir(Path(r["path"]))) for r in group_runs}))))
    return groups


def build(sources: list[Path], out_dir: Path | None = None,
          margin: float = stats.EQUIVALENCE_MARGIN) -> Built:
    """`cnncompare report`: one report from result directories and shipped summaries.

    Each source is a directory with result.json files below it, a result.json, a directory
    holding a summary.json (and no results), or a summary.json / combined.json file. The
    report goes to `out_dir`, else the first source that is a directory. One comparison
    writes summary.json there; several (machines, precisions) write combined.json and leave
    summary.json alone. Raises UserError when no readable result remains.
    """
    from compare.errors import UserError
    runs: list[dict] = []
    summary_groups: list[Group] = []
    skipped: list[dict[str, str]] = []
    for source in sources:
        result_files = [source] if source.name == "result.json" else (
            sorted(source.rglob("result.json")) if source.is_dir() else [])
        if result_files:
            runs += load_runs(result_files)
            continue
        summary_file = source / "summary.json" if source.is_dir() else source
        if source.is_dir() and not summary_file.exists():
            summary_file = source / COMBINED_NAME
        if not summary_file.exists():
            continue
        try:
            summary_groups += [Group(s, None, str(summary_file))
                               for s in read_summaries(summary_file)]
        except schema.SchemaError as exc:
            skipped.append({"path": str(summary_file), "reason": str(exc)})
    skipped += [{"path": r["path"], "reason": r["unreadable"]} for r in runs if r.get("unreadable")]
    readable = [r for r in runs if not r.get("unreadable")]
    if not readable and not summary_groups:
        where = ", ".join(map(str, sources))
        why = f"; skipped {len(skipped)}: " + "; ".join(
            f"{s['path']} ({s['reason']})" for s in skipped) if skipped else ""
        raise UserError(f"no readable result (result.json or summary.json) under {where}{why}")
    groups = _groups_from_runs(readable, margin) + summary_groups
    groups[0].summary["skipped"] = skipped  # listed once, in the first comparison
    groups[0].summary["verdict"] = verdict_sentences(groups[0].summary)
    for g in groups[1:]:
        g.summary["skipped"] = []
        g.summary["verdict"] = verdict_sentences(g.summary)
    if out_dir is None:
        out_dir = next((s for s in sources if s.is_dir()), None)
        if out_dir is None:
            raise UserError("none of the sources is a directory to write the report into: "
                            "pass --out DIR")
    out_dir.mkdir(parents=True, exist_ok=True)
    if len(groups) == 1:
        paths = [schema.write_json_atomic(out_dir / "summary.json", groups[0].summary)]
    else:
        paths = [schema.write_json_atomic(out_dir / COMBINED_NAME, {
            "schema_version": SUMMARY_VERSION, "machine_identity": MACHINE_IDENTITY,
            "groups": [g.summary for g in groups]})]
    return Built(paths + render(groups, out_dir), groups, skipped)


def rebuild(out_dir: Path, run_dirs: list[Path]) -> list[Path]:
    """The reports again from the result files under run_dirs, into out_dir; skipped files
    are named on stderr."""
    built = build(list(run_dirs), out_dir)
    for s in built.skipped:
        print(f"skipped {s['path']}: {s['reason']}", file=sys.stderr)
    return built.paths
