"""The report's tables as rows of text: the figures with their intervals, the fairness
manifest, the environment, the runs, each process's clock and the phase split."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from compare import figures, schema
from compare.experiment.config import FRAMEWORK_NAMES
from compare.experiment.frameworks import FRAMEWORKS
from compare.figures import FINAL_ACCURACY, TRAIN_TIME
from compare.report import defaults
from compare.report.labels import machine_of, plain, precision_label, seed_of
from compare.run import phases
from compare.run.kernels import KernelSplit

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


def with_interval(agg: dict | None, kind: str) -> str:
    """'value [low, high]' or 'value'; what the brackets are is said once, by
    brackets_note, and a seed count other than the comparison's in brackets_note too."""
    if not agg or agg.get("n", 0) == 0:
        return "n/a"
    text = fmt(agg.get("centre", agg.get("mean")), kind)
    if agg.get("low") is not None:
        text += f" [{fmt(agg['low'], kind)}, {fmt(agg['high'], kind)}]"
    return text


def brackets_note(summary: schema.Summary) -> str:
    """What the brackets of this comparison's tables are, said once: from the figures'
    own seed counts (a framework with fewer completed seeds is named)."""
    counts = {fw: entry.get("completed", 0)
              for fw, entry in (summary.get("frameworks") or {}).items()}
    n = min(counts.values(), default=0)
    if n >= 3:
        kind = f"{n} seeds per framework: brackets hold the 95% interval"
    elif n == 2:
        kind = "2 seeds per framework: brackets hold the min-max range (too few for an interval)"
    else:
        kind = f"{n} seed(s) per framework: no interval"
    uneven = {fw: c for fw, c in counts.items() if c != max(counts.values(), default=0)}
    extra = "".join(f"; {FRAMEWORK_NAMES.get(fw, fw)} completed {c}" for fw, c in uneven.items())
    return kind + extra + "."


def ratio_text(r: dict | None) -> str:
    if not r or r.get("ratio") is None:
        return "n/a"
    text = fmt(r["ratio"], "x")
    if r.get("low") is not None:
        text += f" [{fmt(r['low'], 'x')}, {fmt(r['high'], 'x')}]"
    return text


def difference_text(diff: dict | None) -> str:
    if not diff or diff.get("mean") is None:
        return "n/a"
    text = f"{100 * diff['mean']:+.2f} pts"
    if diff.get("low") is not None:
        text += f" [{100 * diff['low']:+.2f}, {100 * diff['high']:+.2f}]"
    return text


def verdict_rows(summary: schema.Summary, headline: bool = False) -> list[dict[str, str]]:
    """The side-by-side table, a row per figure (compare.figures): TF, PyTorch, TF vs PyTorch,
    and what the figure is; the headline rows alone with `headline`. A figure shown only when
    measured (time to target) only where a run measured it."""
    f = summary["frameworks"]
    tf, torch = f.get("tf", {}), f.get("torch", {})
    rows = []
    for figure in figures.FIGURES:
        key = figure.key
        if headline and not figure.headline:
            continue
        if figure.only_when_measured and not any((x.get(key) or {}).get("n")
                                                 for x in (tf, torch)):
            continue
        if figure.versus == "difference":
            versus_text = difference_text(summary.get("accuracy_difference"))
        elif figure.versus == "ratio":
            versus_text = ratio_text(summary["ratios"].get(key))
        else:
            versus_text = ""
        rows.append({"figure": figure.label, "tf": with_interval(tf.get(key), figure.unit),
                     "torch": with_interval(torch.get(key), figure.unit),
                     "versus": versus_text, "how": figure.how})
    return rows


def interval_methods(summary: schema.Summary) -> list[str]:
    """How the figures were taken across seeds, each method once: for one framework's
    figures (scale by scale, compare.figures.SCALES) and for the TF-vs-PyTorch ratios and
    differences."""
    by_scale = sorted(figures.FIGURES, key=lambda f: figures.SCALES.index(f.scale))
    entries = [e for fw in (summary.get("frameworks") or {}).values()
               for e in (fw.get(f.key) for f in by_scale) if isinstance(e, dict)]
    found = [e.get("method") for e in entries if e.get("n") and e.get("method")]
    versus = [e.get("method") for e in [*(summary.get("ratios") or {}).values(),
                                        summary.get("accuracy_difference") or {}]
              if isinstance(e, dict) and e.get("n") and e.get("method")]
    return ([f"Each framework: {m}" for m in dict.fromkeys(found)]
            + [f"TF vs PyTorch: {m}" for m in dict.fromkeys(versus)])


