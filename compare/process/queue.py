"""Runs many framework subprocesses in turn: the queue `compare` and `sweep` share.

A caller builds its queue (in the order that alternates the frameworks), this module runs
it with one progress bar, keeps going when a run fails, and on Ctrl-C or SIGTERM stops
after the run in progress has written its partial result; the caller builds its report
from the outcomes.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compare.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from compare.experiment.config import FRAMEWORKS, RunConfig
from compare.process import runner
from compare.run import progress as progress_lines
from compare.run import shutdown

if TYPE_CHECKING:  # annotations only
    from rich.console import Console


@dataclass(frozen=True)
class QueuedRun:
    """One framework subprocess to run, and how it is named to the user."""

    label: str  # e.g. "tf seed 0" or "torch precision=mixed"
    config: RunConfig  # framework, seed and out already set
    resume: bool = False  # keep a completed result; continue an unfinished one from its checkpoint
    own_loop: bool = False  # the framework's own loop on this config (compare.run.own_loop)


@dataclass(frozen=True)
class QueueResult:
    """What became of each queued run: its outcome, or None when it never started."""

    outcomes: list[tuple[QueuedRun, runner.Outcome | None]]
    interrupted: bool
    interrupt_code: int = EXIT_INTERRUPTED  # 128 + the stop signal

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return self.interrupt_code
        done = all(o is not None and o.status == "completed" for _, o in self.outcomes)
        return EXIT_OK if done else EXIT_FAILED


def run_queue(queue: list[QueuedRun], title: str, quiet: bool,
              console: Console) -> QueueResult:
    """Run every queued config in its own subprocess, in order, with one progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    outcomes: list[tuple[QueuedRun, runner.Outcome | None]] = []
    interrupted, interrupt_code = False, EXIT_INTERRUPTED
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[last]}"), TimeElapsedColumn())
    total_epochs = sum(q.config.epochs for q in queue)
    with Progress(*columns, console=console, disable=quiet, transient=False) as progress:
        task = progress.add_task(title, total=total_epochs, last="")
        for index, queued in enumerate(queue):
            stop = shutdown.parent_stop()
            if stop is not None and not interrupted:  # a stop between two runs
                interrupted, interrupt_code = True, 128 + stop
            if interrupted:
                outcomes.append((queued, None))
                continue
            status_of = runner.own_loop_status if queued.own_loop else runner.result_status
            if queued.resume and status_of(Path(queued.config.out)) == "completed":
                outcomes.append((queued, runner.Outcome(queued.config.framework,
                                                        Path(queued.config.out), EXIT_OK,
                                                        "completed", None, queued.own_loop)))
                progress.advance(task, queued.config.epochs)
                continue
            label = f"{queued.label} ({index + 1}/{len(queue)})"
            progress.update(task, description=label, last="")  # no figures of the run before
            epochs_before = progress.tasks[0].completed

            def on_line(line: str, label: str = label) -> None:
                window = progress_lines.window_text(line)
                if window is not None:  # live, within an epoch: shown, never printed
                    progress.update(task, last=window[:70])
                    return
                if " epoch " in line and "test_acc" in line:  # a trainer's epoch line
                    progress.advance(task)
                    progress.update(task, last=line.split("  ", 1)[-1][:70])
                if quiet:
                    print(f"{label}: {line}", flush=True)

            outcome = runner.run_framework(queued.config.replace(quiet=True), on_line=on_line,
                                           resume=queued.resume and not queued.own_loop,
                                           own_loop=queued.own_loop)
            outcomes.append((queued, outcome))
            progress.update(task, completed=epochs_before + queued.config.epochs)
            interrupted, interrupt_code = outcome.interrupted, outcome.code
            if outcome.status != "completed":
                console.print(f"{label}: {outcome.status}"
                              + (f": {outcome.error}" if outcome.error else ""))
    return QueueResult(outcomes, interrupted, interrupt_code if interrupted else EXIT_INTERRUPTED)


def replay_command() -> str:
    """The command line that ran this process, to replay it."""
    return "cnncompare " + shlex.join(sys.argv[1:])


def seed_order(seeds: int, first_seed: int) -> list[tuple[str, int]]:
    """tf, torch, torch, tf, tf, torch, ...: each framework goes first equally often, so
    slow drift of the machine (clocks, thermals, caches) hits both alike."""
    order: list[tuple[str, int]] = []
    for i in range(seeds):
        pair = FRAMEWORKS if i % 2 == 0 else FRAMEWORKS[::-1]
        order.extend((framework, first_seed + i) for framework in pair)
    return order
