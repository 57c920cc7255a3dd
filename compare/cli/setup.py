"""`cnncompare setup gpu`: TensorFlow's own environment on a GPU host, built, recorded in
cnncompare's configuration and checked by doctor, in one command."""

from __future__ import annotations

import sys
from typing import Any

import click

from compare.cli.options import CONTEXT


@click.group("setup", context_settings=CONTEXT)
def setup() -> None:
    """Set up what cnncompare needs beyond its install (TensorFlow's environment on a GPU)."""


@setup.command("gpu", context_settings=CONTEXT)
@click.option("--cpu", "cpu_build", is_flag=True,
              help="Build the environment with TensorFlow's CPU build, on any host (the same "
                   "path without the CUDA libraries: what the tests run).")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def gpu(cpu_build: bool, debug: bool) -> None:
    """Build TensorFlow's own environment on a GPU host, record it, and check both frameworks.

    TensorFlow's CUDA 12 wheels and PyTorch's CUDA 13 wheels write the same cuDNN files, so
    on a GPU TensorFlow runs in an environment of its own (docs/gpu.md). This builds it under
    $CNNCOMPARE_HOME/environments with pip (tensorflow[and-cuda] at the version the project
    is tested with, the project's other requirements less PyTorch's, the project itself
    without its dependencies, editable where this install is), records its interpreter in
    $CNNCOMPARE_HOME/config.json, where run, compare, sweep, doctor and the GPU battery find
    it ($CNNCOMPARE_TF_PYTHON still overrides), then runs doctor and says where each
    framework trains.

    Run again, it changes nothing while the environment is current, and rebuilds it, aside,
    when it is not (another TensorFlow, the project moved or changed version or
    requirements). A build is switched in only once complete: an interrupted or failed one
    leaves the environment in use as it was. On a host without an NVIDIA GPU it is not
    needed, and says so.

    \b
    Examples:
      cnncompare setup gpu
      cnncompare setup gpu --cpu
    """
    from compare.console import console as make_console
    from compare.setup import build, config, plan
    console = make_console()
    with build.locked():
        facts = plan.gather("cpu" if cpu_build else "gpu")
        decision = plan.decide(facts)
        for note in decision.notes:
            click.echo(f"note: {note}", err=True)
        if decision.action == "not-needed":
            click.echo("not needed here: NVML sees no NVIDIA GPU, so both frameworks train on "
                       "the CPU in cnncompare's own environment (--cpu builds TensorFlow's "
                       "CPU build apart all the same)")
            return
        if decision.action == "current":
            assert facts.recorded is not None and facts.found is not None  # decided so
            click.echo(f"TensorFlow's environment is current, nothing changed: "
                       f"{facts.recorded.python} (TensorFlow {facts.found.tensorflow}, "
                       f"cnncompare {facts.recorded.project}); `cnncompare doctor` checks "
                       "that both frameworks train")
            return
        kind = "CUDA" if facts.wanted.kind == "gpu" else "CPU"
        click.echo(f"building TensorFlow's environment with its {kind} build ("
                   + "; ".join(decision.reasons) + ")")
        for folder in build.sweep_leftovers():
            click.echo(f"  removed {folder}, left by an earlier build that did not finish")
        built = build.build(facts.wanted, console)
        replaced = build.switch_in(built)
    click.echo(f"TensorFlow now runs in {built.python} (recorded in {config.path()})"
               + (f"; {replaced.root} removed" if replaced is not None else ""))
    sys.exit(0 if _check(console) else 1)


def _check(console: Any) -> bool:
    """doctor on both frameworks, said in one table: where each trains, in which
    interpreter; whether the two can be compared. Whether they can."""
    from rich.table import Table

    from compare.experiment.config import RunConfig
    from compare.process import doctor
    click.echo("checking both frameworks (cnncompare doctor)")
    found = doctor.examine(RunConfig.model)
    table = Table(title="cnncompare doctor", show_header=True)
    for column in ("framework", "trains", "interpreter"):
        table.add_column(column)
    for entry in found["frameworks"].values():
        ran = entry.get("interpreter") or {}
        table.add_row(entry["name"], entry["verdict"],
                      f"{ran.get('python', '?')} ({ran.get('from', '?')})")
    console.print(table)
    console.print(f"[bold]{found['verdict']}[/bold]")
    return bool(found["ready"])
