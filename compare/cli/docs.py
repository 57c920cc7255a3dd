"""docs/commands.md from the command line itself: every command's help and options, and the
table of the run settings (compare.experiment.settings). `python -m compare.cli.docs`
rewrites it; tests/test_settings.py fails when the committed page is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

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


def main() -> int:
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(page())
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
