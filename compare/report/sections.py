"""Each section of the report, declared once: its title, what it explains, its table's columns
and rows, its notes and figures. compare.report.render writes the same description as
Markdown (report.md) and as HTML (report.html, long sections folded).

The page opens with the verdict, the headline table and the headline figure (test accuracy
against training time); every other section follows, folded in the HTML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compare import schema
from compare.experiment.compile_state import CompileState
from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS
from compare.experiment.parity_record import GATED, Figure, TimedDrift
from compare.figures import TRAIN_TIME
from compare.report import defaults, plots, tables
from compare.report import own_loops as own_loop_words
from compare.report.labels import machine_of, precision_label
from compare.report.verdict import behaviour_notes, phase_clocks_differ
from compare.run import kernels, phases

TF, TORCH = FRAMEWORK_NAMES["tf"], FRAMEWORK_NAMES["torch"]


@dataclass
class Group:
    """One comparison to show: its summary, and its runs when read from result files."""

    summary: schema.Summary
    runs: list[schema.Result] | None = None  # None: read from a summary.json
    source: str = ""

    @property
    def machine(self) -> schema.MachineIdentity:
        return self.summary.get("machine") or machine_of(self.summary.get("environment") or {})

    @property
    def label(self) -> str:
        return (f"{self.machine.get('named') or self.machine['device']}, "
                f"{precision_label(self.summary) or '?'}")


@dataclass
class Section:
    key: str  # the anchor: "<key>-<group index>"
    title: str
    intro: str = ""  # Markdown
    columns: tuple[str, ...] = ()
    rows: list[list[Any]] = field(default_factory=list)
    notes: str = ""  # Markdown after the table
    items: list[str] = field(default_factory=list)  # bullet points after the notes, Markdown
    figures: list[str] = field(default_factory=list)  # inline SVG (the HTML page)
    figures_elsewhere: str = ""  # what report.md says in their place
    code: str | None = None  # a block of text to copy (a command)
    folded: bool = True  # the HTML shows the title and unfolds the rest on a click
    side_by_side: bool = False  # the HTML sets the table and the figures beside each other


SEEDS_NOTE = ("Each figure is the centre over completed seeds (geometric mean for times, sizes "
              "and rates; mean for accuracies and fractions), then its interval in brackets "
              "(how each figure is measured says how). Ratios are TF / PyTorch, paired by "
              "seed: above 1, TensorFlow took longer (times) or did more (rates). Accuracy: "
              "TF - PyTorch in percentage points (pts). ")
FIGURE_COLUMNS = ("Figure", TF, TORCH, "TF vs PyTorch")


def headline(g: Group) -> Section:
    rows = [[r["figure"], r["tf"], r["torch"], r["versus"]]
            for r in tables.verdict_rows(g.summary, headline=True)
            if (r["tf"], r["torch"]) != ("n/a", "n/a")]  # e.g. memory and energy on a CPU
    figure = [plots.headline(g.runs)] if g.runs else []
    below = "".join(f" {FRAMEWORK_NAMES[s.framework]} ran below its own default: {s.how()}"
                    f"{s.default_words()} (the compile states below give each framework at its "
                    f"defaults)." for s in defaults.below_default(g.summary))
    return Section("figures", "Side by side", columns=FIGURE_COLUMNS, rows=rows,
                   notes=SEEDS_NOTE + tables.brackets_note(g.summary) + below,
                   figures=figure, figures_elsewhere=("Test accuracy against training time is "
                                                      "plotted in report.html." if figure else ""),
                   folded=False, side_by_side=True)


def all_figures(g: Group) -> Section:
    rows = [[r["figure"], r["tf"], r["torch"], r["versus"]]
            for r in tables.verdict_rows(g.summary)]
    return Section("all-figures", "Every figure", columns=FIGURE_COLUMNS, rows=rows)


def own_loops(g: Group) -> Section | None:
    own = g.summary.get("own_loops")
    if not own:
        return None
    rows = [[FRAMEWORK_NAMES[fw], e["loop"], "; ".join(e.get("trained") or []),
             tables.fmt(e["shared_time_s"], "s"),
             tables.fmt(e["own_time_s"], "s"), tables.ratio_text(e["time_ratio"]),
             f"{tables.fmt(e['shared_accuracy'], 'acc')} / "
             f"{tables.fmt(e['own_accuracy'], 'acc')}", _g3(e['loss_difference'])]
            for fw, e in ((fw, own.get(fw)) for fw in FRAMEWORKS) if e]
    return Section("own-loops", "The shared loop against each framework's own loop",
                   "Each framework also trained every seed with its own loop (Keras compile + "
                   "fit; the plain PyTorch loop) on the same model, initial weights, batches, "
                   "recipe, precision, distribution and compile state (Keras' fit with the "
                   "run's jit_compile, not \"auto\"). Times are training after the first "
                   f"epoch; shared / own is the ratio of the {own_loop_words.measure(g.summary)}"
                   " (paired by seed; above 1, the shared loop was slower).",
                   ("Framework", "Own loop", "Trained", "Shared loop", "Own loop time",
                    "Shared / own",
                    "Final accuracy (shared / own)", "First-epoch loss, max rel. difference"),
                   rows, notes=f"A shared / own ratio above {own['caveat_ratio']:.2f} is a "
                   "fairness caveat in the verdict.", folded=False)


def compile_states(g: Group) -> Section | None:
    """Each framework's compile state in the matched runs, at its own defaults and at its own
    best, each with its TF / PyTorch training-time ratio: which ratio holds a framework below
    its own default is read here."""
    summary = g.summary
    rungs = [("matched", {fw: state.to_dict() for fw, state in defaults.states(summary).items()},
              (summary.get("ratios") or {}).get(TRAIN_TIME.key))]
    for name, rung in (("each at its own defaults", summary.get("defaults")),
                       ("each at its own best (--best)", summary.get("best"))):
        if rung:
            rungs.append((name, rung.get("compile_states") or {}, rung.get("time_ratio")))
    if not rungs[0][1]:  # results written before compile states were recorded
        return None

    def said(record: dict | None) -> str:
        if not record:
            return "n/a"
        state = CompileState.from_dict(record)
        return state.how() + state.default_words()
    rows = [[name, said(states.get("tf")), said(states.get("torch")), tables.ratio_text(ratio)]
            for name, states, ratio in rungs]
    return Section("compile", "Compile states: matched, at each framework's defaults, at its best",
                   "What each framework compiled its training step with (XLA; torch.compile) "
                   "and whether that is the framework's own default on this device (Keras' "
                   "jit_compile=\"auto\" compiles with XLA on a GPU without a distribution "
                   "strategy, not on a CPU; PyTorch runs eagerly). On a GPU, where the matched "
                   "runs hold a framework below its default, that framework also trained at "
                   "its default" + (f" ([the defaults report]({beside['report']}))"
                                    if (beside := summary.get("defaults")) else "") + ".",
                   ("Runs", TF, TORCH, "TF / PyTorch training time"), rows, folded=False)


def best_settings(g: Group) -> Section | None:
    best = g.summary.get("best")
    if not best:
        return None
    differ = "".join(f"\n- {d['setting']}: {TF} {d['tf']}; {TORCH} {d['torch']}"
                     for d in best["settings_differ"])
    rows = [[FRAMEWORK_NAMES[a["framework"]], a["setting"], a["value"], a["source"]]
            for a in best["advice"]]
    return Section("best", "Each framework at its own best",
                   f"Beside the matched runs, each framework also trained at the settings its "
                   f"own performance guide recommends for this device: TF / PyTorch training "
                   f"time {tables.ratio_text(best['time_ratio'])} best against best "
                   f"([the best-settings report]({best['report']})). The settings in which the "
                   f"two best runs differ, from their manifests:" + (differ or " none."),
                   ("Framework", "Setting", "Value", "Source"), rows)


def methods(g: Group) -> Section:
    summary = g.summary
    named: dict[str, list[str]] = {}  # each definition once, with every figure it defines
    for r in tables.verdict_rows(summary):
        named.setdefault(r["how"], []).append(r["figure"])
    items = [f"**{', '.join(figures)}**: {how}." for how, figures in named.items()]
    if summary.get("accuracy_equivalence"):
        items.append(f"**Accuracy equivalence**: {summary['accuracy_equivalence']['method']}.")
    across = "; ".join(tables.interval_methods(summary))
    return Section("how", "How each figure is measured", items=items,
                   intro=f"Across seeds: {across}." if across else "")


def curves(g: Group) -> Section:
    if g.runs is None:
        return Section("curves", "Learning curves and step times",
                       intro=f"Read from `{g.source}`: a summary holds no per-step files, "
                             "so there are no plots for it.")
    drawn = plots.plots(g.runs)
    return Section(
        "curves", "Learning curves and step times",
        intro="Training loss: each run's per-step loss (steps.csv) as an exponential moving "
              "average over about a tenth of an epoch, the raw steps faint behind; colour: "
              "framework, line style: seed. Step times: every synchronised timing window of "
              "the epochs after the first (windows.csv), seeds pooled per framework; the box "
              "spans the middle half with the median. Time breakdown: the first epoch's "
              "training time (warm-up), the rest, the input wait (all epochs), the evaluation.",
        figures=[drawn["curves"], drawn["step_times"], drawn["breakdown"]],
        figures_elsewhere="The learning curves, the step-time distribution and the time "
                          "breakdown are plotted in report.html.")


def runs(g: Group) -> Section:
    rows = [[r["framework"], r["seed"], r["status"], r["epochs"], *r["figures"], r["error"],
             f"`{r['path']}`" if r["path"] else ""]
            for r in tables.run_rows(g.runs, g.summary)]
    board = tables.tensorboard_root(g.runs)
    return Section("runs", "Runs", columns=(
        "Framework", "Seed", "Status", "Epochs", *(f.label for f in tables.RUN_FIGURES),
        "Error", "Result"), rows=rows,
        notes=(f"TensorBoard (loss, learning rate, step time, img/s, test accuracy; the same "
               f"tags in both frameworks): `tensorboard --logdir {board}`" if board else ""))


def processes(g: Group) -> Section | None:
    rows = [[p["framework"], p["seed"], p["rank"], p["where"], p["train_time"],
             p["input_wait"], p["step_ms"]] for p in tables.process_rows(g.runs or [])]
    if not rows:
        return None
    return Section("processes", "Each process's own clock",
                   columns=("Framework", "Seed", "Rank", "Where", "Training time",
                            "Input wait", "Median step"), rows=rows,
                   notes="Multi-process runs: each process's clock over the steady epochs; the "
                         "slowest sets the pace of all.")


def phase_split(g: Group) -> Section | None:
    found = tables.phase_rows(g.runs or [])
    if not found:
        return None
    columns = ("Framework", "Seed", "Clock", "Steps", "Step",
               *(tables.PHASE_HEADINGS[k] for k in phases.PHASES), "Other", "Device idle",
               "Input stall", "Profiler's cost", "Device idle less the profiler's time")
    rows = []
    for p in found:
        if p["error"]:
            rows.append([p["framework"], p["seed"], f"profile failed: {p['error']}"]
                        + [""] * (len(columns) - 3))
        else:
            rows.append([p["framework"], p["seed"], p["clock"], p["steps"], p["step"],
                         *p["cells"], p["other"], p["device_idle"], p["input_stall"],
                         p["profiler_cost"], p["device_idle_less_profiler"]])
    legend = " ".join(f"**{tables.PHASE_HEADINGS[k]}**: {v}." for k, v in phases.PHASES.items())
    traces = "; ".join(f"{p['framework']} seed {p['seed']}: `{p['files']}`"
                       + (f" ({p['notes']})" if p["notes"] else "")
                       for p in found if p.get("files"))
    clocks = phase_clocks_differ(g.runs or [])
    return Section(
        "phases", "Where a step's time goes",
        "From each framework's own profiler, on `--profile` steps trained after the last "
        "epoch of its first seed (they count in no other figure; the profiler slows them, "
        "so read the shares more than the milliseconds). Each phase: the time in which at "
        "least one of its operations ran, per step, and its share of the profiled step. "
        "Phases can overlap "
        "(DDP all-reduces while the backward pass runs), so they need not add up; \"Other\" is "
        "the time in which none ran. Clock \"device\": kernels and copies on GPU 0; \"host\": "
        "the host's work (CPU runs, where the host computes)."
        + (f"\n\n**{clocks}**" if clocks else ""),
        columns, rows,
        notes=f"{legend} **Device idle** (GPU): the device ran nothing. **Input stall**: the "
              "device computed nothing because the step was still waiting for its batch (GPU: "
              "device idle inside the input phase; CPU: the input phase), the same in both "
              "frameworks. **Profiler's cost**: the profiled step over the run's own "
              "unprofiled median step; the profiler slows the frameworks unequally (it works "
              "on the host, between a framework's launches), so compare the idle shares "
              "**less the profiler's time**: the device's idle time less what the profiler "
              "added, over the unprofiled step (an estimate). Traces (TensorFlow: "
              "`tensorboard --logdir FOLDER`, profile tab; "
              f"PyTorch: the .json in ui.perfetto.dev): {traces or 'none kept'}.")


def kernel_families(g: Group) -> Section | None:
    found = tables.kernel_runs(g.runs or [])
    if not found:
        return None
    present = [kind for kind in kernels.FAMILIES
               if any(table["families_ms"].get(kind) for _, _, table, _ in found)]

    def cell(ms: float | None, step_ms: float) -> str:
        return "" if not ms else f"{tables.fmt(ms, 'ms')} ({ms / step_ms:.0%})"
    rows = [[name, seed, tables.fmt(step_ms, "ms"), cell(table["total_ms"], step_ms),
             f"{table['launches']:.0f}", *(cell(table["families_ms"].get(kind), step_ms)
                                           for kind in present)]
            for name, seed, table, step_ms in found]
    return Section(
        "kernels", "What the GPU ran, by kind of kernel",
        "The kernels and copies on GPU 0 during the profiled steps (above), per step, each "
        "kind's time and its share of the profiled step, read from each framework's own "
        "profiler. The kind comes from a kernel's name: generated kernels (torch.compile's "
        "Triton kernels, XLA's fusions) by what they do, whatever ops they fuse; library "
        "kernels (cuDNN, cuBLAS, the framework's own) by the operation they name. Durations "
        "add up even where kernels overlap on several streams.",
        ("Framework", "Seed", "Step", "All kernels", "Launches", *present), rows)


def top_kernels(g: Group) -> Section | None:
    found = tables.kernel_runs(g.runs or [])
    if not found:
        return None
    rows = [[name, seed, rank, f"`{k['name']}`", k["family"], tables.fmt(k["ms"], "ms"),
             f"{k['calls']:g}", f"{k['share']:.1%}"]
            for name, seed, table, _ in found
            for rank, k in enumerate(table["top"], start=1)]
    return Section("top-kernels", "The longest kernels",
                   f"Per run, the {kernels.TOP_KERNELS} kernels with the longest total time per "
                   "profiled step, by name.",
                   ("Framework", "Seed", "Rank", "Kernel", "Kind", "Per step", "Launches",
                    "Share of step"), rows)


def parity(g: Group) -> Section:
    record = g.summary.get("parity")
    if not record:
        return Section("parity", "Parity check",
                       "No parity check was recorded for these runs.")
    if record.get("error"):
        return Section("parity", "Parity check",
                       f"**COULD NOT RUN**: {record['error']}. The builds were not compared: "
                       f"the failure is the framework's or the device's, named above.")
    verdict = "PASSED" if record.get("passed") else "FAILED"
    compute = record.get("precision", "float32")
    tolerances = record.get("tolerances") or {}
    timed: TimedDrift | None = record.get("timed_configuration")
    figures: dict[Figure, float] = (timed.get("figures") if timed else None) or {}
    floor: dict[Figure, float] = (timed.get("noise_floor") if timed else None) or {}
    drift = (timed.get("configuration") or {}).get("device", "") if timed else ""
    rows = [[key, _g3(record.get(key)), _g3(tolerances.get(key)), _g3(figures.get(key)),
             _g3(floor.get(key))] for key in GATED]
    fallback = (f" Float64 could not run ({record['float64_unsupported']}): the gate is "
                f"float32 against its noise floor." if record.get("float64_unsupported") else "")
    said_drift = ("" if not timed else
                  f" The timed configuration ({drift}) could not be probed: {timed['error']}."
                  if timed.get("error") else
                  f" The timed configuration ({drift}) drifts "
                  f"{'within' if timed.get('agrees') else 'OUTSIDE'} the frameworks' own "
                  f"run-to-run drift (measured, not gated).")
    beside = (f" It ran once, for the comparison's matched runs; these are {record['runs']}. "
              f"Its {compute} gate checks the model, the loss and the update, which these "
              f"runs' settings leave as they are; its timed configuration is the matched "
              f"runs'." if record.get("runs") else "")
    return Section(
        "parity", "Parity check",
        f"**{verdict}** (the {compute} gate).{fallback}{beside} How: "
        f"{record.get('method', '')}.{said_drift}",
        ("Check", f"Gate ({compute})", "Limit", "Timed: TF vs PyTorch", "Own drift (floor)"),
        rows, items=list(record.get("conventions") or []),
        notes=PARITY_NOTES + (" Conventions that differ by design:"
                              if record.get("conventions") else ""))


PARITY_NOTES = (
    "grad_max_rel_diff: the largest per-weight relative L2 difference of the step-0 gradients. "
    "params_rel_update_diff_after_steps: how far the two builds' weight updates differ, "
    "relative to the update (L2 over all trainable weights); bn_running_stats_max_rel_diff: the "
    "same for BatchNorm's running statistics. In float64 rounding stays below 1e-9, so a figure "
    "over its limit is a difference of meaning. The timed configuration (its precision on its "
    "device) is measured beside it: TF against PyTorch, and each framework against itself with "
    "every initial weight moved by one ulp (the larger floor shown).")


def _g3(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def fairness(g: Group) -> Section:
    rows = [[r["setting"], r["tf"], r["torch"], r["same"]]
            for r in tables.fairness_rows(g.summary)]
    notes = behaviour_notes(g.summary)
    return Section("fairness", "Fairness manifest",
                   "Every setting as each framework ran it; \"(implementation)\" marks each "
                   "framework's own machinery, which reads differently by nature.",
                   ("Setting", TF, TORCH, "Same?"), rows,
                   items=notes, notes="Each framework's own behaviour, which no setting "
                                      "changes:" if notes else "")


def environment(g: Group) -> Section:
    rows = [[r["key"], r["tf"], r["torch"]] for r in tables.environment_rows(g.summary)]
    return Section("environment", "Environment", columns=("", TF, TORCH), rows=rows)


def replay(g: Group) -> Section:
    return Section("replay", "Replay", code=g.summary.get("command")
                   or "(command not recorded)")


# The sections of a comparison, in page order; a builder may give None (nothing to show).
SECTIONS = (headline, compile_states, own_loops, best_settings, all_figures, methods, curves, runs,
            processes, phase_split, kernel_families, top_kernels, parity, fairness, environment,
            replay)


def of_group(g: Group) -> list[Section]:
    return [s for s in (build(g) for build in SECTIONS) if s is not None]
