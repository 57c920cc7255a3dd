"""Runs many framework subprocesses in turn: the one runner `compare` and `sweep` share.

A caller builds its queue (in the order that alternates the frameworks), this module runs
it with one progress bar, keeps going when a run fails, and on Ctrl-C or SIGTERM stops
after the run in progress has written its partial result; the caller builds its report
from the outcomes. `compare_frameworks` is the `compare` command.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from compare import schema
from compare.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, UserError
from compare.experiment import parity as parity_module
from compare.experiment.config import FRAMEWORKS, ComparisonConfig, RunConfig
from compare.machine import devices
from compare.process import runner, shutdown
from compare.report import build as report

COMPARISON_FILE = "compare.json"  # what `compare --resume` needs to run the rest
PARITY_FILE = "parity/parity.json"  # the parity record, kept for a resumed comparison


@dataclass(frozen=True)
class QueuedRun:
    """One framework subprocess to run, and how it is named to the user."""

    label: str  # e.g. "tf seed 0" or "torch precision=mixed"
    config: RunConfig  # framework, seed and out already set
    resume: bool = False  # keep a completed result; continue an unfinished one from its checkpoint


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


def run_queue(queue: list[QueuedRun], title: str, quiet: bool, console) -> QueueResult:
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
            if queued.resume and runner.result_status(Path(queued.config.out)) == "completed":
                outcomes.append((queued, runner.Outcome(queued.config.framework,
                                                        Path(queued.config.out), EXIT_OK,
                                                        "completed", None)))
                progress.advance(task, queued.config.epochs)
                continue
            label = f"{queued.label} ({index + 1}/{len(queue)})"
            progress.update(task, description=label)
            epochs_before = progress.tasks[0].completed

            def on_line(line: str, label=label) -> None:
                if " epoch " in line and "test_acc" in line:  # a trainer's --quiet epoch line
                    progress.advance(task)
                    progress.update(task, last=line.split("  ", 1)[-1][:70])
                if quiet:
                    print(f"{label}: {line}", flush=True)

            outcome = runner.run_framework(queued.config.replace(quiet=True), on_line=on_line,
                                           resume=queued.resume)
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
    order = []
    for i in range(seeds):
        pair = FRAMEWORKS if i % 2 == 0 else FRAMEWORKS[::-1]
        order.extend((framework, first_seed + i) for framework in pair)
    return order


def compare_frameworks(config: RunConfig, seeds: int, out: Path,
                       parity_steps: int = ComparisonConfig.parity_steps,
                       ignore_parity: bool = False, command: str | None = None,
                       resume: bool = False,
                       frameworks: tuple[str, ...] = FRAMEWORKS) -> int:
    """The whole comparison into `out`: parity check, both frameworks over the seeds, the
    report; returns the exit code. One framework failing does not stop the other.

    With `resume`, rerun only what did not complete: a passed parity record is kept,
    completed runs are kept, unfinished ones continue from their checkpoints. `frameworks`
    runs only some of the comparison's runs now (a GPU machine whose TensorFlow arrives
    later): the parity check waits for an invocation that runs both, the others' runs are
    listed as not run yet, and `compare --resume` runs what is left.
    """
    from rich.console import Console
    console = Console(stderr=True)
    selected = tuple(fw for fw in FRAMEWORKS if fw in frameworks)
    command = command or replay_command()
    out.mkdir(parents=True, exist_ok=True)
    for framework in selected:
        runner.check_installed(framework)
    devices.check_same_device([config.replace(framework=fw) for fw in selected])
    saved = _read_json(out / COMPARISON_FILE) if resume else {}
    command = saved.get("command") or command  # a resumed report replays the first command
    invocations = saved.get("invocations") or ([{"frameworks": list(FRAMEWORKS)}] if resume
                                               else [])
    invocations = invocations + [{"frameworks": list(selected),
                                  "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}]
    schema.write_json_atomic(out / COMPARISON_FILE, {
        "config": config.to_dict(), "seeds": seeds, "parity_steps": parity_steps,
        "ignore_parity": ignore_parity, "command": command, **saved,
        "invocations": invocations})

    both = selected == FRAMEWORKS
    parity = _saved_parity(out) if resume else None
    if parity is not None:
        console.print(f"parity check: passed before, kept ({out / PARITY_FILE})")
    elif both:
        console.print(f"parity check: both builds on the first batch, float32, then "
                      f"{parity_steps} SGD steps")
        parity = parity_module.run_parity(config.replace(quiet=True), out / "parity",
                                          parity_steps)
        schema.write_json_atomic(out / PARITY_FILE, parity)
    else:
        console.print(f"parity check: not run ({_names(selected)} alone in this invocation; "
                      f"`cnncompare compare --resume {out}` runs it with the rest)")
    if parity is not None:
        console.print(parity_module.describe(parity))
    planned = [QueuedRun(f"{framework} seed {seed}",
                         config.replace(framework=framework, seed=seed,
                                        out=str(out / "runs" / f"{framework}-seed{seed}"),
                                        tensorboard_dir=str(out / "tensorboard")), resume)
               for framework, seed in seed_order(seeds, config.seed)]
    queue = [q for q in planned if q.config.framework in selected]
    later = [q for q in planned if q.config.framework not in selected]
    earlier = [Path(q.config.out) / "result.json" for q in later
               if (Path(q.config.out) / "result.json").exists()]
    waiting = [_not_run(q, f"not run yet: this invocation ran {_names(selected)} alone "
                           f"(cnncompare compare --resume {out} runs the rest)")
               for q in later if not (Path(q.config.out) / "result.json").exists()]
    order = order_note(invocations)
    stop = shutdown.parent_stop()
    if stop is not None:  # stopped during the parity check: report that nothing ran
        report.write(out, report.load_runs(earlier), parity, command,
                     [_not_run(q, "interrupted") for q in queue] + waiting, order_note=order)
        return 128 + stop
    if parity is not None and not parity["passed"] and not ignore_parity:
        not_run = [_not_run(q, "parity check failed") for q in queue] + waiting
        paths = report.write(out, report.load_runs(earlier), parity, command, not_run,
                             order_note=order)
        console.print(f"error: the parity check failed ({', '.join(parity.get('failed', []))}): "
                      f"the two builds are not the same experiment; see {paths[1]} "
                      f"(or pass --ignore-parity)")
        return EXIT_FAILED

    done = run_queue(queue, "compare", config.quiet, console)
    finished = [o.result_path for _, o in done.outcomes if o is not None and o.result_path.exists()]
    not_run = [_not_run(q, _why_no_result(o)) for q, o in done.outcomes
               if o is None or not o.result_path.exists()] + waiting
    for path in report.write(out, report.load_runs(finished + earlier), parity, command,
                             not_run, order_note=order):
        console.print(f"wrote {path}")
    _print_verdict(out, console)
    return done.exit_code


def order_note(invocations: list[dict]) -> str | None:
    """When the comparison's runs were made in invocations of one framework each (compare
    --framework), the caveat that drift between them is not balanced; None when every
    invocation ran both frameworks, alternated."""
    split = [i["frameworks"] for i in invocations if sorted(i["frameworks"]) != sorted(FRAMEWORKS)]
    if not split:
        return None
    return ("the frameworks ran in separate invocations (" + ", then ".join(
        _names(tuple(fws)) for fws in split) + "), not alternated seed by seed, so drift of "
        "the machine between them is not balanced")


def _names(frameworks: tuple[str, ...]) -> str:
    from compare.experiment.config import FRAMEWORK_NAMES
    return " and ".join(FRAMEWORK_NAMES[fw] for fw in frameworks)


def _print_verdict(out: Path, console) -> None:
    """The report's opening sentences, on the terminal too (from the summary just written)."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return
    for sentence in summary.get("verdict") or report.verdict_sentences(summary):
        console.print(sentence)


