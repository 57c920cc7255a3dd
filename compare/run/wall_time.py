"""Where a framework process's wall time goes, before its epochs: starting and importing the
framework, loading the data, building the trainer (network, optimizer, pipelines).

The process marks each stage as it ends (`mark`) and prints them in one line at its end
(`report`); compare.process.runner reads that line into the run's Outcome, and
compare.process.timing adds the epochs' figures from the run's result and prints the whole
command's breakdown (`compare --debug`). A process forked from a fork server
(compare.run.fork_server) starts at its fork, so its import is what it did not inherit.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PREFIX = "cnncompare-wall-time: "  # the line's start; the runner keeps it off the terminal
_marks: dict[str, float] = {}


def process_start() -> float | None:
    """When this process began, on time.time()'s clock (Linux's /proc; None elsewhere)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # starttime, the 22nd field, in clock ticks after boot
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def mark(stage: str) -> None:
    """`stage` ended now (the first mark of a name counts)."""
    _marks.setdefault(stage, time.time())


def report() -> None:
    """Print the marks in one line on stderr for the parent, once the process has loaded a
    run's data (a query such as --env prints only its answer, on stdout)."""
    if "data" in _marks:
        print(PREFIX + json.dumps({"started": process_start(), "ended": time.time(),
                                   **_marks}), file=sys.stderr, flush=True)


def parse(line: str) -> dict | None:
    """The marks of a `report` line, or None for any other line."""
    if not line.startswith(PREFIX):
        return None
    try:
        return json.loads(line[len(PREFIX):])
    except ValueError:
        return None
