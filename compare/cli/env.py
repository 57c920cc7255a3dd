"""`cnncompare env`: what each framework sees."""

from __future__ import annotations

import json

import click

from compare.cli.options import CONTEXT


@click.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def env(as_json: bool) -> None:
    """What each framework sees: devices, versions, CUDA/cuDNN, TF32, precision support.

    \b
    Examples:
      cnncompare env
      cnncompare env --json > env.json
    """
    from compare.experiment.frameworks import FRAMEWORKS
    from compare.machine import environment
    from compare.process import runner
    info: environment.EnvReport = {
        "machine": environment.machine(),
        "frameworks": {fw: runner.framework_environment(fw) for fw in FRAMEWORKS}}
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        environment.print_table(info)
