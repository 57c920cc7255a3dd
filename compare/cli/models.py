"""`cnncompare models`: every built-in network, as the spec and each framework count it."""

from __future__ import annotations

import functools
import json

import click

from compare.cli.options import CONTEXT
from compare.experiment import networks, specs
from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS, recipe_config


def catalog(frameworks: tuple[str, ...] = FRAMEWORKS) -> list[dict]:
    """Each network: its spec's parameters and FLOPs, the parameters each framework's build
    has (in its own process), its recipe, its target's published figure and its source."""
    names = list(networks.MODELS)
    from compare.process import runner
    # the frameworks' processes side by side: each is mostly its import and its builds
    answers = runner.concurrently([functools.partial(runner.framework_models, fw, names)
                                   for fw in frameworks])
    built = dict(zip(frameworks, answers))
    rows = []
    for name, network in networks.MODELS.items():
        spec = network.build(10)
        config = recipe_config(name)
        rows.append({
            "model": name, "parameters": specs.parameter_count(spec),
            "parameters_built": {fw: (found.get(name) or {}).get("parameters")
                                 if "error" not in found else None
                                 for fw, found in built.items()},
            "errors": {fw: found["error"] for fw, found in built.items() if "error" in found},
            "train_gflops_per_image": specs.train_flops(spec) / 1e9,
            "flops_by_kind": specs.flops_by_kind(spec),
            "recipe": {"batch_size": config.batch_size, "lr": config.lr,
                       "schedule": config.schedule, "weight_decay": config.weight_decay,
                       "epochs": config.epochs, "augment": config.augment,
                       "cutout": config.cutout,
                       "target_accuracy": config.target_accuracy},
            "published": network.published, "source": network.source})
    return rows


def _recipe(recipe: dict) -> str:
    target = (f", target {recipe['target_accuracy']:.0%}" if recipe["target_accuracy"]
              else "")
    augment = (", crop+flip" + (f", cutout {recipe['cutout']}" if recipe.get("cutout") else "")
               if recipe["augment"] else "")
    return (f"batch {recipe['batch_size']}, lr {recipe['lr']:g} {recipe['schedule']}, "
            f"wd {recipe['weight_decay']:g}, {recipe['epochs']} epochs{augment}{target}")


@click.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def models(as_json: bool) -> None:
    """Every network --model takes: parameters as the spec counts them and as each framework
    builds them (in its own process), training GFLOPs per image and the layer kinds that
    hold them, the recipe, and where the network and its target accuracy come from.

    \b
    Examples:
      cnncompare models
      cnncompare models --json > models.json
    """
    rows = catalog()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    from compare.console import console as make_console
    console = make_console()
    sizes = Table(title="networks (--model): parameters and FLOPs")
    for column in ("model", "spec", *(FRAMEWORK_NAMES[fw] for fw in FRAMEWORKS),
                   "train GFLOPs/image", "FLOPs in"):
        sizes.add_column(column)
    recipes = Table(title="recipes and sources")
    for column in ("model", "recipe", "published accuracy", "source"):
        recipes.add_column(column)
    for row in rows:
        built = [f"{row['parameters_built'][fw]:,}" if row["parameters_built"][fw] is not None
                 else "not built: " + row["errors"].get(fw, "?") for fw in FRAMEWORKS]
        kinds = ", ".join(f"{k} {v:.0%}" for k, v in row["flops_by_kind"].items() if v >= 0.01)
        sizes.add_row(row["model"], f"{row['parameters']:,}", *built,
                      f"{row['train_gflops_per_image']:.3f}", kinds)
        recipes.add_row(row["model"], _recipe(row["recipe"]), row["published"], row["source"])
    console.print(sizes)
    console.print(recipes)
