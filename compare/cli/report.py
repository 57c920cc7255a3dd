"""`cnncompare report`: the report again, from saved results alone."""

from __future__ import annotations

from pathlib import Path

import click

from compare.cli.options import CONTEXT
from compare.report import stats


@click.command(context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write the report here. [default: the first SOURCE that is a directory]")
@click.option("--equivalence-margin", type=click.FloatRange(min=0, min_open=True),
              default=100 * stats.EQUIVALENCE_MARGIN, show_default=True,
              help="Accuracy equivalence margin of the TOST, in percentage points (+-).")
def report(sources: tuple[str, ...], out: str | None, equivalence_margin: float) -> None:
    """Rebuild report.md and report.html from saved results alone.

    Each SOURCE is a `compare` output directory (or any directory with result.json files
    below it), a summary.json shipped from another machine, or a directory holding one.
    Results of different machines (device + host platform) or precisions are shown side
    by side, never averaged. One comparison also rewrites summary.json; several write
    combined.json. Unreadable result files are named on stderr and in the report.

    \b
    Examples:
      cnncompare report runs/demo
      cnncompare report runs/h100 runs/cpu --out runs/both
      cnncompare report runs/quickstart/summary.json runs/mine
    """
    from compare import report as report_module
    built = report_module.build([Path(s) for s in sources], Path(out) if out else None,
                                margin=equivalence_margin / 100)
    for skipped in built.skipped:
        click.echo(f"skipped {skipped['path']}: {skipped['reason']}", err=True)
    for p in built.paths:
        click.echo(f"wrote {p}")
