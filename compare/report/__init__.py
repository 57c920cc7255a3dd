"""Reports from saved results alone: reading and grouping results (build), aggregating over
seeds (aggregate), the verdict, the tables and figures, each section declared once
(sections) and written as Markdown and HTML (render).

The names below are the package's interface for the commands and the tests."""

from compare.files import read_csv
from compare.report.aggregate import summarise
from compare.report.builder import (
    Built,
    build,
    keep_a_fuller_report,
    load_runs,
    preload,
    rebuild,
    write,
)
from compare.report.labels import MACHINE_IDENTITY, machine_of, precision_label
from compare.report.plots import smooth, window_step_ms
from compare.report.tables import fairness_rows, fmt, verdict_rows
from compare.report.verdict import (
    behaviour_notes,
    fairness_caveats,
    phase_clocks_differ,
    verdict_sentences,
)

__all__ = ["MACHINE_IDENTITY", "Built", "behaviour_notes", "build", "fairness_caveats",
           "fairness_rows", "fmt", "keep_a_fuller_report", "load_runs", "machine_of",
           "phase_clocks_differ", "precision_label", "preload", "read_csv", "rebuild", "smooth",
           "summarise", "verdict_rows", "verdict_sentences", "window_step_ms", "write"]
