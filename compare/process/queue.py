"""Runs many framework subprocesses in turn: the queue `compare` and `sweep` share.

A caller builds its queue (in the order that alternates the frameworks), this module runs
it with one progress bar, keeps going when a run fails, and on Ctrl-C or SIGTERM stops
after the run in progress has written its partial result; the caller builds its report
from the outcomes.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from compare.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from compare.experiment.config import FRAMEWORKS, RunConfig
from compare.process import runner, turns
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
    # runs of one group, adjacent in the queue, run side by side and take turns window by window
    # (compare.process.turns), the first queued first; None: the run works alone
    turns_group: int | None = None


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
    """Run every queued config in its own subprocess, in order, with one progress bar; the
    runs of a group (QueuedRun.turns_group) side by side, taking turns window by window."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    outcomes: list[tuple[QueuedRun, runner.Outcome | None]] = []
    interrupted, interrupt_code = False, EXIT_INTERRUPTED
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[last]}"), TimeElapsedColumn())
    total_epochs = sum(q.config.epochs for q in queue)
    with Progress(*columns, console=console, disable=quiet, transient=False) as progress:
        task = progress.add_task(title, total=total_epochs, last="")
        for first, group in _groups(queue):
            stop = shutdown.parent_stop()
            if stop is not None and not interrupted:  # a stop between two runs
                interrupted, interrupt_code = True, 128 + stop
            if interrupted:
                outcomes += [(queued, None) for queued in group]
                continue
            kept = [_kept(queued) for queued in group]
            to_run = [(first + i + 1, queued) for i, (queued, done) in enumerate(zip(group, kept))
                      if done is None]
            outcomes += [(queued, done) for queued, done in zip(group, kept) if done is not None]
            progress.advance(task, sum(q.config.epochs for q, done in zip(group, kept) if done))
            if not to_run:
                continue
            labels = {index: f"{queued.label} ({index}/{len(queue)})" for index, queued in to_run}
            progress.update(task, description=" ⇄ ".join(labels.values()), last="")
            epochs_before = progress.tasks[0].completed

            def on_line(line: str, label: str) -> None:
                window = progress_lines.window_text(line)
                if window is not None:  # live, within an epoch: shown, never printed
                    progress.update(task, last=window[:70])
                    return
                if " epoch " in line and "test_acc" in line:  # a trainer's epoch line
                    progress.advance(task)
                    progress.update(task, last=line.split("  ", 1)[-1][:70])
                if quiet:
                    print(f"{label}: {line}", flush=True)

            ran = _run_side_by_side([(queued, labels[index], on_line) for index, queued in to_run])
            for (index, queued), outcome in zip(to_run, ran):
                outcomes.append((queued, outcome))
                if outcome.interrupted:
                    interrupted, interrupt_code = True, outcome.code
                if outcome.status != "completed":
                    console.print(f"{labels[index]}: {outcome.status}"
                                  + (f": {outcome.error}" if outcome.error else ""))
            progress.update(task, completed=epochs_before + sum(q.config.epochs for _, q in to_run))
    order = {id(queued): i for i, queued in enumerate(queue)}
    outcomes.sort(key=lambda pair: order[id(pair[0])])
    return QueueResult(outcomes, interrupted, interrupt_code if interrupted else EXIT_INTERRUPTED)


def _groups(queue: list[QueuedRun]) -> list[tuple[int, list[QueuedRun]]]:
    """The queue as (index of the first, runs) groups: adjacent runs of one turns_group
    together, every other run alone."""
    groups: list[tuple[int, list[QueuedRun]]] = []
    for index, queued in enumerate(queue):
        previous = groups[-1][1][-1] if groups else None
        if (previous is not None and queued.turns_group is not None
                and previous.turns_group == queued.turns_group):
            groups[-1][1].append(queued)
        else:
            groups.append((index, [queued]))
    return groups


def _kept(queued: QueuedRun) -> runner.Outcome | None:
    """A resumed run's completed result, kept as its outcome; None: it runs."""
    status_of = runner.own_loop_status if queued.own_loop else runner.result_status
    if queued.resume and status_of(Path(queued.config.out)) == "completed":
        return runner.Outcome(queued.config.framework, Path(queued.config.out), EXIT_OK,
                              "completed", None, queued.own_loop)
    return None


def _run_side_by_side(runs: list[tuple[QueuedRun, str, Callable[[str, str], None]]]
                      ) -> list[runner.Outcome]:
    """Each run's outcome; one run alone, or several side by side, each in its own thread's
    subprocess, handed the turn window by window by one arbiter (compare.process.turns), the
    first listed first."""

    def launch(queued: QueuedRun, label: str, on_line: Callable[[str, str], None],
               path: str | None = None) -> runner.Outcome:
        return runner.run_framework(queued.config.replace(quiet=True, turns=path),
                                    on_line=lambda line: on_line(line, label),
                                    resume=queued.resume and not queued.own_loop,
                                    own_loop=queued.own_loop)

    if len(runs) == 1:
        return [launch(*runs[0])]
    with turns.Arbiter(tuple(queued.config.framework for queued, _, _ in runs)) as arbiter:

        def job(queued: QueuedRun, label: str, on_line: Callable[[str, str], None]
                ) -> Callable[[], runner.Outcome]:
            def work() -> runner.Outcome:
                try:
                    return launch(queued, label, on_line, arbiter.path)
                finally:  # never wait for a process that has ended
                    arbiter.ended(queued.config.framework)
            return work

        return runner.concurrently([job(*run) for run in runs], at_once=len(runs))


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
