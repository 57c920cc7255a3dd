"""`cnncompare sweep`: what each setting is worth, per framework."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from compare.cli.options import (
    CONTEXT,
    build_config,
    mixed_devices_option,
    prepare_data,
    refuse_launchers,
    run_options,
)
from compare.experiment import settings
from compare.experiment.config import FRAMEWORKS
from compare.run import shutdown


@click.command(context_settings=CONTEXT)
@run_options
@click.option("--vary", "varies", multiple=True, required=True, metavar="NAME=V1,V2",
              help="A setting and its values; repeat for a cartesian product. Names: "
                   f"{settings.vary_help()}. The first values form the baseline.")
@click.option("--framework", "frameworks", type=click.Choice(FRAMEWORKS), multiple=True,
              help="Frameworks to run (repeatable). [default: both]")
@mixed_devices_option
def sweep(varies: tuple[str, ...], frameworks: tuple[str, ...], **options: Any) -> None:
    """What each setting is worth, per framework: every combination of the --vary values,
    each run in its own process; writes DIR/sweep.json, sweep.md and sweep.html.

    \b
    Examples:
      cnncompare sweep --dataset synthetic --vary precision=fp32,mixed --vary pipeline=naive,tuned
      cnncompare sweep --model resnet9 --vary batch-size=128,512 --vary compile=off,on
      cnncompare sweep --dataset synthetic --vary device=cpu,gpu --target-accuracy 0.8
      cnncompare sweep --framework tf --vary steps-per-call=1,8 --vary strategy=none,mirrored
    """
    from compare.process import lock, queue
    from compare.process import sweep as sweep_module
    refuse_launchers("sweep")
    out = options.pop("out") or "runs/sweep"
    parsed = [settings.parse_vary(v) for v in varies]
    config = build_config("torch", out, options)
    train_size = len(prepare_data(config).train_y)
    command = queue.replay_command()
    with lock.hold(out, command), shutdown.forwarding() as stop:
        code = sweep_module.run_sweep(config, parsed, list(frameworks) or list(FRAMEWORKS),
                                      Path(out), command, train_size)
    sys.exit(stop.exit_code(code))