def fairness_rows(summary: schema.Summary) -> list[dict[str, str]]:
    """Each setting per framework, and whether the two agree (compared in one convention);
    a setting that names each framework's own machinery (schema.MANIFEST) is marked so."""
    tf, torch = summary["fairness"].get("tf") or {}, summary["fairness"].get("torch") or {}
    rows = []
    for key in dict.fromkeys(list(tf) + list(torch)):
        a, b = plain(tf.get(key)), plain(torch.get(key))
        declared = schema.MANIFEST.get(key)
        if declared is not None and not declared.comparable:
            same = "(implementation)"
        elif isinstance(tf.get(key), dict) and "torch_convention" in tf.get(key, {}):
            same = "yes" if tf[key]["torch_convention"] == (torch.get(key) or {}).get(
                "torch_convention") else "differs"
        else:
            same = "yes" if a == b else "differs"
        rows.append({"setting": key, "tf": a, "torch": b, "same": same})
    return rows


ENVIRONMENT_KEYS = ("hardware", "device_used", "tensorflow", "keras", "torch", "torchvision",
                    "cuda", "cudnn", "gpus", "tf32_default", "mixed_precision", "python",
                    "platform")


def environment_rows(summary: schema.Summary) -> list[dict[str, str]]:
    tf, torch = summary["environment"].get("tf") or {}, summary["environment"].get("torch") or {}
    return [{"key": k, "tf": plain(tf.get(k)) if k in tf else "",
             "torch": plain(torch.get(k)) if k in torch else ""}
            for k in ENVIRONMENT_KEYS if k in tf or k in torch]


def _readable(runs: list[schema.Result]) -> list[schema.Result]:
    return sorted((r for r in runs if not r.get("unreadable")),
                  key=lambda r: (r["framework"], seed_of(r) or 0))


# The figures of a comparison's table of its runs (compare.figures: `in_runs`), in order
RUN_FIGURES = tuple(f for f in figures.FIGURES if f.in_runs)


class RunRow(TypedDict):
    """A run in the comparison's table of its runs."""

    framework: str  # its name
    seed: int | None
    status: str
    epochs: int | str  # "" where the results were not read
    figures: list[str]  # a cell for each of RUN_FIGURES
    error: str
    path: str


def run_rows(runs: list[schema.Result] | None, summary: schema.Summary) -> list[RunRow]:
    """One row per run (from its result; from the summary alone, without figures, where the
    results were not read), then the runs planned but not run; `figures` holds a cell for
    each of RUN_FIGURES."""
    name = lambda fw: FRAMEWORK_NAMES.get(fw) or str(fw)  # noqa: E731
    if runs is None:
        rows: list[RunRow] = [
            {"framework": name(r["framework"]), "seed": r["seed"], "status": r["status"],
             "epochs": "", "figures": [""] * len(RUN_FIGURES),
             "error": r.get("error") or "", "path": r["path"]}
            for r in summary.get("runs") or []]
    else:
        rows = [{"framework": name(r["framework"]), "seed": seed_of(r),
                 "status": r["summary"].status, "epochs": len(r["epochs"]),
                 "figures": [fmt(f.read(r["summary"]), f.unit) for f in RUN_FIGURES],
                 "error": r.get("error") or "", "path": r["path"]} for r in _readable(runs)]
    return rows + [{"framework": name(r["framework"]), "seed": r["seed"], "status": "not run",
                    "epochs": 0, "figures": ["n/a"] * len(RUN_FIGURES),
                    "error": r["reason"], "path": ""} for r in summary.get("not_run") or []]


def tensorboard_root(runs: list[schema.Result] | None) -> str | None:
    """The folder `tensorboard --logdir` overlays every run of the comparison from."""
    for r in runs or []:
        board = (r.get("files") or {}).get("tensorboard")
        if board:
            return board.rsplit("/", 1)[0]
    return None


PHASE_HEADINGS = {"input": "Input", "host_to_device": "Host to device", "forward": "Forward",
                  "backward": "Backward", "all_reduce": "All-reduce", "update": "Update"}


class PhaseRow(TypedDict):
    """A profiled run's step split into its phases (cells: ms and share of the step)."""

    framework: str
    seed: int | None
    error: str  # the profile failed: why
    steps: NotRequired[int]
    clock: NotRequired[str]
    step: NotRequired[str]
    profiler_cost: NotRequired[str]
    device_idle_less_profiler: NotRequired[str]
    other: NotRequired[str]
    device_idle: NotRequired[str]
    input_stall: NotRequired[str]
    files: NotRequired[str]
    notes: NotRequired[str]
    cells: NotRequired[list[str]]  # one per phases.PHASES


