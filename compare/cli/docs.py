"""docs/commands.md from the command line itself: every command's help and options, and the
table of the run settings (compare.experiment.settings); and the table of the reported
figures in docs/measurement.md from their declarations (compare.figures).
`python -m compare.cli.docs` rewrites both; tests/test_settings.py and tests/test_figures.py
fail when a committed page is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from compare import figures
from compare.experiment import settings

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
    print(f"wrote {PAGE}")
    MEASUREMENT_PAGE.write_text(measurement_page(MEASUREMENT_PAGE.read_text()))
    print(f"wrote the figures' table in {MEASUREMENT_PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
