"""The rich console every command prints its tables with."""

from __future__ import annotations

from rich.console import Console

# Off a terminal (piped, redirected) no cell may be cut: rich fits a table to 80 columns
# there, folding or ellipsizing cells ("mobilenet…"), so `cnncompare models | grep
# mobilenetv2` found nothing. This width lets every table take its natural width.
PIPED_WIDTH = 100_000


def console(stderr: bool = False) -> Console:
    """A Console as wide as the terminal, or, piped or redirected, wide enough that every
    cell of a table prints whole."""
    found = Console(stderr=stderr)
    return found if found.is_terminal else Console(stderr=stderr, width=PIPED_WIDTH)
