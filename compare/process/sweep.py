"""`cnncompare sweep`: what each setting is worth, per framework, as a measured matrix.

The cartesian product of the `--vary` settings, run for each framework in its own
subprocess (alternating which framework goes first), into DIR/sweep.json, sweep.md and a
self-contained sweep.html. The baseline is the first value of every varied setting; each
row's speed-up is its throughput over the baseline's, within the same framework.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any, TYPE_CHECKING

from compare import files, schema
from compare.errors import UserError
from compare.experiment import settings
from compare.experiment.config import RunConfig
from compare.machine import precision_choice
from compare.process import runner, same_device, timing, warm
from compare.process.queue import QueuedRun, run_queue
from compare.report import sweep as sweep_report
from compare.run.validate import check_against_data, check_config

if TYPE_CHECKING:  # annotations only
    from rich.console import Console


def combinations(config: RunConfig, varies: list[tuple[str, list[Any]]],
                 frameworks: list[str],
                 train_size: int | None = None) -> list[tuple[str, dict, RunConfig]]:
    """(framework, values, config) for every combination of the varied settings
    (compare.experiment.settings.VARIABLE), each config validated (against a training set of
    `train_size` images, when given); which framework goes first alternates from one
    combination to the next."""
    names = [n for n, _ in varies]
    rows = []
    for i, values in enumerate(itertools.product(*(v for _, v in varies))):
        chosen = dict(zip(names, values))
        changed = config
        for name, value in chosen.items():
            changed = settings.VARIABLE[name].apply(changed, value)
        changed = precision_choice.carry(changed)  # once per combination, for both frameworks
        order = frameworks if i % 2 == 0 else frameworks[::-1]
        for framework in order:
            changed = changed.replace(framework=framework)
            try:
                check_config(changed)
                if train_size is not None:
                    check_against_data(changed, train_size)
            except UserError as exc:
                described = ", ".join(f"{k}={v}" for k, v in chosen.items())
                raise UserError(f"--vary {described}: {exc}") from None
            rows.append((framework, chosen, changed))
    return rows


def _slug(framework: str, settings: dict) -> str:
    text = "-".join(f"{k}_{v}" for k, v in settings.items()) or "baseline"
    return f"{framework}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def run_sweep(config: RunConfig, varies: list[tuple[str, list[Any]]], frameworks: list[str],
              out: Path, command: str, train_size: int | None = None) -> int:
    """Every combination for every framework, then sweep.json/md/html; an exit code."""
    from compare.console import console as make_console
    console = make_console(stderr=True)
    for framework in frameworks:
        runner.check_installed(framework)
    todo = combinations(config, varies, frameworks, train_size)  # all valid before any runs
    out.mkdir(parents=True, exist_ok=True)
    with warm.fork_servers():  # each framework imported once for the whole sweep
        return _sweep(config, varies, out, command, todo, console)


def _sweep(config: RunConfig, varies: list[tuple[str, list[Any]]], out: Path, command: str,
           todo: list, console: Console) -> int:
    """run_sweep's work, inside its fork servers: the device check and every run."""
    same_device.check_same_device([run_config for _, _, run_config in todo])
    directory = files.SweepDir(out)
    queue = []
    for framework, chosen, run_config in todo:
        run_dir = directory.run(_slug(framework, chosen))
        queue.append(QueuedRun(f"{framework} " + " ".join(f"{k}={v}" for k, v in chosen.items()),
                               run_config.replace(out=str(run_dir.path),
                                                  tensorboard_dir=str(run_dir.tensorboard))))
    started = time.time()
    done = run_queue(queue, "sweep", config.quiet, console)
    if config.debug:  # where the wall time went
        console.print(timing.table(timing.queued_rows(done.outcomes), {},
                                   time.time() - started))
    rows = [_row(framework, chosen, outcome)
            for (framework, chosen, _), (_, outcome) in zip(todo, done.outcomes)]
    for path in sweep_report.write(out, rows, varies, command):
        console.print(f"wrote {path}")
    return done.exit_code


def _row(framework: str, settings: dict, outcome: runner.Outcome | None) -> dict:
    """One row of sweep.json: the run's status and summary, or why it did not run."""
    if outcome is None:
        return {"framework": framework, "settings": settings, "status": "not run",
                "summary": None, "path": None, "error": "interrupted"}
    summary = None
    if outcome.result_path.exists():
        try:
            summary = schema.read_result(outcome.result_path)["summary"]
        except schema.SchemaError:
            summary = None
    return {"framework": framework, "settings": settings, "status": outcome.status,
            "summary": summary, "path": str(outcome.result_path), "error": outcome.error}
