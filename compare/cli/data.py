"""`cnncompare data`: fetch, inspect and cache datasets."""

from __future__ import annotations

import json

import click

from compare.cli.options import CONTEXT
from compare.experiment import datasets
from compare.experiment.config import RunConfig


@click.group("data", context_settings=CONTEXT)
def data() -> None:
    """Fetch, inspect and cache datasets."""


@data.command("info", context_settings=CONTEXT)
@click.option("--dataset", type=click.Choice(datasets.SOURCES), default=RunConfig.dataset,
              show_default=True, help="Data source to inspect.")
@click.option("--data-dir", type=click.Path(), default=None,
              help="Where the data is (see `run --help`).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(dataset: str, data_dir: str | None, as_json: bool) -> None:
    """Splits, sizes, classes and their counts, source and cache path of a dataset
    (decoding it once).

    \b
    Examples:
      cnncompare data info --dataset synthetic
      cnncompare data info --dataset cifar10 --data-dir ~/cifar-10-batches-py --json
    """
    found = datasets.load(dataset, data_dir).info()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    from rich.table import Table

    from compare.console import console as make_console
    table = Table(title=f"dataset: {dataset}", show_header=False)
    for key in ("source", "origin", "train_size", "test_size", "image_shape", "num_classes",
                "classes", "mean", "std", "cache_path"):
        value = found[key]
        table.add_row(key, ", ".join(map(str, value)) if isinstance(value, list) else str(value))
    table.add_row("training images per class", ", ".join(
        f"{name} {count}" for name, count in zip(found["classes"], found["train_class_counts"])))
    for note in found["notes"]:
        table.add_row("note", note)
    make_console().print(table)


@data.command("fetch", context_settings=CONTEXT)
def fetch() -> None:
    """Download the official CIFAR-10 python archive into the cache (md5-checked).

    \b
    Example:
      CNNCOMPARE_HOME=/data/cnncompare cnncompare data fetch
    """
    path = datasets.fetch_cifar10()
    datasets.load("cifar10")  # decode once, so runs start from the array cache
    click.echo(f"cached {path}")


@data.command("cache", context_settings=CONTEXT)
@click.option("--clear", is_flag=True, help="Delete the decoded-array cache (downloads stay).")
def cache(clear: bool) -> None:
    """Show (or clear) the cache under $CNNCOMPARE_HOME.

    \b
    Example:
      cnncompare data cache
    """
    if clear:
        datasets.clear_cache()
    found = datasets.describe_cache()
    click.echo(f"{found['root']}: {len(found['files'])} file(s), {found['bytes'] / 1e6:.1f} MB")
    for entry in found["files"]:
        click.echo(f"  {entry['bytes'] / 1e6:9.1f} MB  {entry['path']}")
