"""Every check of a RunConfig, in one place, run before any work starts.

The CLI calls `check_config` on each config it builds (for `sweep`, on every combination of
the --vary values) and `check_against_data` once the dataset is known. A failed check is a
UserError: one line naming the option, exit code 2.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

from compare.errors import UserError
from compare.experiment import specs, strategy
from compare.experiment.config import (
    DEVICE_CHOICES,
    FRAMEWORKS,
    PIPELINES,
    PRECISIONS,
    SCHEDULES,
    STRATEGIES,
    RunConfig,
)
from compare.process import cluster


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _strategy(v: Any) -> bool:
    try:
        strategy.parse(v)
    except (ValueError, AttributeError):
        return False
    return True


# (config field, CLI option, test, what a valid value is)
RULES: list[tuple[str, str, Callable[[Any], bool], str]] = [
    ("model", "--model", lambda v: v in specs.MODELS, f"one of {', '.join(specs.MODELS)}"),
    ("precision", "--precision", lambda v: v in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
    ("device", "--device", lambda v: v in DEVICE_CHOICES, f"one of {', '.join(DEVICE_CHOICES)}"),
    ("schedule", "--schedule", lambda v: v in SCHEDULES, f"one of {', '.join(SCHEDULES)}"),
    ("epochs", "--epochs", _count, "an integer >= 1"),
    ("batch_size", "--batch-size", _count, "an integer >= 1"),
    ("devices", "--devices", _count, "an integer >= 1"),
    ("strategy", "--strategy", _strategy, f"one of {', '.join(STRATEGIES)}, or "
     "tf=CHOICE,torch=CHOICE"),
    ("steps_per_call", "--steps-per-call", lambda v: v is None or _count(v), "an integer >= 1"),
    ("timing_window_s", "--timing-window-s", lambda v: _finite(v) and v > 0,
     "a number of seconds > 0"),
    ("timing_window", "timing_window", lambda v: v is None or _count(v), "an integer >= 1"),
    ("synthetic_train_size", "--synthetic-size", _count, "an integer >= 1"),
    ("synthetic_test_size", "--synthetic-size", _count, "an integer >= 1"),
    ("lr", "--lr", lambda v: _finite(v) and v > 0, "a finite number > 0"),
    ("momentum", "--momentum", lambda v: _finite(v) and 0 <= v < 1, "a number in [0, 1)"),
    ("weight_decay", "--weight-decay", lambda v: _finite(v) and v >= 0, "a finite number >= 0"),
    ("label_smoothing", "--label-smoothing", lambda v: _finite(v) and 0 <= v < 1,
     "a number in [0, 1)"),
    ("warmup_fraction", "--warmup-fraction", lambda v: _finite(v) and 0 < v <= 1,
     "a number in (0, 1]"),
    ("validation_fraction", "--validation-fraction", lambda v: _finite(v) and 0 < v < 1,
     "a number in (0, 1)"),
    ("profile_steps", "--profile", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
    ("collective_timeout_s", "--collective-timeout", lambda v: _finite(v) and v > 0,
     "a number of seconds > 0"),
    ("target_accuracy", "--target-accuracy", lambda v: v is None or (_finite(v) and 0 < v <= 1),
     "a fraction in (0, 1]"),
]


def check_config(config: RunConfig) -> RunConfig:
    """The config, or a UserError naming the first option that is not valid."""
    for field, option, valid, expected in RULES:
        value = getattr(config, field)
        if not valid(value):
            raise UserError(f"Invalid value for '{option}': {value!r} is not {expected}")
    if config.pipeline.kind not in PIPELINES:
        raise UserError(f"Invalid value for '--pipeline': {config.pipeline.kind!r} is not one of "
                        f"{', '.join(PIPELINES)}")
    if config.pipeline.workers is not None and config.pipeline.workers < 0:
        raise UserError(f"Invalid value for '--workers': {config.pipeline.workers} is not >= 0")
    for framework in FRAMEWORKS:
        if strategy.parse(config.strategy)[framework] != "none":
            continue
        launched = cluster.launch(framework)
        if config.devices != 1 or launched.multi_process:
            over = (f"--devices {config.devices}" if not launched.multi_process
                    else f"{launched.processes} processes ({launched.launcher})")
            raise UserError(f"--strategy none trains one replica without a wrapper, not "
                            f"{over}: use --strategy auto or mirrored")
    check_split(config)
    check_out(config.out)
    return config


def check_split(config: RunConfig) -> None:
    """The launch must fit the config, and the global batch split evenly over the replicas
    of all processes (compare.cluster: TF_CONFIG workers or torchrun processes)."""
    launched = cluster.launch(config.framework)
    cluster.check(config.framework, config.devices, config.device, launched)
    replicas = cluster.replicas(config.framework, config.devices, launched)
    if config.batch_size % replicas:
        over = (f"--devices {config.devices}" if launched.launcher is None
                else f"{replicas} replicas ({launched.describe()})")
        raise UserError(f"--batch-size {config.batch_size} does not split evenly over {over}")


def check_out(out: str | os.PathLike) -> None:
    """--out must be a directory we can create or write, not a file."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path} is a file, not a directory: choose another path")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"--out {path}: {existing} is a file, so the directory cannot be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {path}: {existing} is not writable")


def check_against_data(config: RunConfig, train_size: int) -> None:
    """Checks that need the dataset: a batch must fit in the training set."""
    if config.batch_size > train_size:
        raise UserError(f"--batch-size {config.batch_size} is larger than the training set "
                        f"({train_size} images): use a smaller batch")
