"""The `cnncompare` group and the console script. Commands are thin: options -> a config ->
one call; each lives in its own module beside this one."""

from __future__ import annotations

import sys

import click

from compare import errors
from compare.cli.compare import compare
from compare.cli.data import data
from compare.cli.doctor import doctor
from compare.cli.env import env
from compare.cli.models import models
from compare.cli.options import CONTEXT, Errors
from compare.cli.port import port
from compare.cli.report import report
from compare.cli.run import run
from compare.cli.setup import setup
from compare.cli.sweep import sweep


@click.group(cls=Errors, context_settings=CONTEXT)
@click.version_option(package_name="cnncompare")
def cli() -> None:
    """Train the same CNN in TensorFlow/Keras and PyTorch and compare them fairly.

    \b
    Examples:
      cnncompare compare --dataset synthetic --epochs 2 --seeds 2 --out runs/demo
      cnncompare run --framework torch --dataset cifar10 --data-dir ~/cifar-10-python.tar.gz
      cnncompare report runs/demo
      cnncompare sweep --dataset synthetic --vary precision=fp32,mixed --vary pipeline=naive,tuned
      cnncompare models
      cnncompare port torch my_model.py:Net --out ported/net
      cnncompare env
      cnncompare doctor
      cnncompare data info --dataset folder --data-dir ~/cifar10-jpeg
      cnncompare setup gpu
    """


for command in (run, compare, sweep, report, models, port, env, doctor, data, setup):
    cli.add_command(command)


def main() -> None:
    """The console script: click, plus one line for anything unexpected (compare.errors)."""
    try:
        cli.main(prog_name="cnncompare", standalone_mode=True)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - last resort: one line unless --debug
        sys.exit(errors.report(exc, debug="--debug" in sys.argv, where="cnncompare"))
