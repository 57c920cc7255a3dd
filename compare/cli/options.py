"""The options `run`, `compare` and `sweep` share, made from the settings' declarations
(compare.experiment.settings), and the steps every training command takes with them: a
checked config, the data loaded once, --resume's rules.

Options default to None: a value not given takes the model recipe's default, which --help
shows; every value is checked before any work starts.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

import click

from compare import errors
from compare.errors import UserError
from compare.experiment import datasets, settings
from compare.experiment.config import FRAMEWORKS, RunConfig, recipe_config
from compare.machine import cluster
from compare.run import validate

# a command's function, as a decorator takes and gives it
F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Errors(click.Group):
    """Every UserError and Ctrl-C as one line and an exit code (compare.errors.report)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (UserError, KeyboardInterrupt) as exc:
            ctx.exit(errors.report(exc, debug="--debug" in sys.argv))


def click_option(setting: settings.Setting) -> Callable[[Callable[..., Any]], Any]:
    """A setting as a click option, its --help ending with the default it takes."""
    option, check = setting.option, setting.check
    extra: dict[str, Any]
    if setting.owner is RunConfig:  # None: the model recipe's default, shown in the help
        default, extra = None, {}
        help_text = f"{option.help} [default: {setting.shown_default()}]"
    else:  # a comparison's own setting: its field's default
        default, extra = setting.default(), {"show_default": True}
        help_text = option.help
    if setting.boolean:
        extra.update({"is_flag": True} if "/" not in option.flag else {})
    elif option.path:
        extra["type"] = click.Path()
    elif check.choices is not None and option.metavar is None:
        extra["type"] = click.Choice(check.choices)
    elif check.choices is None:
        extra["type"] = settings.number_type(setting)
    if option.metavar:
        extra["metavar"] = option.metavar
    return click.option(option.flag, setting.dest, default=default, help=help_text, **extra)


def run_options(f: F) -> F:
    """The settings of a run, then --out, --quiet and --debug."""
    options = [click_option(s) for s in settings.RUN_SETTINGS] + [
        click.option("--out", type=click.Path(), default=None,
                     help="Output directory. [default: runs/run-<framework> for run, "
                          "runs/compare, runs/sweep]"),
        click.option("--quiet", is_flag=True,
                     help="No progress bar: one line per epoch (for CI and logs)."),
        click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line "
                                                   "errors."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def comparison_options(f: F) -> F:
    """The settings of a comparison (seeds, the parity check)."""
    for setting in reversed(settings.COMPARISON_SETTINGS):
        f = click_option(setting)(f)
    return f


def mixed_devices_option(f: F) -> F:
    return click.option("--allow-mixed-devices", is_flag=True, default=None,
                        help="Run even when one framework would train on the GPU and the "
                             "other on the CPU (e.g. TensorFlow without its CUDA libraries); "
                             "the report says so.")(f)


def build_config(framework: str, out: str, options: dict) -> RunConfig:
    """A checked RunConfig from the run options (None: the model recipe's default). The
    options used are removed from `options`."""
    fields = settings.from_options(options)
    model = fields.pop("model", None) or RunConfig.model
    for name in ("quiet", "debug", "allow_mixed_devices"):
        if name in options:
            fields[name] = options.pop(name)
    config = recipe_config(model, framework=framework, out=out, **fields)
    return validate.check_config(config)


def prepare_data(config: RunConfig) -> datasets.Dataset:
    """Load (and cache) the dataset once in the parent, so bad data fails before any run."""
    dataset = datasets.config_dataset(config)
    validate.check_against_data(config, len(dataset.train_y), len(dataset.classes))
    for note in dataset.notes:
        click.echo(f"note: {note}", err=True)
    return dataset


def refuse_options_with_resume(directory: str) -> None:
    """--resume continues a run as it was set up; any other setting would make it another."""
    ctx = click.get_current_context()
    given = [p.opts[0] for p in ctx.command.params
             if p.name not in ("resume_dir", "quiet", "debug", "frameworks")
             and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise UserError(f"--resume {directory} continues with the settings saved there: "
                        f"drop {', '.join(given)}")


def resumed(config: RunConfig, options: dict) -> RunConfig:
    """A saved config, shown as this invocation asks (--quiet, --debug), checked again."""
    return validate.check_config(config.replace(quiet=options["quiet"], debug=options["debug"]))


def refuse_launchers(command: str) -> None:
    """compare and sweep start their own processes; under a multi-machine launcher each
    framework runs alone (`run`), and `report` puts the two results side by side."""
    for framework in FRAMEWORKS:
        launched = cluster.launch(framework)
        if launched.launcher is not None:
            raise UserError(f"{command} cannot run under {launched.launcher}: run each framework "
                            "with `cnncompare run` there (docs/machines.md), then `cnncompare "
                            "report` on the two output directories")
