"""summary.json, report.md and a self-contained report.html from saved result files alone."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from compare import results, stats
from compare.config import FRAMEWORK_NAMES

COLOURS = {"tf": "#e8710a", "torch": "#1f5fbf"}
SUMMARY_VERSION = 1

# Summary fields aggregated over seeds: (summary.json key, how to read it from a result).
AGGREGATES = {
    "final_test_accuracy": lambda s: s["final_test_accuracy"],
    "best_test_accuracy": lambda s: s["best_test_accuracy"],
    "train_time_s": lambda s: s["train_time_s"] if s.get("epochs_completed") else None,
    "warmup_time_s": lambda s: s["warmup_time_s"],
    "eval_time_s": lambda s: s.get("eval_time_s") if s.get("epochs_completed") else None,
    "images_per_s": lambda s: s["images_per_s"],
    "steady_step_time_ms": lambda s: s["steady_step_time_ms"]["median"],
    "steady_step_time_p90_ms": lambda s: s["steady_step_time_ms"]["p90"],
    "input_wait_fraction": lambda s: s["input_wait_fraction"],
    "peak_device_memory_bytes": lambda s: s["peak_device_memory_bytes"],
    "host_peak_rss_bytes": lambda s: s.get("host_peak_rss_bytes"),
    "achieved_flops_per_s": lambda s: s.get("achieved_flops_per_s"),
    "time_to_target_s": lambda s: s.get("time_to_target_s"),
    "mfu": lambda s: s.get("mfu"),
    "energy_j": lambda s: s.get("energy_j"),
    "energy_per_image_j": lambda s: s.get("energy_per_image_j"),
}


def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """Every result.json under `paths`, each with `path`; unreadable ones become failed entries."""
    runs = []
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("result.json"))
        for file in files:
            try:
                result = results.read_result(file)
            except results.SchemaError as exc:
                result = {"framework": _guess_framework(file), "error": str(exc), "epochs": [],
                          "summary": {"status": "failed"}, "config": {}}
            result["path"] = str(file)
            runs.append(result)
    return runs


def _guess_framework(file: Path) -> str:
    name = file.parent.name
    return "tf" if name.startswith("tf") else "torch"


def _seed(run: dict) -> int | None:
    return run.get("config", {}).get("seed")


def summarise(runs: list[dict], parity: dict | None, command: str | None,
              planned: list[dict] | None = None) -> dict[str, Any]:
    """Aggregates per framework, paired TF/PyTorch ratios and the accuracy difference."""
    by_framework: dict[str, list[dict]] = {"tf": [], "torch": []}
    for run in runs:
        by_framework.setdefault(run["framework"], []).append(run)
    frameworks = {}
    for fw, fw_runs in by_framework.items():
        completed = [r for r in fw_runs if r["summary"].get("status") == "completed"]
        entry = {"runs": len(fw_runs), "completed": len(completed),
                 "statuses": {r["path"]: r["summary"].get("status") for r in fw_runs}}
        for key, read in AGGREGATES.items():
            entry[key] = stats.aggregate(_safe(read, r["summary"]) for r in completed)
        frameworks[fw] = entry

    def per_seed(fw: str, key: str) -> dict[int, float | None]:
        return {_seed(r): _safe(AGGREGATES[key], r["summary"]) for r in by_framework.get(fw, [])
                if r["summary"].get("status") == "completed"}

    ratios = {key: stats.paired_ratio(per_seed("tf", key), per_seed("torch", key))
              for key in ("train_time_s", "images_per_s", "steady_step_time_ms", "warmup_time_s",
                          "peak_device_memory_bytes", "energy_j")}
    first = {fw: next((r for r in by_framework.get(fw, []) if r.get("environment")), None)
             for fw in ("tf", "torch")}
    base_config = next((r["config"] for r in runs if r.get("config")), {})
    return {
        "schema_version": SUMMARY_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command,
        "config": {k: v for k, v in base_config.items() if k not in ("framework", "seed", "out", "quiet")},
        "seeds": sorted({_seed(r) for r in runs if _seed(r) is not None}),
        "parity": parity,
        "frameworks": frameworks,
        "ratios": ratios,
        "accuracy_difference": stats.paired_difference(per_seed("tf", "final_test_accuracy"),
                                                       per_seed("torch", "final_test_accuracy")),
        "runs": [{"framework": r["framework"], "seed": _seed(r), "path": r["path"],
                  "status": r["summary"].get("status"), "error": r.get("error")} for r in runs],
        "not_run": planned or [],
        "environment": {fw: (r or {}).get("environment") for fw, r in first.items()},
        "fairness": {fw: (r or {}).get("fairness") for fw, r in first.items()},
        "model": next((r["model"] for r in runs if "name" in r.get("model", {})), None),
        "data": next((r["data"] for r in runs if r.get("data")), None),
        "measurement": results.MEASUREMENT,
    }


def _safe(read, summary: dict) -> float | None:
    try:
        return read(summary)
    except (KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- plots

def svg(fig) -> str:
    """An inline <svg> element (no XML prolog, no DOCTYPE: nothing that points outside)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def plots(runs: list[dict]) -> dict[str, str]:
    """Learning curves and the time breakdown as inline SVG strings."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    out = {}
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    for run in runs:
        if not run["epochs"]:
            continue
        fw = run["framework"]
        epochs = [e["epoch"] for e in run["epochs"]]
        elapsed = np.cumsum([e["train_time_s"] for e in run["epochs"]])
        label = f"{FRAMEWORK_NAMES[fw]} seed {_seed(run)}"
        style = {"color": COLOURS[fw], "marker": "o", "markersize": 3, "alpha": 0.8, "label": label}
        axes[0, 0].plot(epochs, [e["test_accuracy"] for e in run["epochs"]], **style)
        axes[0, 1].plot(elapsed, [e["test_accuracy"] for e in run["epochs"]], **style)
        axes[1, 0].plot(epochs, [e["test_loss"] for e in run["epochs"]], **style)
        axes[1, 1].plot(elapsed, [e["test_loss"] for e in run["epochs"]], **style)
    titles = [("test accuracy", "epoch"), ("test accuracy", "training time (s)"),
              ("test loss", "epoch"), ("test loss", "training time (s)")]
    for ax, (ylabel, xlabel) in zip(axes.flat, titles):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    out["curves"] = svg(fig)

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
            ax.barh(row, value, left=left, color=colour, label=label if row == 0 or not ax.get_legend_handles_labels()[0] else None)
            left += value
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("seconds (mean over seeds)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8, ncol=4, loc="upper center",
              bbox_to_anchor=(0.5, -0.35))
    ax.grid(axis="x", alpha=0.3)
    out["breakdown"] = svg(fig)
    return out


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


def _with_interval(agg: dict, kind: str) -> str:
    if not agg or agg.get("n", 0) == 0:
        return "n/a"
    text = fmt(agg["mean"], kind)
    if agg.get("ci95_low") is not None:
        text += f" [{fmt(agg['ci95_low'], kind)}, {fmt(agg['ci95_high'], kind)}]"
    return text + f" (n={agg['n']})"


def _ratio(r: dict) -> str:
    if not r or r.get("ratio") is None:
        return "n/a"
    text = fmt(r["ratio"], "x")
    if r.get("ci95_low") is not None:
        text += f" [{fmt(r['ci95_low'], 'x')}, {fmt(r['ci95_high'], 'x')}]"
    return text


def verdict_rows(summary: dict) -> list[dict[str, str]]:
    """The side-by-side table: figure, TF, PyTorch, TF vs PyTorch, how it was measured."""
    f = summary["frameworks"]
    tf, torch = f.get("tf", {}), f.get("torch", {})
    r = summary["ratios"]
    diff = summary["accuracy_difference"]
    d = "n/a"
    if diff.get("mean") is not None:
        d = f"{100 * diff['mean']:+.2f} pts"
        if diff.get("ci95_low") is not None:
            d += f" [{100 * diff['ci95_low']:+.2f}, {100 * diff['ci95_high']:+.2f}]"
    m = results.MEASUREMENT
    rows = [
        ("Training time", "train_time_s", "s", _ratio(r["train_time_s"]), m["train_time_s"]),
        ("Throughput", "images_per_s", "ips", _ratio(r["images_per_s"]), m["images_per_s"]),
        ("Steady step time (median)", "steady_step_time_ms", "ms", _ratio(r["steady_step_time_ms"]),
         m["steady_step_time_ms"]),
        ("Steady step time (p90)", "steady_step_time_p90_ms", "ms", "", m["steady_step_time_ms"]),
        ("Warm-up (first epoch)", "warmup_time_s", "s", _ratio(r["warmup_time_s"]), m["warmup_time_s"]),
        ("Input wait", "input_wait_fraction", "pct", "", m["input_wait_fraction"]),
        ("Evaluation time", "eval_time_s", "s", "", m["eval_time_s"]),
        ("Final test accuracy", "final_test_accuracy", "acc", d + " (TF - PyTorch)", m["test_accuracy"]),
        ("Best test accuracy", "best_test_accuracy", "acc", "", m["test_accuracy"]),
        ("Peak device memory", "peak_device_memory_bytes", "mib", _ratio(r["peak_device_memory_bytes"]),
         m["peak_device_memory_bytes"]),
        ("Host peak RSS", "host_peak_rss_bytes", "mib", "", "getrusage ru_maxrss of the trainer process"),
        ("Achieved FLOP/s", "achieved_flops_per_s", "flops", "",
         "analytic training FLOPs per image (3 x forward, multiply-add = 2) x images/s"),
        ("MFU", "mfu", "pct", "", "achieved FLOP/s / the device's dense peak for the precision "
         "(table in compare/gpu_metrics.py); n/a on CPU or an unknown GPU"),
        ("Energy (training)", "energy_j", "j", _ratio(r["energy_j"]),
         "NVML cumulative energy counter, difference over each epoch's training; n/a without NVML"),
        ("Energy per image", "energy_per_image_j", "j", "", "training energy / images trained"),
    ]
    if any(x.get("time_to_target_s", {}).get("n") for x in (tf, torch)):
        rows.append(("Time to target accuracy", "time_to_target_s", "s", "",
                     "cumulative training time at the end of the first epoch reaching the target"))
    return [{"figure": name, "tf": _with_interval(tf.get(key), kind), "torch": _with_interval(torch.get(key), kind),
             "versus": versus, "how": how} for name, key, kind, versus, how in rows]


# Manifest entries that name each framework's own machinery: expected to read differently.
IMPLEMENTATION_KEYS = {"optimizer_implementation", "distribution", "pipeline", "device"}


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
            same = "yes" if tf[key]["torch_convention"] == (torch.get(key) or {}).get("torch_convention") else "differs"
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
    keys = ["device_used", "tensorflow", "keras", "torch", "torchvision", "cuda", "cudnn", "gpus",
            "tf32_default", "mixed_precision", "python", "platform"]
    return [{"key": k, "tf": _plain(tf.get(k)) if k in tf else "", "torch": _plain(torch.get(k)) if k in torch else ""}
            for k in keys if k in tf or k in torch]


def render(summary: dict, runs: list[dict], out_dir: Path) -> list[Path]:
    """Write report.md and report.html into out_dir."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.PackageLoader("compare", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), trim_blocks=True,
                             lstrip_blocks=True)
    context = {"summary": summary, "verdict": verdict_rows(summary), "fairness": fairness_rows(summary),
               "environment": environment_rows(summary), "names": FRAMEWORK_NAMES,
               "plots": plots(runs), "per_run": _per_run(runs), "fmt": fmt,
               "parity_json": json.dumps(summary.get("parity"), indent=2)}
    env.filters["g3"] = lambda v: "n/a" if v is None else f"{v:.3g}"
    written = []
    for name in ("report.md", "report.html"):
        text = env.get_template(f"{name}.j2").render(**context)
        written.append(results.write_atomic(out_dir / name, lambda f, t=text: f.write(t)))
    return written


