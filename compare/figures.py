"""Every figure a comparison reports, declared once: its name in summary.json, its row in the
report, its unit, what it means and how it is measured, how it is read from a run's summary,
the scale it is aggregated on across seeds, whether TF and PyTorch are set side by side as a
ratio or a difference, whether it opens the report, and whether the tables of runs (a
comparison's, a sweep's) show it.

The rest is derived: compare.schema files the definitions under MEASUREMENT (copied into
every result), compare.report.aggregate aggregates each figure on its scale and pairs the
ratios, compare.report.tables prints the rows, `python -m compare.cli.docs` the table in
docs/measurement.md. A new figure is one `Figure` in FIGURES plus the code in
compare/run/summary.py that computes the summary field it reads (a field of
compare.records.RunSummary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:  # the record is read by attribute; this module imports nothing to run
    from compare.records import RunSummary

# How a figure is aggregated over seeds (compare.report.stats): "accuracy" on the logit scale
# with the test set's binomial variance; "positive" on the log scale (geometric mean);
# "fraction" on the logit scale from the seeds alone. The report names their methods in this
# order.
Scale = Literal["accuracy", "positive", "fraction"]
SCALES: tuple[str, ...] = get_args(Scale)
# TF against PyTorch: "ratio" (TF / PyTorch, paired by seed, under summary.json's `ratios`),
# "difference" (TF - PyTorch, paired by seed: `accuracy_difference`), or None (not compared).
Versus = Literal["ratio", "difference"] | None


@dataclass(frozen=True)
class Read:
    """Where a figure is in a run's summary (compare.records.RunSummary): the field `key`, or
    the entry `part` of it, less the field `less`; None where the run completed fewer than
    `min_epochs` epochs or a field is null."""

    key: str
    part: str | None = None
    less: str | None = None
    min_epochs: int = 0

    def __call__(self, summary: RunSummary) -> Any:
        if self.min_epochs and summary.epochs_completed < self.min_epochs:
            return None
        value = getattr(summary, self.key)
        if self.part is not None and value is not None:
            value = getattr(value, self.part)
        if self.less is not None and value is not None:
            less = getattr(summary, self.less)
            value = value - less if less is not None else None
        return value

    @property
    def keys(self) -> tuple[str, ...]:
        """The summary fields it reads."""
        return (self.key,) if self.less is None else (self.key, self.less)


@dataclass(frozen=True)
class Figure:
    """One reported figure."""

    key: str  # its name in summary.json: per framework, and under `ratios` when a ratio
    label: str  # its row in the report's tables
    unit: str  # how it is printed: a kind of compare.report.tables.FORMATS
    measured: str  # the name of its definition in MEASUREMENT (figures measured alike share it)
    how: str  # the definition: what it means and how it is measured
    read: Read
    scale: Scale
    versus: Versus = None
    headline: bool = False  # also in the table that opens the report
    only_when_measured: bool = False  # its row appears only where a run measured it
    in_sweep: bool = False  # also a column of a sweep's table of runs (one run a row)
    in_runs: bool = False  # also a column of a comparison's table of its runs


STEP_TIME_HOW = ("median and p90 over synchronised timing windows (time of the window / its "
             "steps), epochs after the first (after a resume, also after the first of each "
             "session: it warms up again); a one-epoch run uses its windows after the first. A "
             "window holds whole calls of `steps_per_call` steps and lasts about "
             "`window_target_s` or an eighth of an epoch, the shorter (sized from the first "
             "epoch's calls), or `timing_window` steps when that is set; `steps_per_window` is "
             "the median steps of the windows used")
ACCURACY_HOW = "fraction of the test set classified correctly (0..1)"

# Each figure, by the name code reads it under.
TRAIN_TIME = Figure(
    "train_time_s", "Training time", "s", "train_time_s",
    "sum of per-epoch training times; each epoch timed from a device synchronisation "
    "before its first step to one after its last step",
    Read("train_time_s", min_epochs=1), "positive", "ratio", headline=True, in_sweep=True,
    in_runs=True)
THROUGHPUT = Figure(
    "images_per_s", "Throughput", "ips", "images_per_s",
    "images trained / training time, over all replicas, epochs after the first of each "
    "session (the only epoch for a one-epoch run)",
    Read("images_per_s"), "positive", "ratio", headline=True, in_sweep=True, in_runs=True)
STEP_TIME = Figure(
    "steady_step_time_ms", "Steady step time (median)", "ms", "steady_step_time_ms",
    STEP_TIME_HOW, Read("steady_step_time_ms", part="median"), "positive", "ratio",
    headline=True, in_sweep=True)
STEP_TIME_P90 = Figure(
    "steady_step_time_p90_ms", "Steady step time (p90)", "ms", "steady_step_time_ms",
    STEP_TIME_HOW, Read("steady_step_time_ms", part="p90"), "positive")
WARMUP_TIME = Figure(
    "warmup_time_s", "Start-up (first epoch)", "s", "warmup_time_s",
    "training time of the first epoch (tracing, XLA/torch.compile, cuDNN autotuning, "
    "allocator growth all land there)",
    Read("warmup_time_s"), "positive", "ratio")
STARTUP_OVERHEAD = Figure(
    "startup_overhead_s", "Start-up overhead (first epoch beyond its steps)", "s",
    "startup_overhead_s",
    "the first epoch's training time less its steps at the steady median step time: what "
    "compiling, tracing, autotuning and allocator growth cost, the same way for both "
    "frameworks on the run's own clock (result.json's compilation.cache adds what each "
    "compiler reports of its own work and caches); runs of two epochs or more",
    Read("startup_overhead_s", min_epochs=2), "positive", "ratio")
STEADY_TRAIN_TIME = Figure(
    "steady_train_time_s", "Steady training (after the first epoch)", "s",
    "steady_train_time_s",
    "training time of the epochs after the first (train_time_s less warmup_time_s): "
    "steady training, start-up apart",
    Read("train_time_s", less="warmup_time_s", min_epochs=2), "positive", "ratio")
INPUT_WAIT = Figure(
    "input_wait_fraction", "Input wait", "pct", "input_wait_fraction",
    "time the training steps blocked waiting for their next batch / training time, "
    "same epochs as images_per_s. Timed where each framework takes its batches: "
    "PyTorch on the host clock around next() on its loader; TensorFlow inside its step "
    "function (tf.timestamp before and after the iterator's get_next, which runs in the "
    "graph: no host next() to time)",
    Read("input_wait_fraction"), "fraction", in_sweep=True)
EVAL_TIME = Figure(
    "eval_time_s", "Evaluation time", "s", "eval_time_s",
    "test-set pass after each epoch, timed apart, synchronised at both ends",
    Read("eval_time_s", min_epochs=1), "positive")
TIME_TO_RESULT = Figure(
    "time_to_result_s", "Time to result (training and evaluation)", "s", "time_to_result_s",
    "training time plus every evaluation's, the first evaluation's tracing and compilation "
    "included (TensorFlow compiles its evaluation step apart from its training step): what a "
    "user waits for, start-up included",
    Read("time_to_result_s", min_epochs=1), "positive", "ratio")
FINAL_ACCURACY = Figure(
    "final_test_accuracy", "Final test accuracy", "acc", "test_accuracy", ACCURACY_HOW,
    Read("final_test_accuracy"), "accuracy", "difference", headline=True, in_sweep=True,
    in_runs=True)
BEST_ACCURACY = Figure(
    "best_test_accuracy", "Best test accuracy", "acc", "test_accuracy", ACCURACY_HOW,
    Read("best_test_accuracy"), "accuracy")
PEAK_DEVICE_MEMORY = Figure(
    "peak_device_memory_bytes", "Peak device memory", "mib", "peak_device_memory_bytes",
    "the framework allocator's peak (tf get_memory_info 'peak', torch "
    "max_memory_allocated; under --cuda-graphs max_memory_reserved, which holds the "
    "graphs' private pool) during training, reset after each epoch's evaluation, "
    "highest over the epochs after the first; the first epoch's (initialisation, "
    "cuDNN/XLA autotuning) is warmup_peak_device_memory_bytes; null on CPU",
    Read("peak_device_memory_bytes"), "positive", "ratio", headline=True, in_sweep=True)
HOST_PEAK_RSS = Figure(
    "host_peak_rss_bytes", "Host peak RSS", "mib", "host_peak_rss_bytes",
    "getrusage ru_maxrss of the trainer process",
    Read("host_peak_rss_bytes"), "positive")
ACHIEVED_FLOPS = Figure(
    "achieved_flops_per_s", "Achieved FLOP/s", "flops", "achieved_flops_per_s",
    "analytic training FLOPs per image (3 x forward, multiply-add = 2) x images/s",
    Read("achieved_flops_per_s"), "positive")
MFU = Figure(
    "mfu", "MFU", "pct", "mfu",
    "achieved FLOP/s / the device's dense peak for the precision (the table in "
    "compare/machine/gpu_metrics.py); n/a on CPU or an unknown GPU",
    Read("mfu"), "fraction", headline=True, in_sweep=True)
ENERGY = Figure(
    "energy_j", "Energy (training)", "j", "energy_j",
    "NVML cumulative energy counter (or sampled power where a device refuses it), "
    "difference over each epoch's training, every GPU of the run on the chief's "
    "machine; n/a without NVML",
    Read("energy_j"), "positive", "ratio", headline=True)
ENERGY_PER_IMAGE = Figure(
    "energy_per_image_j", "Energy per image", "j", "energy_per_image_j",
    "training energy / images trained",
    Read("energy_per_image_j"), "positive", in_sweep=True)
TIME_TO_TARGET = Figure(
    "time_to_target_s", "Time to target accuracy", "s", "time_to_target_s",
    "cumulative training time at the end of the first epoch whose test accuracy "
    "reaches --target-accuracy",
    Read("time_to_target_s"), "positive", headline=True, only_when_measured=True,
    in_sweep=True)

# In the order of the report's table.
FIGURES: tuple[Figure, ...] = (
    TRAIN_TIME, THROUGHPUT, STEP_TIME, STEP_TIME_P90, WARMUP_TIME, STARTUP_OVERHEAD,
    STEADY_TRAIN_TIME, INPUT_WAIT, EVAL_TIME, TIME_TO_RESULT, FINAL_ACCURACY, BEST_ACCURACY,
    PEAK_DEVICE_MEMORY, HOST_PEAK_RSS, ACHIEVED_FLOPS, MFU, ENERGY, ENERGY_PER_IMAGE,
    TIME_TO_TARGET,
)

BY_KEY: dict[str, Figure] = {f.key: f for f in FIGURES}
RATIO_KEYS: tuple[str, ...] = tuple(f.key for f in FIGURES if f.versus == "ratio")
# the one figure compared as a paired difference (summary.json's accuracy_difference and
# its equivalence test)
DIFFERENCE_KEY: str = next(f.key for f in FIGURES if f.versus == "difference")


def _definitions(figures: tuple[Figure, ...]) -> dict[str, str]:
    """Each definition once, by name; figures that share a name must share its words."""
    definitions: dict[str, str] = {}
    for f in figures:
        if definitions.setdefault(f.measured, f.how) != f.how:
            raise ValueError(f"{f.key}: '{f.measured}' is defined in other words by another "
                             "figure")
    return definitions


DEFINITIONS: dict[str, str] = _definitions(FIGURES)  # the figures' part of MEASUREMENT