def saved_comparison(directory: Path) -> tuple[RunConfig, int, int, bool]:
    """(config, seeds, parity steps, ignore parity) of the comparison in `directory`, to
    resume it there (wherever it was started)."""
    path = Path(directory) / COMPARISON_FILE
    try:
        saved = json.loads(path.read_text())
        config = RunConfig.from_dict(saved["config"]).replace(out=str(directory))
        return config, saved["seeds"], saved["parity_steps"], saved["ignore_parity"]
    except FileNotFoundError:
        raise UserError(f"--resume {directory}: no {COMPARISON_FILE} there, so it is not a "
                        f"comparison directory") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"--resume {directory}: cannot read {path}: {exc}") from None


def _saved_parity(out: Path) -> dict | None:
    """The parity record of an earlier session, if it passed (a failed one is redone)."""
    parity = _read_json(out / PARITY_FILE)
    return parity if parity.get("passed") else None


def _read_json(path: Path) -> dict:
    """The JSON object in `path`; empty when it is missing or unreadable."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _not_run(queued: QueuedRun, reason: str) -> dict:
    return {"framework": queued.config.framework, "seed": queued.config.seed, "reason": reason}


def _why_no_result(outcome: runner.Outcome | None) -> str:
    if outcome is None:
        return "interrupted"
    return outcome.error or f"exit code {outcome.code}, no result written"
