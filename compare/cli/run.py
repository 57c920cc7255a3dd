"""`cnncompare run`: one framework, one training run, in its own process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from compare import files
from compare.cli.options import (
    CONTEXT,
    build_config,
    prepare_data,
    refuse_options_with_resume,
    resumed,
    run_options,
)
from compare.experiment.config import FRAMEWORKS
from compare.machine import cluster, precision_choice
from compare.run import shutdown


@click.command(context_settings=CONTEXT)
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=None,
              help="tf (TensorFlow/Keras) or torch (PyTorch); required, except with --resume, "
                   "which takes the one saved there.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Continue the interrupted run in DIR from its last "
              "checkpoint, with the settings saved there (DIR/config.json).")
@click.option("--own-loop", is_flag=True, help="Train with the framework's own loop instead "
              "(Keras compile + fit; a plain PyTorch loop) on the same model, weights, batches "
              "and recipe; write DIR/own-loop.json.")
@run_options
def run(framework: str | None, resume_dir: str | None, own_loop: bool,
        **options: Any) -> None:
    """Train once with one framework, in its own process; write DIR/result.json.

    \b
    Examples:
      cnncompare run --framework tf --dataset synthetic --epochs 1
      cnncompare run --framework torch --model resnet9 --dataset folder --data-dir ~/cifar10-jpeg
      cnncompare run --framework torch --device cpu --devices 2 --precision fp32 --quiet
      cnncompare run --framework tf --device gpu --steps-per-call 16 --strategy mirrored
      cnncompare run --framework tf --own-loop --out runs/keras-fit
      cnncompare run --resume runs/run-torch
    """
    from compare.process import lock, queue, runner
    from compare.run import checkpoint
    if resume_dir and own_loop:
        raise click.UsageError("--own-loop trains from the start: it cannot --resume")
    if resume_dir:
        refuse_options_with_resume(resume_dir)
        config = resumed(checkpoint.saved_config(Path(resume_dir)), options)
        if runner.result_status(Path(resume_dir)) == "completed":
            click.echo(f"{resume_dir}: the run has completed; nothing to resume")
            return
    elif framework is None:
        raise click.UsageError("Missing option '--framework'.")
    else:
        out = options.pop("out") or f"runs/run-{framework}"
        config = build_config(framework, out, options)
    config = precision_choice.carry(config)  # once, for this command: the framework reads it
    runner.check_installed(config.framework)
    prepare_data(config)
    launched = cluster.launch(config.framework)
    if own_loop and launched.launcher is not None:
        raise click.UsageError(f"--own-loop trains in one process, not under {launched.launcher}")
    # Under TF_CONFIG or torchrun only rank 0 writes the result; the others keep their
    # config and log apart, so processes sharing a filesystem never write the same file.
    own = files.RunDir(Path(config.out))
    if not launched.is_chief:
        own = own.worker(launched.rank)
    with lock.hold(own.path, queue.replay_command()), shutdown.forwarding() as stop:
        outcome = runner.run_framework(config, resume=resume_dir is not None,
                                       directory=own.path, own_loop=own_loop)
        if outcome.code != 0:
            kept = (f"what finished is in {outcome.result_path}"
                    if Path(outcome.result_path).exists() else "it trained nothing")
            click.echo(f"{config.framework} run {outcome.status} (exit {outcome.code}); {kept}",
                       err=True)
        elif launched.is_chief:
            click.echo(f"result: {outcome.result_path}")
        else:
            click.echo(f"{launched.describe()}: done; rank 0 wrote the result")
    sys.exit(stop.exit_code(outcome.code))