def phase_rows(runs: list[schema.Result]) -> list[PhaseRow]:
    """Where a step's time goes, per run with a phase profile (compare.run.phases): each
    phase's milliseconds per profiled step and share of the step, the rest, and on a GPU the
    device's idle time."""
    rows = []
    for r in _readable(runs):
        profile = r.get("profile") or {}
        if not {"phases_ms", "error"} & set(profile):
            continue
        row: PhaseRow = {"framework": FRAMEWORK_NAMES.get(r["framework"], r["framework"]),
                         "seed": seed_of(r), "error": profile.get("error") or ""}
        if "phases_ms" in profile:
            share = phases.shares(profile)

            def cell(name: str, ms: float | None) -> str:
                if ms is None:
                    return "n/a"
                return fmt(ms, "ms") + (f" ({share[name]:.0%})" if share[name] is not None
                                        else "")
            cost = phases.profiler_cost(profile["step_ms"],
                                        r["summary"].steady_step_time_ms.median,
                                        profile["device_idle_ms"])
            row.update({"steps": profile["steps"], "clock": profile["clock"],
                        "step": fmt(profile["step_ms"], "ms"),
                        "profiler_cost": ("n/a" if cost["slowdown"] is None
                                          else f"{cost['slowdown']:.2f}x"),
                        "device_idle_less_profiler": (
                            "n/a" if cost["device_idle_less_profiler"] is None
                            else f"{cost['device_idle_less_profiler']:.0%}"),
                        "other": cell("other", profile["other_ms"]),
                        "device_idle": cell("device_idle", profile["device_idle_ms"]),
                        "input_stall": cell("input_stall", profile["input_stall_ms"]),
                        "files": profile.get("files") or "",
                        "notes": "; ".join(profile.get("notes") or []),
                        "cells": [cell(name, profile["phases_ms"].get(name))
                                  for name in phases.PHASES]})
        rows.append(row)
    return rows


def kernel_runs(runs: list[schema.Result]) -> list[tuple[str, int | None, KernelSplit, float]]:
    """(framework name, seed, kernel table, profiled step in ms) of each run whose profile
    read the GPU's kernels (compare.run.kernels)."""
    found = []
    for r in _readable(runs):
        profile = r.get("profile") or {}
        if profile.get("kernels"):
            found.append((FRAMEWORK_NAMES.get(r["framework"], r["framework"]), seed_of(r),
                          profile["kernels"], profile["step_ms"]))
    return found


class ProcessRow(TypedDict):
    """One process of a multi-process run: its own steady-state clock."""

    framework: str
    seed: int | None
    rank: int
    where: str
    train_time: str
    input_wait: str
    step_ms: str


def process_rows(runs: list[schema.Result]) -> list[ProcessRow]:
    """Multi-process runs (DDP, MultiWorkerMirroredStrategy, several machines): each
    process's own steady-state clock, from the run's summary."""
    rows: list[ProcessRow] = []
    for r in _readable(runs):
        manifest = r.get("fairness") or {}
        for p in r["summary"].processes or []:
            rows.append({"framework": FRAMEWORK_NAMES.get(r["framework"], r["framework"]),
                         "seed": seed_of(r), "rank": p.rank,
                         "where": f"{manifest.get('nodes', 1)} machine(s), "
                                  f"{manifest.get('launcher', '')}",
                         "train_time": fmt(p.train_time_s, "s"),
                         "input_wait": fmt(p.input_wait_fraction, "pct"),
                         "step_ms": fmt(p.median_step_ms, "ms")})
    return rows


def compile_cell(summary: schema.Summary) -> str:
    """Each framework's compile state in the overview's few words: 'TF with XLA (default);
    PyTorch with torch.compile (above default)'."""
    states = defaults.states(summary)
    if not states:
        return "not recorded"
    cells = []
    for fw in FRAMEWORKS:
        if fw not in states:
            continue
        state = states[fw]
        where = ("default" if state.is_default else
                 "below default" if state.below_default else "above default")
        cells.append(f"{SHORT_NAMES[fw]} {state.how()} ({where})")
    return "; ".join(cells)


def defaults_cell(summary: schema.Summary) -> str:
    """TF / PyTorch training time with each framework at its own defaults: the defaults runs'
    ratio, the matched one where every framework ran at its default, else why it is missing."""
    states = defaults.states(summary).values()
    beside = summary.get("defaults")
    if beside:
        return ratio_text(beside.get("time_ratio"))
    if len(states) < 2:
        return "n/a"
    if all(s.is_default for s in states):
        return "as matched"
    return "not run"


SHORT_NAMES = {"tf": "TF", "torch": "PyTorch"}  # as the overview's column heads name them


def overview_row(summary: schema.Summary, source: str) -> dict[str, str]:
    """One line of the cross-machine table."""
    f = summary["frameworks"]
    machine = summary.get("machine") or machine_of(summary.get("environment") or {})
    return {"device": machine["device"], "host": machine["host"],
            "precision": precision_label(summary) or "?",
            "model": f"{(summary.get('model') or {}).get('name', '?')} on "
                     f"{(summary.get('data') or {}).get('source', '?')}",
            "seeds": str(len(summary.get("seeds") or [])),
            "tf_time": with_interval(f.get("tf", {}).get(TRAIN_TIME.key), "s"),
            "torch_time": with_interval(f.get("torch", {}).get(TRAIN_TIME.key), "s"),
            "time_ratio": ratio_text(summary["ratios"].get(TRAIN_TIME.key)),
            "compile": compile_cell(summary),
            "defaults_ratio": defaults_cell(summary),
            "tf_accuracy": with_interval(f.get("tf", {}).get(FINAL_ACCURACY.key), "acc"),
            "torch_accuracy": with_interval(f.get("torch", {}).get(FINAL_ACCURACY.key),
                                            "acc"),
            "source": source}
