"""`cnncompare doctor`: can each framework train here, and can the two be compared?"""

from __future__ import annotations

import json
import sys

import click

from compare.cli.options import CONTEXT, click_option
from compare.experiment.config import FRAMEWORKS, RunConfig
from compare.experiment.settings import run_setting
from compare.machine import cluster
from compare.run import validate


@click.command(context_settings=CONTEXT)
@click_option(run_setting("model"))  # the network to train a few steps of
@click_option(run_setting("device"))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--framework", "frameworks", type=click.Choice(FRAMEWORKS), multiple=True,
              help="Examine only this framework (repeatable); exit 0 when it can train. "
                   "[default: both]")
def doctor(model: str | None, device: str | None, as_json: bool,
           frameworks: tuple[str, ...]) -> None:
    """Can each framework train here, on which device, and can the two be compared?

    For each framework in its own processes: versions, the GPUs it sees, the CUDA/cuDNN it
    loaded, and a few real training steps of MODEL in float32 and mixed precision, with
    their time: on the GPU alone where the framework sees one, else on the CPU (`--device
    cpu`: on the CPU alone; `gpu`: a framework without one cannot train). Then a
    verdict per framework and for the pair. When a framework sees no GPU on a GPU machine,
    it says why. Exits 0 only when both frameworks can train on the same device kind.

    \b
    Examples:
      cnncompare doctor
      cnncompare doctor --model resnet9 --json > doctor.json
      cnncompare doctor --framework torch
      cnncompare doctor --device cpu
      cnncompare doctor --model examples/my_cnn.py
    """
    from compare.process import doctor as doctor_module
    config = RunConfig(model=model or RunConfig.model, device=device or RunConfig.device)
    validate.check_model(config)  # a user's FILE.py: one line and exit 2 when it cannot build
    dropped = cluster.forget_launch()
    if dropped:
        click.echo(f"note: doctor examines this machine alone; ignoring {', '.join(dropped)}",
                   err=True)
    found = doctor_module.examine(config.model, frameworks or FRAMEWORKS, config.device)
    if as_json:
        click.echo(json.dumps(found, indent=2))
    else:
        doctor_module.print_report(found)
    sys.exit(0 if found["ready"] else 1)
