"""`cnncompare port`: a PyTorch module or a saved Keras model as a spec both frameworks build,
with its weights and the proof that the twin computes what the source does."""

from __future__ import annotations

import json
from pathlib import Path

import click

from compare.cli.options import CONTEXT
from compare.errors import UserError
from compare.experiment import porting
from compare.experiment.config import FRAMEWORK_NAMES


def _json_object(ctx: click.Context, param: click.Parameter, value: str) -> dict:
    try:
        found = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc.msg}") from None
    if not isinstance(found, dict):
        raise click.BadParameter("a JSON object of keyword arguments, e.g. '{\"width\": 16}'")
    return found


def _shape(ctx: click.Context, param: click.Parameter,
           value: str | None) -> tuple[int, int, int] | None:
    if value is None:
        return None
    try:
        shape = tuple(int(n) for n in value.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise click.BadParameter("C,H,W: three positive integers, e.g. 3,32,32")
    return shape


@click.command(context_settings=CONTEXT)
@click.argument("kind", type=click.Choice(list(porting.SOURCES)))
@click.argument("source")
@click.option("--out", type=click.Path(file_okay=False), required=True,
              help="A new (or empty) directory for spec.py, weights.npz and port.json; "
                   "written whole or not at all.")
@click.option("--kwargs", default="{}", callback=_json_object,
              help="torch: the class's or function's keyword arguments as a JSON object. "
                   "[default: none]")
@click.option("--input-shape", callback=_shape, metavar="C,H,W",
              help="torch: one image's shape. Keras models carry theirs. [default: 3,32,32]")
@click.option("--name", help="The spec's name. [default: the class's, or the file's]")
@click.option("--quiet", is_flag=True, help="Print only the proof's line.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def port(kind: str, source: str, out: str, kwargs: dict,
         input_shape: tuple[int, int, int] | None, name: str | None, quiet: bool,
         debug: bool) -> None:
    """Port a CNN to the other framework: read KIND SOURCE (torch FILE.py:NAME or
    package.module:NAME, NAME a module class or a function returning a module; or keras
    MODEL.keras), map every layer onto the spec's layer kinds, build the twin in the other
    framework with the same weights, and prove on one batch (float64, CPU) that both give
    the same logits, and the same loss and gradients in a training step (dropout at rate 0
    in both; port.json records the rates read).

    What the spec cannot express (an unsupported layer or function, paths that meet other
    than by an add, concatenation or product, padding the other framework cannot express)
    is refused in one line naming the layer, with nothing written.

    \b
    Examples:
      cnncompare port torch my_model.py:Net --out ported/net
      cnncompare port torch my_model.py:ResNet --kwargs '{"width": 32}' --out ported/resnet
      cnncompare port torch torchvision.models:resnet18 --kwargs '{"num_classes": 10}' --out r18
      cnncompare port keras model.keras --out ported/keras-cnn
      cnncompare compare --model ported/net/spec.py --init-weights ported/net/weights.npz
    """
    from compare.process import port as porter
    say = (lambda line: None) if quiet else click.echo
    if name is not None and not name.isidentifier():
        raise UserError(f"--name {name}: a Python identifier, e.g. my_cnn")
    record = porter.port(kind, source, Path(out), kwargs, input_shape, name, say)
    click.echo(porting.describe(record["proof"]))
    if quiet:
        return
    src, twin, spec = record["source"], record["twin"], record["spec"]
    click.echo(f"parameters: {src['parameters']:,} in the source "
               f"({FRAMEWORK_NAMES[src['framework']]}), {spec['parameters']:,} in the spec, "
               f"{twin['parameters']:,} in the twin ({FRAMEWORK_NAMES[twin['framework']]})")
    if src["parameters"] != spec["parameters"]:
        click.echo(f"note: {src['parameters'] - spec['parameters']:,} of the source's "
                   f"parameters are in modules its forward never calls")
    click.echo(f"wrote {out}: {spec['file']} ({spec['layers']} layers), "
               f"{record['weights']['file']}, port.json")
    click.echo(f"compare them: {record['compare_command']}")
