"""One run's summary: a pure function of its epoch records and timing windows.

The definitions are the ones `compare.schema.MEASUREMENT` states; both frameworks' results
are summarised by this code, so a figure means the same in both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from compare.experiment.config import RunConfig
from compare.machine import gpu_metrics
from compare.records import ClockWindow, ProcessClock, RunSummary, StepTimes
from compare.schema import Epoch


def summarise_run(config: RunConfig, epochs: list[Epoch], windows: Sequence[ClockWindow],
                  *, status: str, replicas: int, train_flops_per_image: int,
                  device_name: str | None, on_gpu: bool, peak_memory_note: str | None,
                  host_peak_rss_bytes: int | None,
                  steps_per_call: int | None = None,
                  precision: str | None = None) -> RunSummary:
    """The summary of result.json for these epochs and windows; `precision` is the one the
    run resolved (compare.experiment.precision_rule), config.precision where not given."""
    summary = RunSummary(
        status=status, replicas=replicas, train_flops_per_image=train_flops_per_image,
        steps_per_call=steps_per_call, epochs_completed=len(epochs),
        train_time_s=sum(e["train_time_s"] for e in epochs),
        eval_time_s=sum(e["eval_time_s"] for e in epochs),
        peak_device_memory_note=peak_memory_note, host_peak_rss_bytes=host_peak_rss_bytes,
        steady_step_time_ms=StepTimes(window_target_s=(config.timing_window_s
                                                       if config.timing_window is None
                                                       else None)),
        target_accuracy=config.target_accuracy)
    if not epochs:
        return summary
    accuracies = [e["test_accuracy"] for e in epochs]
    summary.final_test_accuracy = accuracies[-1]
    summary.best_test_accuracy = max(accuracies)
    summary.warmup_time_s = epochs[0]["train_time_s"]
    summary.time_to_result_s = summary.train_time_s + summary.eval_time_s
    steady = steady_epochs(epochs)
    steady_time = sum(e["train_time_s"] for e in steady)
    if steady_time > 0:
        summary.images_per_s = sum(e["images"] for e in steady) / steady_time
        wait = sum(e["input_wait_s"] for e in steady)
        summary.input_wait_fraction = min(1.0, wait / steady_time)
    summary.steady_step_time_ms = dataclasses.replace(
        steady_step_times(epochs, windows),
        window_target_s=summary.steady_step_time_ms.window_target_s)
    median_ms, first_steps = summary.steady_step_time_ms.median, epochs[0].get("steps")
    if len(epochs) > 1 and median_ms and first_steps:
        overhead = summary.warmup_time_s - first_steps * median_ms / 1000.0
        # none to give where the first epoch took no longer than its steps (a positive figure,
        # aggregated on the log scale)
        summary.startup_overhead_s = overhead if overhead > 0 else None
    summary.processes = per_process(steady)
    peaks = [e.get("peak_device_memory_bytes") for e in steady]
    measured = [p for p in peaks if p is not None]
    if measured and len(measured) == len(peaks):
        summary.peak_device_memory_bytes = max(measured)
    summary.warmup_peak_device_memory_bytes = epochs[0].get("peak_device_memory_bytes")
    flops = train_flops_per_image * summary.images_per_s if summary.images_per_s else None
    summary.achieved_flops_per_s = flops
    mode = gpu_metrics.math_mode(on_gpu, precision or config.precision, config.tf32)
    utilisation = gpu_metrics.mfu(flops, device_name, mode, replicas)
    summary.mfu, summary.peak_flops_per_s = utilisation["mfu"], utilisation["peak_flops_per_s"]
    summary.mfu_note = utilisation["mfu_note"]
    summary.energy_j, summary.energy_per_image_j, summary.energy_note = energy(epochs)
    if config.target_accuracy is not None:
        summary.time_to_target_s, summary.epochs_to_target = time_to_target(
            epochs, config.target_accuracy)
    return summary


EpochLike = TypeVar("EpochLike", bound=Mapping[str, Any])  # an epoch's record, or its number


def steady_epochs(epochs: Sequence[EpochLike]) -> list[EpochLike]:
    """The epochs steady-state figures use: not the first one of each session (a process's
    first epoch carries the warm-up: tracing, compilation, autotuning; a resumed run warms
    up again), unless that leaves none; a one-epoch run uses its only epoch."""
    steady = [e for previous, e in zip(epochs, epochs[1:])
              if e.get("session", 0) == previous.get("session", 0)]
    return steady or list(epochs[1:] if len(epochs) > 1 else epochs)


def per_process(steady: list[Epoch]) -> list[ProcessClock] | None:
    """Each process's own clock over the steady epochs (compare.run.loop.per_process), rank by
    rank: training seconds, the share of them spent waiting for input, and the median
    step time (ms) of its windows; None for a single process."""
    gathered = [g for e in steady if (g := e.get("processes")) is not None]
    if not gathered or len(gathered) < len(steady):
        return None
    rows = []
    for rank in range(len(gathered[0])):
        own = [g[rank] for g in gathered]
        train = sum(p["train_time_s"] for p in own)
        wait = sum(p["input_wait_s"] for p in own)
        rows.append(ProcessClock(
            rank=rank, train_time_s=train,
            input_wait_fraction=min(1.0, wait / train) if train > 0 else None,
            median_step_ms=float(np.median([p["median_step_ms"] for p in own]))))
    return rows


def steady_step_times(epochs: Sequence[Mapping[str, Any]],
                      windows: Sequence[ClockWindow]) -> StepTimes:
    """Median and p90 of per-step milliseconds over the steady windows."""
    numbers = {e["epoch"] for e in steady_epochs(epochs)}
    steady = [w for w in windows if w["epoch"] in numbers]
    if len(epochs) == 1:
        steady = steady[1:]  # a one-epoch run: its first window carries tracing/compilation
    per_step_ms = np.array([1000.0 * w["seconds"] / w["steps"] for w in steady])
    if not per_step_ms.size:
        return StepTimes()
    return StepTimes(median=float(np.median(per_step_ms)),
                     p90=float(np.percentile(per_step_ms, 90)), windows=int(per_step_ms.size),
                     steps_per_window=int(np.median([w["steps"] for w in steady])))


def energy(epochs: list[Epoch]) -> tuple[float | None, float | None, str | None]:
    """Training energy over all epochs (joules), per image, and where the figure came from."""
    energies = [e.get("gpu", {}).get("energy_j") for e in epochs]
    measured = [float(v) for v in energies if v is not None]
    total = sum(measured) if len(measured) == len(energies) else None
    images = sum(e.get("images", 0) for e in epochs)
    last = epochs[-1].get("gpu", {})
    return (total, total / images if total is not None else None,
            last.get("note") or last.get("energy_source"))


def time_to_target(epochs: list[Epoch], target: float) -> tuple[float | None, int | None]:
    """Cumulative training time (s) at the end of the first epoch reaching `target` accuracy,
    and that epoch's number; None, None when none did."""
    elapsed = 0.0
    for e in epochs:
        elapsed += e["train_time_s"]
        if e["test_accuracy"] >= target:
            return elapsed, e["epoch"]
    return None, None
