"""sweep.json, sweep.md and sweep.html: the sweep's rows with their speed-ups over each
framework's baseline, as sections (compare.report.sections) written by the same renderers
as the comparison report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compare import files, schema
from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS
from compare.figures import FIGURES, Figure
from compare.records import RunSummary
from compare.report import plots
from compare.report.render import environment
from compare.report.sections import Section
from compare.report.tables import fmt

SPEEDUP = ("images/s of the row / images/s of the same framework's baseline row (first value "
           "of every varied setting)")


def with_speedups(rows: list[dict], varies: list[tuple[str, list[Any]]]) -> list[dict]:
    """Each row's throughput and time-to-target relative to its framework's baseline row."""
    baseline_settings = {name: values[0] for name, values in varies}
    baselines = {r["framework"]: r for r in rows
                 if r["settings"] == baseline_settings and r["summary"]}
    out = []
    for r in rows:
        row = dict(r)
        base = baselines.get(r["framework"])
        s: RunSummary | None = r["summary"]
        b: RunSummary | None = base["summary"] if base else None
        row["speedup"] = _ratio(s.images_per_s if s else None,
                                b.images_per_s if b else None)
        row["time_to_target_speedup"] = _ratio(b.time_to_target_s if b else None,
                                               s.time_to_target_s if s else None)
        row["baseline"] = r["settings"] == baseline_settings
        out.append(row)
    return out


def _label(settings: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in settings.items())


def bars(rows: list[dict]) -> str:
    """The speed-up of every combination, a bar per framework."""
    plots.matplotlib_agg()
    import matplotlib.pyplot as plt
    labels = sorted({_label(r["settings"]) for r in rows})
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.55 * len(labels)))
    height = 0.38
    for offset, fw in ((-height / 2, "tf"), (height / 2, "torch")):
        values = []
        for label in labels:
            match = [r for r in rows if r["framework"] == fw and _label(r["settings"]) == label]
            values.append(match[0]["speedup"] or 0.0 if match else 0.0)
        ax.barh([i + offset for i in range(len(labels))], values, height,
                color=plots.COLOURS[fw], label=FRAMEWORK_NAMES[fw])
    ax.axvline(1.0, color="#444", linewidth=0.8)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("throughput speed-up over the framework's baseline (x); 0 = failed or not run")
    ax.legend(fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return plots.svg(fig)


RUN_COLUMNS = ("Framework", "Settings", "Status", "Speed-up")


def run_figures(rows: list[dict]) -> list[Figure]:
    """The figures a sweep's table of runs shows (compare.figures: `in_sweep`), in the
    report's order; one shown only when measured, only where a run measured it."""
    return [f for f in FIGURES if f.in_sweep and (not f.only_when_measured or any(
        r["summary"] and f.read(r["summary"]) is not None for r in rows))]


def _cells(r: dict, shown: list[Figure]) -> list[str]:
    s: RunSummary | None = r["summary"]
    return [FRAMEWORK_NAMES[r["framework"]],
            _label(r["settings"]) + (" (baseline)" if r["baseline"] else ""),
            r["status"] + (f": {r['error']}" if r["error"] else ""), fmt(r["speedup"], "x"),
            *(fmt(f.read(s) if s else None, f.unit) for f in shown)]


RATIO = ("TF / PyTorch of each figure compared as a ratio (compare.figures), one run each (no "
         "interval: `cnncompare compare --seeds N` gives one): for a time, above 1 means "
         "TensorFlow took longer; for a rate, that it went faster. Training time includes the "
         "first epoch (tracing, compilation, warm-up); the median step leaves it out")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def ratio_figures(rows: list[dict]) -> list[Figure]:
    """The sweep's figures compared TF / PyTorch (`in_sweep`, `versus` "ratio"), those some
    completed pair measured."""
    pairs = _pairs(rows)
    return [f for f in FIGURES if f.in_sweep and f.versus == "ratio"
            and any(_ratio(f.read(tf), f.read(torch)) is not None for _, tf, torch, _ in pairs)]


def _pairs(rows: list[dict]) -> list[tuple[str, RunSummary, RunSummary, str | None]]:
    """(settings, TF's summary, PyTorch's, the model where it varies) per combination both
    frameworks completed."""
    out = []
    for label in dict.fromkeys(_label(r["settings"]) for r in rows):
        pair = {r["framework"]: r for r in rows if _label(r["settings"]) == label
                and r["status"] == "completed" and r["summary"]}
        if set(pair) == set(FRAMEWORKS):
            out.append((label, pair["tf"]["summary"], pair["torch"]["summary"],
                        pair["tf"]["settings"].get("model")))
    return out


def framework_ratios(rows: list[dict], shown: list[Figure]) -> list[list[str]]:
    """A row per combination both frameworks completed: TF / PyTorch of each figure in
    `shown`; where the model varies, the layer kinds holding its FLOPs."""
    from compare.experiment import networks, specs
    out = []
    for label, tf, torch, model in _pairs(rows):
        kinds = ", ".join(f"{k} {v:.0%}" for k, v in specs.flops_by_kind(
            networks.get_spec(model)).items() if v >= 0.01) if model else ""
        out.append([label, *(fmt(_ratio(f.read(tf), f.read(torch)), "x") for f in shown),
                    *([kinds] if model else [])])
    return out


def sections_of(document: dict) -> list[Section]:
    rows = document["rows"]
    shown, ratios = run_figures(rows), ratio_figures(rows)
    varied = "; ".join(f"`{name}` = {', '.join(map(str, values))}"
                       for name, values in document["varied"].items())
    baseline = ", ".join(f"{k}={v}" for k, v in document["baseline"].items())
    return [
        Section("speedup", "Speed-up over the baseline",
                f"Varied: {varied}. Baseline: {baseline}. Speed-up: {SPEEDUP}.",
                figures=[bars(rows)], figures_elsewhere="The speed-up bars are in sweep.html.",
                folded=False),
        Section("frameworks", "TensorFlow against PyTorch per setting", RATIO + ".",
                columns=("Settings", *(f"{f.label} TF / PyTorch" for f in ratios),
                         *(("FLOPs in (the spec's layer kinds)",)
                           if "model" in document["varied"] else ())),
                rows=framework_ratios(rows, ratios), folded=False),
        Section("sweep", "All runs", columns=RUN_COLUMNS + tuple(f.label for f in shown),
                rows=[_cells(r, shown) for r in rows], folded=False),
        Section("replay", "Replay", code=document["command"]),
    ]


def write(out: Path, rows: list[dict], varies: list[tuple[str, list[Any]]],
          command: str) -> list[Path]:
    """sweep.json, then the two pages."""
    rows = with_speedups(rows, varies)
    document = {"schema_version": 1, "command": command, "varied": {n: v for n, v in varies},
                "baseline": {n: v[0] for n, v in varies}, "rows": rows,
                "measurement": {"speedup": SPEEDUP, **schema.MEASUREMENT}}
    directory = files.SweepDir(out)
    written = {**document, "rows": [{**r, "summary": r["summary"] and r["summary"].to_dict()}
                                    for r in rows]}
    paths = [files.write_json(directory.sweep, written)]
    env = environment()
    context = {"title": "cnncompare sweep", "sections": sections_of(document),
               "names": FRAMEWORK_NAMES}
    for page in directory.pages:
        text = env.get_template(f"{page.name}.j2").render(**context)
        paths.append(files.write_text(page, text))
    return paths
