"""`cnncompare compare`: the parity check, both frameworks over several seeds, the report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from compare.cli.options import (
    CONTEXT,
    build_config,
    comparison_options,
    mixed_devices_option,
    prepare_data,
    refuse_launchers,
    refuse_options_with_resume,
    resumed,
    run_options,
)
from compare.experiment import settings
from compare.experiment.config import FRAMEWORKS, ComparisonConfig
from compare.run import shutdown


@click.command(context_settings=CONTEXT)
@run_options
@comparison_options
@mixed_devices_option
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Finish the interrupted comparison in DIR with the settings "
              "saved there: keep its passed parity check and completed runs, continue the "
              "others from their checkpoints.")
@click.option("--framework", "frameworks", type=click.Choice(FRAMEWORKS), multiple=True,
              help="Run only this framework's runs of the comparison now (repeatable), e.g. "
                   "on a GPU machine whose TensorFlow arrives later; the parity check waits "
                   "for both, and --resume DIR runs the rest. [default: both]")
def compare(resume_dir: str | None, frameworks: tuple[str, ...], **options: Any) -> None:
    """Parity check, then both frameworks over several seeds, then the side-by-side report.

    Runs alternate tf, torch, torch, tf, ... so machine drift hits both; beside each, the
    framework's own loop (Keras fit; a plain PyTorch loop) on the same recipe, unless
    --no-own-loops. Writes DIR/summary.json, DIR/report.md and DIR/report.html.

    \b
    Examples:
      cnncompare compare --dataset synthetic --epochs 2 --seeds 2 --out runs/demo
      cnncompare compare --model lenet --dataset folder --data-dir ~/cifar10-jpeg --epochs 1
      cnncompare compare --resume runs/demo
    """
    from compare.process import comparison, lock, queue
    refuse_launchers("compare")
    chosen = ComparisonConfig(**{s.dest: options.pop(s.dest)
                                 for s in settings.COMPARISON_SETTINGS})
    if resume_dir:
        refuse_options_with_resume(resume_dir)
        config, chosen = comparison.saved_comparison(Path(resume_dir))
        config, out = resumed(config, options), resume_dir
    else:
        out = options.pop("out") or "runs/compare"
        config = build_config("torch", out, options)
    prepare_data(config)
    with lock.hold(out, queue.replay_command()), shutdown.forwarding() as stop:
        code = comparison.compare_frameworks(config, chosen, Path(out),
                                              resume=resume_dir is not None,
                                              frameworks=frameworks or FRAMEWORKS)
    sys.exit(stop.exit_code(code))