def _per_run(runs: list[dict]) -> list[dict[str, str]]:
    rows = []
    for r in sorted(runs, key=lambda r: (r["framework"], _seed(r) or 0)):
        s = r["summary"]
        rows.append({"framework": FRAMEWORK_NAMES.get(r["framework"], r["framework"]), "seed": _seed(r),
                     "status": s.get("status"), "epochs": len(r["epochs"]),
                     "accuracy": fmt(s.get("final_test_accuracy"), "acc"),
                     "train_time": fmt(s.get("train_time_s") if r["epochs"] else None, "s"),
                     "throughput": fmt(s.get("images_per_s"), "ips"),
                     "error": r.get("error") or "", "path": r["path"]})
    return rows


def write(out_dir: Path, runs: list[dict], parity: dict | None, command: str | None,
          planned: list[dict] | None = None) -> list[Path]:
    """summary.json, report.md and report.html for these runs."""
    summary = summarise(runs, parity, command, planned)
    paths = [results.write_json_atomic(out_dir / "summary.json", summary)]
    return paths + render(summary, runs, out_dir)


def rebuild(out_dir: Path, run_dirs: list[Path]) -> list[Path]:
    """`cnncompare report`: the reports again from the result files under run_dirs."""
    previous = {}
    if (out_dir / "summary.json").exists():
        try:
            previous = json.loads((out_dir / "summary.json").read_text())
        except json.JSONDecodeError:
            previous = {}
    runs = load_runs(run_dirs)
    if not runs:
        from compare.errors import UserError
        raise UserError(f"no result.json under {', '.join(map(str, run_dirs))}")
    return write(out_dir, runs, previous.get("parity"), previous.get("command"), previous.get("not_run"))
