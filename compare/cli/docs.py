"""docs/commands.md from the command line itself: every command's help and options, and the
table of the run settings (compare.experiment.settings); the table of layer kinds in
docs/models.md from the kinds themselves (compare.experiment.specs.KINDS); and the table of
the reported figures in docs/measurement.md from their declarations (compare.figures).
`python -m compare.cli.docs` rewrites all three; tests fail when a committed page is stale.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from compare import figures
from compare.experiment import settings, specs

PAGE = Path(__file__).resolve().parents[2] / "docs" / "commands.md"
INTRO = """# Commands and options

Generated from the command line by `python -m compare.cli.docs`; `cnncompare COMMAND --help`
shows the same. Options that take no value on the command line take the model recipe's
default (`lenet` or `resnet9`), shown in brackets.
"""


def _command_section(name: str, command: click.Command, parent: str = "cnncompare") -> str:
    # a fixed width: the page must not depend on the terminal that wrote it
    settings = {**command.context_settings, "terminal_width": 100, "max_content_width": 100}
    context = click.Context(command, info_name=f"{parent} {name}", **settings)
    lines = [f"## `{parent} {name}`", "", "```text", command.get_help(context), "```", ""]
    if isinstance(command, click.Group):
        for sub_name, sub in command.commands.items():
            lines.append(_command_section(sub_name, sub, f"{parent} {name}"))
    return "\n".join(lines)


def page() -> str:
    """The whole page: the settings table, then each command's --help."""
    from compare.cli.app import cli
    parts = [INTRO, "## Run settings", "",
             "Shared by `run`, `compare` and `sweep` (and `compare`'s own, marked); each is "
             "declared once, in its field of `compare/experiment/config.py`.", "",
             settings.options_table()]
    for name, command in cli.commands.items():
        parts.append(_command_section(name, command))
    return "\n".join(parts).rstrip() + "\n"


MODELS_PAGE = PAGE.parent / "models.md"
KINDS_BEGIN = "<!-- the layer kinds: written by python -m compare.cli.docs -->"
KINDS_END = "<!-- end of the layer kinds -->"


def _signature(kind: type) -> str:
    """`Conv(name, in_channels, ..., padding=0)`: the kind's fields, defaults shown."""
    found = [field.name if field.default is dataclasses.MISSING
             else f"{field.name}={field.default!r}" for field in dataclasses.fields(kind)]
    return f"`{kind.__name__}({', '.join(found)})`"


def kinds_table() -> str:
    """Each layer kind: its signature and the first line of its docstring."""
    rows = ["| kind | what it is |", "|---|---|"]
    for kind in specs.KINDS:
        said = " ".join((kind.__doc__ or "").split("\n\n")[0].split())
        rows.append(f"| {_signature(kind)} | {said.replace('|', '/')} |")
    rows += ["", "| `Activation` formula | computes |", "|---|---|"]
    rows += [f"| `{name}` | {said} |" for name, (said, _) in specs.FORMULAS.items()]
    return "\n".join(rows)


def models_page(text: str) -> str:
    """docs/models.md `text` with its kinds table rewritten between the markers."""
    before, rest = text.split(KINDS_BEGIN)
    after = rest.split(KINDS_END)[1]
    return f"{before}{KINDS_BEGIN}\n{kinds_table()}\n{KINDS_END}{after}"


MEASUREMENT_PAGE = PAGE.parent / "measurement.md"
FIGURES_BEGIN = "<!-- the reported figures: written by python -m compare.cli.docs -->"
FIGURES_END = "<!-- end of the reported figures -->"
VERSUS = {"ratio": "ratio TF / PyTorch", "difference": "difference TF - PyTorch", None: ""}


def figures_table() -> str:
    """Every reported figure as declared (compare.figures): its row in the report, its key in
    summary.json, the scale it is aggregated on, how TF and PyTorch are set side by side, and
    whether it opens the report."""
    lines = ["| figure | `summary.json` key | across seeds | TF vs PyTorch | opens the report |",
             "|---|---|---|---|---|"]
    lines += [f"| {f.label} | `{f.key}` | {f.scale} | {VERSUS[f.versus]} | "
              f"{'yes' if f.headline else ''} |" for f in figures.FIGURES]
    return "\n".join(lines)


def measurement_page(text: str) -> str:
    """docs/measurement.md's `text` with its table of the reported figures rewritten."""
    before, rest = text.split(FIGURES_BEGIN, 1)
    _, after = rest.split(FIGURES_END, 1)
    return f"{before}{FIGURES_BEGIN}\n{figures_table()}\n{FIGURES_END}{after}"


def main() -> int:
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(page())
    MODELS_PAGE.write_text(models_page(MODELS_PAGE.read_text()))
    MEASUREMENT_PAGE.write_text(measurement_page(MEASUREMENT_PAGE.read_text()))
    print(f"wrote {PAGE}, the layer kinds of {MODELS_PAGE} and the figures' table in "
          f"{MEASUREMENT_PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
