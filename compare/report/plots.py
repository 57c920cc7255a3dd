"""The report's figures, as inline SVG: test accuracy against training time (the headline),
learning curves, the steady step-time distribution and the time breakdown."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from compare import files, schema
from compare.experiment.config import FRAMEWORK_NAMES
from compare.experiment.frameworks import FRAMEWORKS
from compare.report.labels import seed_of

if TYPE_CHECKING:  # annotations only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLOURS = {"tf": "#e8710a", "torch": "#1f5fbf"}


def svg(fig: Figure) -> str:
    """An inline <svg> element (no XML prolog, no DOCTYPE: nothing that points outside)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def smooth(values: np.ndarray, steps_per_epoch: int) -> np.ndarray:
    """Exponential moving average, span about a tenth of an epoch (at least 5 steps), started
    at the first value so the curve does not rise from zero."""
    from scipy.signal import lfilter
    span = max(5, steps_per_epoch // 10)
    alpha = 2 / (span + 1)
    smoothed, _ = lfilter([alpha], [1, alpha - 1], values, zi=[values[0] * (1 - alpha)])
    return smoothed


def window_step_ms(run: schema.Result) -> np.ndarray:
    """Per-step time of each steady-state timing window, ms: epochs after the first (a
    one-epoch run: its windows after the first), as steady_step_time_ms is measured."""
    windows = files.read_csv(files.RunDir(Path(run["path"]).parent).windows)
    if not windows or not len(windows.get("epoch", [])):
        return np.array([])
    later = windows["epoch"] > windows["epoch"].min()
    if not later.any():
        later = np.arange(len(windows["epoch"])) > 0
    return 1000 * windows["seconds"][later] / windows["steps"][later]


def matplotlib_agg() -> None:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable


def plots(runs: list[schema.Result]) -> dict[str, str]:
    """Learning curves, steady step times and the time breakdown as inline SVG strings."""
    matplotlib_agg()
    runs = [r for r in runs if not r.get("unreadable")]
    return {"curves": svg(_curves_figure(runs)), "step_times": svg(_step_time_figure(runs)),
            "breakdown": svg(_breakdown_figure(runs))}


def headline(runs: list[schema.Result]) -> str:
    """The answer in one figure: each run's test accuracy after every epoch against its
    cumulative training time; up and to the left is better."""
    matplotlib_agg()
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    draw_headline(ax, runs)
    return svg(fig)


def draw_headline(ax: Axes, runs: list[schema.Result]) -> None:
    """The headline figure on the axes `ax` (the report's, and the README's picture)."""
    runs = [r for r in runs if not r.get("unreadable") and r["epochs"]]
    dashes = ("-", "--", ":", "-.")
    seeds = sorted({seed for r in runs if (seed := seed_of(r)) is not None})
    for run in sorted(runs, key=lambda r: (r["framework"], seed_of(r) or 0)):
        fw, seed = run["framework"], seed_of(run)
        elapsed = np.cumsum(schema.epoch_seconds(run))
        ax.plot(elapsed, [e["test_accuracy"] for e in run["epochs"]], marker="o", markersize=3,
                color=COLOURS[fw], linestyle=dashes[seeds.index(seed) % 4] if seed in seeds
                else "-", label=f"{FRAMEWORK_NAMES[fw]} seed {seed}")
    ax.set_xlabel("cumulative training time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title("test accuracy against training time (up and left is better)", fontsize=10)
    ax.grid(alpha=0.3)
    if runs:
        ax.legend(fontsize=8, loc="lower right")


def _curves_figure(runs: list[schema.Result]) -> Figure:
    """Per-step training loss (EMA), test accuracy against time and per epoch, test loss."""
    import matplotlib.pyplot as plt
    dashes = ("-", "--", ":", "-.")  # one line style per seed, one colour per framework
    seeds = sorted({seed for r in runs if (seed := seed_of(r)) is not None})
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    loss_ax, time_ax, epoch_ax, test_loss_ax = axes.flat
    for run in sorted(runs, key=lambda r: (r["framework"], seed_of(r) or 0)):
        fw = run["framework"]
        # TF wide underneath, PyTorch narrow on top: identical curves (fp32 parity) stay visible.
        seed = seed_of(run)
        style = {"color": COLOURS[fw], "linestyle": dashes[seeds.index(seed) % len(dashes)]
                 if seed is not None and seed in seeds else "-",
                 "linewidth": 2.6 if fw == "tf" else 1.2, "zorder": 2 if fw == "tf" else 3,
                 "label": f"{FRAMEWORK_NAMES[fw]} seed {seed_of(run)}"}
        steps = files.read_csv(files.RunDir(Path(run["path"]).parent).steps)
        if steps and len(steps.get("loss", [])):
            per_epoch = max(1, int(len(steps["loss"]) / max(1, steps["epoch"].max())))
            loss_ax.plot(steps["global_step"], steps["loss"], color=COLOURS[fw], alpha=0.08,
                         linewidth=0.6)
            loss_ax.plot(steps["global_step"], smooth(steps["loss"], per_epoch), **style)
        if not run["epochs"]:
            continue
        marked = {**style, "marker": "o", "markersize": 3}
        epochs = [e["epoch"] for e in run["epochs"]]
        elapsed = np.cumsum(schema.epoch_seconds(run))
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


def _step_time_figure(runs: list[schema.Result]) -> Figure:
    """Every steady-state window's ms per step, a box per framework with the windows drawn."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, ax = plt.subplots(figsize=(8, 2.8))
    samples = {fw: np.concatenate([window_step_ms(r) for r in runs if r["framework"] == fw]
                                  or [np.array([])]) for fw in FRAMEWORKS}
    present = [fw for fw in FRAMEWORKS if len(samples[fw])]
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


def _breakdown_figure(runs: list[schema.Result]) -> Figure:
    """Mean seconds per framework: warm-up, later epochs, input wait, evaluation."""
    import matplotlib.pyplot as plt
    parts = ("warm-up (epoch 1)", "later epochs", "input wait", "evaluation")
    colours = ("#bbbbbb", "#4c9a2a", "#d62728", "#9467bd")
    fig, ax = plt.subplots(figsize=(8, 2.6))
    names = []
    for row, fw in enumerate(FRAMEWORKS):
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


def _breakdown(run: schema.Result) -> tuple[float, float, float, float]:
    """(first epoch, later epochs, input wait, evaluation) seconds; the two training parts
    exclude the input wait, which is counted over all epochs."""
    parts = schema.epoch_parts(run)
    first = parts[0][0] - parts[0][1]
    later = sum(train - wait for train, wait, _ in parts[1:])
    return first, later, sum(wait for _, wait, _ in parts), sum(e for _, _, e in parts)
