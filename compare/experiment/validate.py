"""Every check of a RunConfig, in one place, run before any work starts.

The CLI calls `check_config` on each config it builds (for `sweep`, on every combination of
the --vary values) and `check_against_data` once the dataset is known. A failed check is a
UserError: one line naming the option, exit code 2.
"""

from __future__ import annotations

import os
from pathlib import Path

from compare.errors import UserError
from compare.experiment import settings, strategy
from compare.experiment.checks import Check, count, optional
from compare.experiment.config import FRAMEWORKS, RunConfig
from compare.process import cluster

# Fields no option sets (tests and resumed configs carry them): their own checks.
INTERNAL: tuple[tuple[str, Check], ...] = (
    ("synthetic_test_size", optional(count())),
    ("timing_window", optional(count())),
)


def check_config(config: RunConfig) -> RunConfig:
    """The config, or a UserError naming the first setting that is not valid: each
    declared setting's own check (compare.experiment.settings), then the rules between
    settings."""
    settings.check(config)
    for name, valid in INTERNAL:
        value = getattr(config, name)
        if not valid.test(value):
            raise UserError(f"Invalid value for '{name}': {value!r} is not {valid.expected}")
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
    of all processes (compare.process.cluster: TF_CONFIG workers or torchrun processes)."""
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
