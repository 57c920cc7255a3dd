"""The `cnncompare` command line. Commands are thin: options -> RunConfig -> one call."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import click

from compare import data, specs
from compare.config import (DEVICE_CHOICES, FRAMEWORKS, PIPELINES, PRECISIONS, SCHEDULES,
                            PipelineConfig, RunConfig, recipe_config)
from compare.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, UserError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Errors(click.Group):
    """Turns UserError into one line and an exit code; a traceback only with --debug."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            if "--debug" in sys.argv:
                traceback.print_exc()
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


def run_options(f):
    """Options shared by run, compare and sweep."""
    options = [
        click.option("--model", type=click.Choice(list(specs.MODELS)), default="lenet", show_default=True,
                     help="Network: lenet (the seed's 62k-parameter Net) or resnet9 (DAWNBench ResNet)."),
        click.option("--dataset", type=click.Choice(data.SOURCES), default="cifar10", show_default=True,
                     help="Data source: the official CIFAR-10 archive, tfds, torchvision, an image "
                          "folder, or generated synthetic images."),
        click.option("--data-dir", type=click.Path(), default=None,
                     help="cifar10: the tar.gz or extracted cifar-10-batches-py/; folder: the root "
                          "with train/<class>/; tfds/torchvision: their data root."),
        click.option("--synthetic-size", type=click.IntRange(min=1), default=None,
                     help="Synthetic training images (test set: a fifth). [default: 10000]"),
        click.option("--epochs", type=click.IntRange(min=1), default=None,
                     help="Passes over the training set. [default: model recipe; lenet 2]"),
        click.option("--batch-size", type=click.IntRange(min=1), default=None,
                     help="Global batch: images per optimizer step over all replicas. [default: lenet 32]"),
        click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Peak learning rate per step. [default: lenet 0.01]"),
        click.option("--schedule", type=click.Choice(SCHEDULES), default=None,
                     help="Learning-rate schedule, applied per step. [default: lenet constant]"),
        click.option("--momentum", type=click.FloatRange(0, 1, max_open=True), default=None,
                     help="SGD momentum (PyTorch's form in both frameworks). [default: 0.9]"),
        click.option("--weight-decay", type=click.FloatRange(min=0), default=None,
                     help="L2 coefficient added to the gradient. [default: lenet 0]"),
        click.option("--label-smoothing", type=click.FloatRange(0, 1, max_open=True), default=None,
                     help="Label smoothing of the cross-entropy. [default: lenet 0]"),
        click.option("--augment/--no-augment", default=None,
                     help="Random crop (4-pixel zero padding) and horizontal flip, from the shared data "
                          "plan. [default: model recipe; lenet off (the seed's), resnet9 on]"),
        click.option("--precision", type=click.Choice(PRECISIONS), default="mixed", show_default=True,
                     help="mixed: float16 + loss scaling on GPU, bfloat16 on CPU; fp32: float32, TF32 off."),
        click.option("--device", type=click.Choice(DEVICE_CHOICES), default="auto", show_default=True,
                     help="auto: the GPU if there is one (and say which); gpu: fail if there is none."),
        click.option("--devices", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Replicas: GPUs, or on CPU logical devices (tf) / gloo processes (torch)."),
        click.option("--compile/--no-compile", "compile_", default=False, show_default=True,
                     help="XLA jit_compile (tf) and torch.compile (torch)."),
        click.option("--pipeline", type=click.Choice(PIPELINES), default="tuned", show_default=True,
                     help="Input pipeline preset: tuned (parallel map, prefetch, workers), naive (one "
                          "synchronous stage) or device (whole training set resident on the device)."),
        click.option("--workers", type=click.IntRange(min=0), default=None,
                     help="DataLoader worker processes (torch). [default: 2 when tuned]"),
        click.option("--tf32/--no-tf32", default=False, show_default=True,
                     help="Allow TensorFloat-32 on Ampere+ GPUs, in both frameworks alike."),
        click.option("--shared-init/--no-shared-init", default=True, show_default=True,
                     help="Start both frameworks from the same numpy-generated weights."),
        click.option("--target-accuracy", type=click.FloatRange(0, 1), default=None,
                     help="Report the training time to reach this test accuracy (fraction)."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the initial weights and the data plan."),
        click.option("--out", type=click.Path(file_okay=False), default=None,
                     help="Output directory. [default: runs/<command>-<framework or 'compare'>]"),
        click.option("--quiet", is_flag=True, help="No progress bar: one line per epoch (for CI and logs)."),
        click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def build_config(framework: str, out: str, **o) -> RunConfig:
    """A RunConfig from the shared options (None means: the model's recipe default)."""
    pipeline = PipelineConfig.preset(o["pipeline"])
    if o["workers"] is not None:
        pipeline = PipelineConfig(**{**pipeline.__dict__, "workers": o["workers"]})
    overrides = {"epochs": o["epochs"], "batch_size": o["batch_size"], "lr": o["lr"], "augment": o["augment"],
                 "schedule": o["schedule"], "momentum": o["momentum"],
                 "weight_decay": o["weight_decay"], "label_smoothing": o["label_smoothing"]}
    if o["synthetic_size"] is not None:
        overrides.update(synthetic_train_size=o["synthetic_size"],
                         synthetic_test_size=max(1, o["synthetic_size"] // 5))
    return recipe_config(o["model"], framework=framework, dataset=o["dataset"], data_dir=o["data_dir"],
                         precision=o["precision"], device=o["device"], devices=o["devices"],
                         compile=o["compile_"], pipeline=pipeline, tf32=o["tf32"],
                         shared_init=o["shared_init"], target_accuracy=o["target_accuracy"],
                         seed=o["seed"], out=out, quiet=o["quiet"], debug=o["debug"], **overrides)


def prepare_data(config: RunConfig) -> data.Dataset:
    """Load (and cache) the dataset once in the parent, so bad data fails before any run."""
    dataset = data.config_dataset(config)
    if config.batch_size > len(dataset.train_y):
        raise UserError(f"--batch-size {config.batch_size} is larger than the training set "
                        f"({len(dataset.train_y)} images): use a smaller batch")
    if config.batch_size % config.devices:
        raise UserError(f"--batch-size {config.batch_size} does not split evenly over --devices {config.devices}")
    for note in dataset.notes:
        click.echo(f"note: {note}", err=True)
    return dataset


@click.group(cls=Errors, context_settings=CONTEXT)
@click.version_option(package_name="cnncompare")
def cli():
    """Train the same CNN in TensorFlow/Keras and PyTorch and compare them fairly.

    \b
    Examples:
      cnncompare compare --dataset synthetic --epochs 2 --seeds 2 --out runs/demo
      cnncompare run --framework torch --dataset cifar10 --data-dir ~/cifar-10-python.tar.gz
      cnncompare report runs/demo
      cnncompare sweep --dataset synthetic --vary precision=fp32,mixed --vary pipeline=naive,tuned
      cnncompare env
      cnncompare data info --dataset folder --data-dir ~/cifar10-jpeg
    """


@cli.command(context_settings=CONTEXT)
@click.option("--framework", type=click.Choice(FRAMEWORKS), required=True,
              help="tf (TensorFlow/Keras) or torch (PyTorch).")
@run_options
def run(framework: str, **options):
    """Train once with one framework, in its own process; write DIR/result.json.

    \b
    Examples:
      cnncompare run --framework tf --dataset synthetic --epochs 1
      cnncompare run --framework torch --model resnet9 --dataset folder --data-dir ~/cifar10-jpeg
      cnncompare run --framework torch --device cpu --devices 2 --precision fp32 --quiet
    """
    from compare import runner
    out = options.pop("out") or f"runs/run-{framework}"
    config = build_config(framework, out, **options)
    runner.check_installed(framework)
    prepare_data(config)
    outcome = runner.run_framework(config)
    if outcome.code == 0:
        click.echo(f"result: {outcome.result_path}")
    else:
        click.echo(f"{framework} run {outcome.status} (exit {outcome.code}); what finished is in "
                   f"{outcome.result_path}", err=True)
    sys.exit(outcome.code)


@cli.command(context_settings=CONTEXT)
@run_options
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Seeds per framework (seed, seed+1, ...); 2+ gives confidence intervals.")
@click.option("--parity-steps", type=click.IntRange(min=1), default=3, show_default=True,
              help="SGD steps of the parity check before the comparison.")
@click.option("--ignore-parity", is_flag=True,
              help="Run the comparison even when the parity check fails (the report says so).")
def compare(seeds: int, parity_steps: int, ignore_parity: bool, **options):
    """Parity check, then both frameworks over several seeds, then the side-by-side report.

    Runs alternate tf, torch, torch, tf, ... so machine drift hits both. Writes
    DIR/summary.json, DIR/report.md and DIR/report.html.

    \b
    Examples:
      cnncompare compare --dataset synthetic --epochs 2 --seeds 2 --out runs/demo
      cnncompare compare --model lenet --dataset folder --data-dir ~/cifar10-jpeg --epochs 1
    """
    from compare import orchestrate
    out = options.pop("out") or "runs/compare"
    config = build_config("torch", out, **options)
    prepare_data(config)
    code = orchestrate.compare_frameworks(config, seeds, Path(out), parity_steps, ignore_parity)
    sys.exit(code)


@cli.command(context_settings=CONTEXT)
@run_options
@click.option("--vary", "varies", multiple=True, required=True, metavar="NAME=V1,V2",
              help="A setting and its values; repeat for a cartesian product. Names: precision, "
                   "batch-size, pipeline (naive/tuned/device), compile (on/off), devices, device "
                   "(cpu/gpu), model, lr, epochs, workers, tf32. The first values form the baseline.")
@click.option("--framework", "frameworks", type=click.Choice(FRAMEWORKS), multiple=True,
              help="Frameworks to run (repeatable). [default: both]")
def sweep(varies: tuple[str, ...], frameworks: tuple[str, ...], **options):
    """What each setting is worth, per framework: every combination of the --vary values,
    each run in its own process; writes DIR/sweep.json, sweep.md and sweep.html.

    \b
    Examples:
      cnncompare sweep --dataset synthetic --epochs 2 --vary precision=fp32,mixed --vary pipeline=naive,tuned
      cnncompare sweep --model resnet9 --vary batch-size=128,512 --vary compile=off,on --out runs/sweep
      cnncompare sweep --dataset synthetic --vary device=cpu,gpu --target-accuracy 0.8
    """
    from compare import orchestrate
    from compare import sweep as sweep_module
    out = options.pop("out") or "runs/sweep"
    parsed = [sweep_module.parse_vary(v) for v in varies]
    config = build_config("torch", out, **options)
    prepare_data(config)
    sys.exit(sweep_module.run_sweep(config, parsed, list(frameworks) or list(FRAMEWORKS), Path(out),
                                    orchestrate.replay_command()))


@cli.command(context_settings=CONTEXT)
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
def report(run_dirs: tuple[str, ...]):
    """Rebuild report.md and report.html from saved results alone.

    Each RUN_DIR is a `compare` output directory (or any directory holding result.json
    files below it); with several, the report of all their runs goes into the first.

    \b
    Example:
      cnncompare report runs/demo
    """
    from compare import report as report_module
    paths = report_module.rebuild(Path(run_dirs[0]), [Path(d) for d in run_dirs])
    for p in paths:
        click.echo(f"wrote {p}")


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def env(as_json: bool):
    """What each framework sees: devices, versions, CUDA/cuDNN, TF32, precision support.

    \b
    Examples:
      cnncompare env
      cnncompare env --json > env.json
    """
    from compare import environment
    info = environment.collect()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        environment.print_table(info)


@cli.group(context_settings=CONTEXT)
def data_group():
    """Fetch, inspect and cache datasets."""


data_group.name = "data"
cli.add_command(data_group, "data")


@data_group.command("info", context_settings=CONTEXT)
@click.option("--dataset", type=click.Choice(data.SOURCES), default="cifar10", show_default=True,
              help="Data source to inspect.")
@click.option("--data-dir", type=click.Path(), default=None, help="Where the data is (see `run --help`).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def data_info(dataset: str, data_dir: str | None, as_json: bool):
    """Splits, sizes, classes, source and cache path of a dataset (decoding it once).

    \b
    Examples:
      cnncompare data info --dataset synthetic
      cnncompare data info --dataset cifar10 --data-dir ~/cifar-10-batches-py --json
    """
    info = data.load(dataset, data_dir).info()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"dataset: {dataset}", show_header=False)
    for key in ("source", "origin", "train_size", "test_size", "image_shape", "num_classes", "classes",
                "mean", "std", "cache_path"):
        value = info[key]
        table.add_row(key, ", ".join(map(str, value)) if isinstance(value, list) else str(value))
    for note in info["notes"]:
        table.add_row("note", note)
    Console().print(table)


@data_group.command("fetch", context_settings=CONTEXT)
def data_fetch():
    """Download the official CIFAR-10 python archive into the cache (md5-checked).

    \b
    Example:
      CNNCOMPARE_HOME=/data/cnncompare cnncompare data fetch
    """
    path = data.fetch_cifar10()
    data.load("cifar10")  # decode once, so runs start from the array cache
    click.echo(f"cached {path}")


@data_group.command("cache", context_settings=CONTEXT)
@click.option("--clear", is_flag=True, help="Delete the decoded-array cache (downloads stay).")
def data_cache(clear: bool):
    """Show (or clear) the cache under $CNNCOMPARE_HOME.

    \b
    Example:
      cnncompare data cache
    """
    if clear:
        data.clear_cache()
    info = data.describe_cache()
    click.echo(f"{info['root']}: {len(info['files'])} file(s), {info['bytes'] / 1e6:.1f} MB")
    for entry in info["files"]:
        click.echo(f"  {entry['bytes'] / 1e6:9.1f} MB  {entry['path']}")


def main() -> None:
    try:
        cli.main(prog_name="cnncompare", standalone_mode=True)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - last resort: one line unless --debug
        if "--debug" in sys.argv:
            raise
        click.echo(f"error: {exc.__class__.__name__}: {exc} (rerun with --debug for the traceback)", err=True)
        sys.exit(EXIT_FAILED)


__all__ = ["cli", "main", "EXIT_USAGE"]
