"""Every check of a RunConfig, in one place, run before any work starts.

The CLI calls `check_config` on each config it builds (for `sweep`, on every combination of
the --vary values) and `check_against_data` once the dataset is known. A failed check is a
UserError: one line naming the option, exit code 2.
"""

from __future__ import annotations

import os
from pathlib import Path

from compare.errors import UserError
from compare.experiment import networks, settings, stages, strategy, weights
from compare.experiment.checks import Check, count, optional
from compare.experiment.config import FRAMEWORKS, RunConfig, data_replicas, stage_count
from compare.experiment.specs import ModelSpec
from compare.machine import cluster

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
    spec = check_model(config)
    for name, valid in INTERNAL:
        value = getattr(config, name)
        if not valid.test(value):
            raise UserError(f"Invalid value for '{name}': {value!r} is not {valid.expected}")
    for framework in FRAMEWORKS:
        if strategy.parse(config.strategy)[framework] != "none":
            continue
        launched = cluster.launch(framework)
        if data_replicas(config) != 1 or launched.multi_process:
            over = (f"--devices {config.devices}" if not launched.multi_process
                    else f"{launched.processes} processes ({launched.launcher})")
            raise UserError(f"--strategy none trains one replica without a wrapper, not "
                            f"{over}: use --strategy auto or mirrored")
    _, height, width = spec.input_shape
    if config.augment and config.cutout > min(height, width):
        raise UserError(f"--cutout {config.cutout} does not fit the network's {height}x{width} "
                        f"images: use at most {min(height, width)}")
    check_parallel(config, spec)
    check_split(config)
    check_out(config.out)
    return config


def check_model(config: RunConfig, classes: int = 10) -> ModelSpec:
    """The network's spec for `classes` classes (CIFAR-10's until the data says), loaded once
    and passed on: the user's own (--model FILE.py[:NAME] or package.module:NAME) must load
    and both frameworks build it, and the weights --init-weights names must fit it."""
    try:
        spec = networks.get_spec(config.model, classes)
    except ValueError as exc:
        raise UserError(f"--model {config.model}: {exc}") from None
    if config.init_weights:
        check_init_weights(config, spec)
    return spec


def check_init_weights(config: RunConfig, spec: ModelSpec) -> None:
    """--init-weights: a readable NPZ holding every weight of the network `spec`, of its shape."""
    if not config.shared_init:
        raise UserError("--init-weights starts both frameworks from one file's weights; "
                        "--no-shared-init lets each draw its own: choose one")
    if config.init_weights is None:
        return
    try:
        weights.read_file(config.init_weights, spec)
    except ValueError as exc:
        raise UserError(f"--init-weights {config.init_weights}: {exc}") from None


def check_parallel(config: RunConfig, spec: ModelSpec) -> None:
    """What --parallel model, --stages and --micro-batches cannot be combined with; `spec`:
    the network the stages cut."""
    if config.parallel == "data":
        if config.stages is not None:
            raise UserError("--stages cuts the network under --parallel model; with "
                            "--parallel data every device holds a whole replica")
        return
    refused = [(any(w == "mirrored" for w in strategy.parse(config.strategy).values()),
                "--strategy mirrored wraps replicas; --parallel model trains one"),
               (config.compile, "--compile: XLA compiles one device's graph, and the stages "
                                "run on several"),
               (config.cuda_graphs, "--cuda-graphs: a CUDA graph replays one device's work")]
    for framework in FRAMEWORKS:
        launched = cluster.launch(framework)
        refused.append((launched.multi_process, f"{launched.launcher} starts several "
                                                f"processes; --parallel model trains in one"))
    for found, why in refused:
        if found:
            raise UserError(f"--parallel model: {why}")
    try:
        stages.cut(spec, stage_count(config))
    except ValueError as exc:
        raise UserError(f"--stages {stage_count(config)}: {exc}") from None


def check_split(config: RunConfig) -> None:
    """The launch must fit the config, and the global batch split evenly over the replicas
    of all processes (compare.machine.cluster: TF_CONFIG workers or torchrun processes)."""
    launched = cluster.launch(config.framework)
    cluster.check(config.framework, config.devices, config.device, launched)
    replicas = cluster.replicas(config.framework, data_replicas(config), launched)
    if config.batch_size % replicas:
        over = (f"--devices {config.devices}" if launched.launcher is None
                else f"{replicas} replicas ({launched.describe()})")
        raise UserError(f"--batch-size {config.batch_size} does not split evenly over {over}")
    if (config.batch_size // replicas) % config.micro_batches:
        raise UserError(f"--micro-batches {config.micro_batches}: each replica's batch of "
                        f"{config.batch_size // replicas} does not split evenly")


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


def check_against_data(config: RunConfig, train_size: int, classes: int | None = None) -> None:
    """Checks that need the dataset: a batch must fit in the training set, and the user's
    own network must score each of the dataset's classes."""
    if classes is not None:
        check_model(config, classes)
    if config.batch_size > train_size:
        raise UserError(f"--batch-size {config.batch_size} is larger than the training set "
                        f"({train_size} images): use a smaller batch")
