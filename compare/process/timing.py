"""Where a command's wall time went, process by process (`compare --debug`, `sweep --debug`):
start (launch or fork), import, data, build, the first epoch (tracing, warm-up), the later
epochs, evaluation, and the rest (recording, writing the result and the model, exit); then
the command's own stages (the parity check, the report) and its total.

Figures come from compare.run.wall_time's marks (the framework process's clock) and its
result's epochs (compare.run.loop's clock); a stage a process did not reach is blank.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from compare import schema
from compare.process import runner

if TYPE_CHECKING:  # annotations only
    from rich.table import Table

    from compare.process.queue import QueuedRun

COLUMNS = ("start", "import", "data", "build", "first epoch", "later epochs", "evaluation",
           "rest", "process")


def breakdown(outcome: runner.Outcome) -> dict[str, float | None]:
    """The seconds of each column of COLUMNS for one process (None: not measured)."""
    t = outcome.timing or {}
    seconds: dict[str, float | None] = dict.fromkeys(COLUMNS)

    def between(start: str, end: str) -> float | None:
        return t[end] - t[start] if t.get(start) and t.get(end) else None

    start = between("launched", "started")  # the process's start is in clock ticks (/proc)
    seconds.update({"start": None if start is None else max(start, 0.0),
                    "import": between("started", "imported"),
                    # a run taking turns waits for its first turn before loading: "rest"
                    "data": between("first turn" if "first turn" in t else "imported", "data"),
                    "build": between("data", "built"),
                    "process": between("launched", "exited")})
    train, evaluation = _epochs(outcome)
    if train:
        seconds["first epoch"], seconds["later epochs"] = train[0], sum(train[1:])
    seconds["evaluation"] = evaluation
    if seconds["process"] is not None:
        known = sum(v for k, v in seconds.items() if k != "process" and v is not None)
        seconds["rest"] = max(seconds["process"] - known, 0.0)
    return seconds


def _epochs(outcome: runner.Outcome) -> tuple[list[float], float | None]:
    """Each epoch's training seconds and the evaluation's total, from what the run wrote."""
    path = Path(outcome.result_path)
    try:
        if outcome.own_loop:  # its evaluation is inside its last epoch's figures
            return list(schema.read_own_loop(path).epoch_times_s), None
        epochs = schema.read_result(path)["epochs"]
    except (schema.SchemaError, OSError, KeyError):
        return [], None
    return ([e["train_time_s"] for e in epochs],
            sum(e.get("eval_time_s") or 0.0 for e in epochs))


def table(rows: list[tuple[str, runner.Outcome | None]], stages: dict[str, float],
          total: float) -> Table:
    """A rich Table: a row per process that ran, the sum of each column, the command's own
    stages (`stages`: name -> seconds) and its total wall time."""
    from rich.table import Table
    out = Table(title=f"where the command's {total:.1f} s went (s)", title_justify="left")
    out.add_column("process")
    for column in COLUMNS:
        out.add_column(column, justify="right")
    sums = dict.fromkeys(COLUMNS, 0.0)
    for label, outcome in rows:
        if outcome is None:
            continue
        seconds = breakdown(outcome)
        for column, value in seconds.items():
            sums[column] += value or 0.0
        out.add_row(label, *(_cell(seconds[c]) for c in COLUMNS))
    out.add_row("all processes", *(_cell(sums[c]) for c in COLUMNS), end_section=True)
    for name, stage_s in stages.items():
        out.add_row(name, *([""] * (len(COLUMNS) - 1)), _cell(stage_s))
    out.add_row("command", *([""] * (len(COLUMNS) - 1)), _cell(total))
    return out


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def queued_rows(outcomes: list[tuple[QueuedRun, runner.Outcome | None]]
                ) -> list[tuple[str, runner.Outcome | None]]:
    """(label, outcome) of a queue's outcomes (compare.process.queue.QueueResult.outcomes)."""
    return [(queued.label, outcome) for queued, outcome in outcomes]

