"""`cnncompare compare`: the parity check, both frameworks over the seeds in alternating
order, the report; `--resume` finishes what did not complete, and `--framework` runs one
framework's part now and the rest later."""

from __future__ import annotations

import dataclasses
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from compare import files, report, schema
from compare.errors import EXIT_FAILED, UserError
from compare.experiment import compile_state, parity_record
from compare.experiment import parity as parity_module
from compare.experiment.best import EpochTimes, GraphsRule, best_config
from compare.experiment.config import FRAMEWORK_NAMES, FRAMEWORKS, ComparisonConfig, RunConfig
from compare.experiment.parity_record import ParityRecord
from compare.machine import precision_choice
from compare.process import parity_check, runner, same_device, timing, warm
from compare.process.queue import QueuedRun, replay_command, run_queue, seed_order
from compare.run import shutdown

if TYPE_CHECKING:  # annotations only
    from rich.console import Console


def compare_frameworks(config: RunConfig, comparison: ComparisonConfig, out: Path,
                       command: str | None = None, resume: bool = False,
                       frameworks: tuple[str, ...] = FRAMEWORKS) -> int:
    """The whole comparison into `out`: parity check, both frameworks over the seeds (and,
    with comparison.own_loops, each framework's own loop on each seed's recipe), the report;
    returns the exit code. One framework failing does not stop the other.

    With `resume`, rerun only what did not complete: a passed parity record is kept,
    completed runs are kept, unfinished ones continue from their checkpoints. `frameworks`
    runs only some of the comparison's runs now (a GPU machine whose TensorFlow arrives
    later): the parity check waits for an invocation that runs both, the others' runs are
    listed as not run yet, and `compare --resume` runs what is left.

    Each framework is imported once for the whole command (compare.process.warm): its
    processes are forked from a server that imported it, each a new process all the same.
    """
    with warm.fork_servers():
        return _compare(config, comparison, out, command, resume, frameworks)


def _compare(config: RunConfig, comparison: ComparisonConfig, out: Path, command: str | None,
             resume: bool, frameworks: tuple[str, ...]) -> int:
    from compare.console import console as make_console
    console = make_console(stderr=True)
    started, stages = time.time(), {}  # where the wall time went, with --debug
    # The report's imports load meanwhile (the framework servers' start and the parity check
    # are untimed) and are done before the first timed run (`importing.join()`)
    importing = threading.Thread(target=report.preload, args=(True,), name="report-imports",
                                 daemon=True)
    importing.start()
    selected = tuple(fw for fw in FRAMEWORKS if fw in frameworks)
    out.mkdir(parents=True, exist_ok=True)
    for framework in selected:
        runner.check_installed(framework)
    kinds = same_device.check_same_device([config.replace(framework=fw) for fw in selected])
    config = precision_choice.carry(config)  # once, for every run of this command (--best: its own)
    device_kind = config.device if config.device != "auto" else next(iter(kinds.values()), "cpu")
    directory = files.ComparisonDir(out)
    command, invocations = _record_invocation(directory, config, comparison,
                                              command or replay_command(), resume, selected)
    parity = _saved_parity(out) if resume else None
    if parity is not None:
        console.print(f"parity check: passed before, kept ({directory.parity})")
    elif selected == FRAMEWORKS:
        parity = _parity_check(config, comparison, directory, console)
        stages["checks and parity"] = time.time() - started
    else:
        console.print(f"parity check: not run ({_names(selected)} alone in this invocation; "
                      f"`cnncompare compare --resume {out}` runs it with the rest)")
    if parity is not None:
        console.print(parity_module.describe(parity))
    planned = planned_runs(config, comparison, directory, resume, device_kind)
    queue = [q for q in planned if q.config.framework in selected]
    later = [q for q in planned if q.config.framework not in selected]
    earlier = earlier_results(later)
    waiting = [_not_run(q, f"not run yet: this invocation ran {_names(selected)} alone "
                           f"(cnncompare compare --resume {out} runs the rest)")
               for q in later if not files.RunDir(Path(q.config.out)).result.exists()]
    order = order_note(invocations)
    stop = shutdown.parent_stop()
    if stop is not None:  # stopped during the parity check: report that nothing ran
        report.write(out, report.load_runs(earlier), parity, command,
                     [_not_run(q, "interrupted") for q in queue] + waiting, order_note=order)
        return 128 + stop
    if parity is not None and not parity["passed"] and not comparison.ignore_parity:
        not_run = [_not_run(q, "parity check failed") for q in queue] + waiting
        paths = report.write(out, report.load_runs(earlier), parity, command, not_run,
                             order_note=order)
        console.print(f"error: the parity check {_parity_failure(parity)}; see {paths[1]} (or "
                      f"pass --ignore-parity)")
        return EXIT_FAILED

    importing.join()  # no import competes with a timed run for the CPU
    if config.compile_cache == "warm":  # untimed: fills what the timed runs read
        _warm(warm_ups(queue, directory), "compare: compile caches warm-up (untimed)", config,
              console)
    if comparison.best and device_kind == "gpu":  # a resume keeps the rule it had
        queue = (with_graphs_rule(queue, _saved_graphs_rule(directory)) if resume
                 else _graphs_decided(queue, directory, config, console))
    done = run_queue(queue, "compare", config.quiet, console)
    reported = time.time()
    for path in write_reports(directory, done.outcomes, earlier, waiting, parity, command, order):
        console.print(f"wrote {path}")
    _print_verdict(out, console)
    if config.debug:
        stages["report"] = time.time() - reported
        console.print(timing.table(timing.queued_rows(done.outcomes), stages,
                                   time.time() - started))
    return done.exit_code


class Invocation(TypedDict):
    """One `compare` command that worked on a comparison's folder (comparison.json)."""

    frameworks: list[str]  # those it ran
    started_at: NotRequired[str]


def _record_invocation(directory: files.ComparisonDir, config: RunConfig,
                       comparison: ComparisonConfig, command: str, resume: bool,
                       selected: tuple[str, ...]) -> tuple[str, list[Invocation]]:
    """Write comparison.json with this invocation added; the command a report replays (a
    resumed comparison's first) and every invocation so far."""
    saved = files.read_json_or_empty(directory.comparison) if resume else {}
    command = saved.get("command") or command  # a resumed report replays the first command
    invocations: list[Invocation] = saved.get("invocations") or (
        [{"frameworks": list(FRAMEWORKS)}] if resume else [])
    invocations = invocations + [{"frameworks": list(selected),
                                  "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}]
    files.write_json(directory.comparison, {
        "config": config.to_dict(), **dataclasses.asdict(comparison), "command": command,
        **saved, "invocations": invocations})
    return command, invocations


def _parity_check(config: RunConfig, comparison: ComparisonConfig,
                  directory: files.ComparisonDir, console: Console) -> ParityRecord:
    """The parity check of both builds, written to DIR/parity.json."""
    console.print(f"parity check: both builds on the first batch, float64 on the CPU, then "
                  f"{comparison.parity_steps} SGD steps; the timed configuration's drift "
                  f"beside it")
    with (nullcontext() if config.quiet else  # seconds of imports: show that work goes on
          console.status("starting both frameworks, then their parity probes")):
        parity = parity_check.run_parity(config.replace(quiet=True), directory.parity_dir,
                                         comparison.parity_steps)
    files.write_json(directory.parity, parity)
    return parity


def _parity_failure(parity: ParityRecord) -> str:
    return (f"could not run: {parity['error']}" if parity.get("error") else
            f"failed ({', '.join(parity.get('failed', []))}): the two builds are not the same "
            f"experiment")


def planned_runs(config: RunConfig, comparison: ComparisonConfig, directory: files.ComparisonDir,
                 resume: bool, device_kind: str = "cpu") -> list[QueuedRun]:
    """Every run of the comparison, in the order that alternates the frameworks seed by seed
    (seed_order); with own loops, each run's own-loop twin beside it; on a GPU, where the
    framework's own default compile state differs from the run's, its run at that default
    (compare.experiment.compile_state, in DIR/defaults); and with --best its run at the
    framework's own best settings for `device_kind` (compare.experiment.best, in DIR/best,
    a comparison of its own); the order of each group turned on every other seed so that no
    form always runs on a machine another has warmed."""
    planned = []
    best_directory = files.ComparisonDir(directory.best)
    defaults_directory = files.ComparisonDir(directory.defaults)
    for index, (framework, seed) in enumerate(seed_order(comparison.seeds, config.seed)):
        # One phase profile per framework (and form): the split of a step is the setting's,
        # not the seed's, and each profile costs its steps and a trace
        run = config.replace(framework=framework, seed=seed,
                             out=str(directory.run(framework, seed).path),
                             tensorboard_dir=str(directory.tensorboard),
                             profile_steps=config.profile_steps if seed == config.seed else 0,
                             compile_cache_dir=_cache_folder(directory, config, framework))
        pair = [QueuedRun(f"{framework} seed {seed}", run, resume)]
        own_out = str(directory.own_loop(framework, seed).path)
        if comparison.own_loops and config.micro_batches == 1:  # own loops take whole batches
            if resume or config.devices > 1:  # a resumed run's epochs, or several processes
                pair.append(QueuedRun(f"{framework} seed {seed} own loop", run.replace(
                    out=own_out, tensorboard_dir=None), resume, True))
            else:  # in the run's process, a window of each loop in turn (compare.run.own_loop)
                pair[0] = QueuedRun(f"{framework} seed {seed}",
                                    run.replace(own_loop_beside=own_out), resume)
        own_default = (compile_state.at_default(run, device_kind)
                       if comparison.defaults and device_kind == "gpu" else None)
        if own_default is not None:
            pair.append(QueuedRun(
                f"{framework} seed {seed} at its defaults",
                own_default.replace(out=str(defaults_directory.run(framework, seed).path),
                                    tensorboard_dir=str(defaults_directory.tensorboard),
                                    compile_cache_dir=_cache_folder(directory, config, framework,
                                                                    "defaults")),
                resume))
        if comparison.best:
            best = precision_choice.carry(best_config(run, framework, device_kind)).replace(
                out=str(best_directory.run(framework, seed).path),
                tensorboard_dir=str(best_directory.tensorboard),
                compile_cache_dir=_cache_folder(directory, config, framework, "best"))
            pair.append(QueuedRun(f"{framework} seed {seed} best settings", best, resume))
        planned += pair if (index // 2) % 2 == 0 else pair[::-1]
    if comparison.turns and device_kind == "cpu" and not resume and config.devices == 1:
        return side_by_side(planned)
    return planned


def _cache_folder(directory: files.ComparisonDir, config: RunConfig, framework: str,
                  variant: str = "matched") -> str | None:
    """Where a warm comparison keeps one framework's compile caches for one form of its runs
    (matched, at its defaults, at its best: each compiles programs of its own); None when
    cold (each run makes its own, compare.run.compile_cache)."""
    if config.compile_cache != "warm":
        return None
    return str(directory.path / "compile-cache" / f"{variant}-{framework}")


def warm_ups(queue: list[QueuedRun], directory: files.ComparisonDir) -> list[QueuedRun]:
    """One untimed run for each cache folder a compiling run of `queue` reads, in the queue's
    order: the first such run's configuration for one epoch (the compiled programs do not
    depend on the epochs: the learning rate enters each step as an input), its own loop
    beside it where the runs have one, so that its programs are cached too. Its results go
    to DIR/warm-up, which no report reads. A folder already filled (a resumed comparison's)
    is not warmed again."""
    warmed: dict[str, QueuedRun] = {}
    for queued in queue:
        folder = queued.config.compile_cache_dir
        if folder is None or folder in warmed or queued.own_loop \
                or not compile_state.run_compiles(queued.config) \
                or _filled(Path(folder), directory.warm_up / Path(folder).name):
            continue
        out = directory.warm_up / Path(folder).name
        warmed[folder] = QueuedRun(
            f"{queued.config.framework} warm-up ({Path(folder).name})",
            queued.config.replace(
                epochs=1, out=str(out), profile_steps=0, tensorboard_dir=None,
                own_loop_beside=(str(out / "own-loop") if queued.config.own_loop_beside
                                 else None)))
    return list(warmed.values())


GRAPHS_TRIAL_EPOCHS = 2  # a trial of each mode: its first epoch and a steady one
GRAPHS_RULE = "cuda-graphs.json"  # in DIR/best: the trials' rule, which a resume keeps


def graphs_trials(queue: list[QueuedRun],
                  directory: files.ComparisonDir) -> tuple[QueuedRun, QueuedRun] | None:
    """The untimed trials that decide whether PyTorch's best runs replay CUDA graphs: its first
    best run's configuration for GRAPHS_TRIAL_EPOCHS epochs, without and with them, at the
    comparison's cache state (warm: each mode from its own folder, warmed first); None
    without a PyTorch best run."""
    best = next((q for q in queue if q.config.variant == "best"
                 and q.config.framework == "torch" and not q.own_loop), None)
    if best is None:
        return None
    folder = best.config.compile_cache_dir

    def trial(graphs: bool) -> QueuedRun:
        name = "with-graphs" if graphs else "without-graphs"
        return QueuedRun(f"torch best, CUDA graphs {'on' if graphs else 'off'} (untimed trial)",
                         best.config.replace(
                             epochs=GRAPHS_TRIAL_EPOCHS, cuda_graphs=graphs, profile_steps=0,
                             out=str(directory.graphs_trial / name),
                             tensorboard_dir=None, own_loop_beside=None,
                             compile_cache_dir=(f"{folder}-graphs" if folder and graphs
                                                else folder)))
    return trial(False), trial(True)


def graphs_rule(epochs: int, cache_state: str, without: dict | None,
                with_graphs: dict | None) -> GraphsRule | None:
    """The rule from the two trials' run summaries (None where either trial gave no first and
    steady epoch: the best runs then keep graphs off, and say why)."""
    def times(summary: dict | None) -> EpochTimes | None:
        if not summary or not summary.get("warmup_time_s") or (
                summary.get("epochs_completed") or 0) < GRAPHS_TRIAL_EPOCHS:
            return None
        steady = (summary["train_time_s"] - summary["warmup_time_s"]) / (
            summary["epochs_completed"] - 1)
        return EpochTimes(summary["warmup_time_s"], steady)
    off, on = times(without), times(with_graphs)
    return GraphsRule(epochs, off, on, cache_state) if off and on else None


def with_graphs_rule(queue: list[QueuedRun], pays: bool) -> list[QueuedRun]:
    """The queue with PyTorch's best runs replaying CUDA graphs where the rule says they pay
    (from their own cache folder when warm), as the trials ran them."""
    if not pays:
        return queue
    return [dataclasses.replace(q, config=q.config.replace(
        cuda_graphs=True, compile_cache_dir=(f"{q.config.compile_cache_dir}-graphs"
                                             if q.config.compile_cache_dir else None)))
            if q.config.variant == "best" and q.config.framework == "torch" else q
            for q in queue]


def _graphs_decided(queue: list[QueuedRun], directory: files.ComparisonDir, config: RunConfig,
                    console: Console) -> list[QueuedRun]:
    """Runs the CUDA graphs trials (untimed), writes their rule to DIR/best/cuda-graphs.json
    and returns the queue it gives."""
    trials = graphs_trials(queue, directory)
    if trials is None:
        return queue
    if config.compile_cache == "warm":
        _warm(warm_ups([trials[1]], directory), "compare: CUDA graphs warm-up (untimed)", config,
              console)
    done = run_queue(list(trials), "compare: CUDA graphs trial (untimed)", config.quiet,
                     console)
    if shutdown.parent_stop() is not None:  # stopped: decide on the resume, not now
        return queue
    summaries = [schema.read_result(o.result_path)["summary"].to_dict()
                 if o is not None and o.result_path.exists() else None
                 for _, o in done.outcomes]
    epochs = next(q.config.epochs for q in queue if q.config.variant == "best")
    rule = graphs_rule(epochs, config.compile_cache, *summaries)
    record = rule.to_dict() if rule else {"pays": False, "words": "CUDA graphs off in "
                                          "PyTorch's best runs: a trial gave no steady epoch"}
    files.write_json(Path(directory.best) / GRAPHS_RULE, record)
    console.print(record["words"])
    return with_graphs_rule(queue, rule is not None and rule.pays)


def _saved_graphs_rule(directory: files.ComparisonDir) -> bool:
    """What the comparison's trials decided, for its resume (graphs off where none did)."""
    path = Path(directory.best) / GRAPHS_RULE
    return path.exists() and bool(files.read_json(path).get("pays"))


def _filled(folder: Path, warm_up: Path) -> bool:
    """Whether a cache folder holds what an earlier invocation's warm-up left, that warm-up
    completed (a resumed comparison warms only the folders it lacks: on another machine, all
    of them)."""
    result = files.RunDir(warm_up).result
    return (folder.is_dir() and any(path.is_file() for path in folder.rglob("*"))
            and result.exists() and schema.read_result(result)["summary"].status == "completed")


def _warm(queue: list[QueuedRun], title: str, config: RunConfig, console: Console) -> None:
    """Run untimed warm-ups; one that did not complete is said (its runs then find what the
    folder holds, recorded in each run's compilation.cache)."""
    for queued, outcome in run_queue(queue, title, config.quiet, console).outcomes:
        if outcome is None or outcome.status != "completed":
            console.print(f"warning: {queued.label} did not complete "
                          f"({_why_no_result(outcome)}): the runs it was to warm start from "
                          "what its cache folder holds")


def side_by_side(planned: list[QueuedRun]) -> list[QueuedRun]:
    """The plan with each seed's matched runs adjacent, first the framework that went first,
    as one group that takes turns window by window (compare.process.turns); each seed's other
    runs after them, in their order. On a CPU only: a GPU would hold both frameworks'
    memory at once."""
    seeds = list(dict.fromkeys(q.config.seed for q in planned))
    ordered: list[QueuedRun] = []
    for seed in seeds:
        runs = [q for q in planned if q.config.seed == seed]
        matched = [q for q in runs if q.config.variant == "matched" and not q.own_loop]
        grouped = [dataclasses.replace(q, turns_group=seed) for q in matched]
        others = [q for q in runs if not any(q is m for m in matched)]
        ordered += (grouped if len(grouped) > 1 else matched) + others
    return ordered


def earlier_results(later: list[QueuedRun]) -> list[Path]:
    """The results that runs of another invocation left for the matched report: the matched
    runs' (the best and defaults runs form comparisons of their own)."""
    return [result for q in later if q.config.variant == "matched"
            if (result := files.RunDir(Path(q.config.out)).result).exists()]


def write_reports(directory: files.ComparisonDir,
                  outcomes: list[tuple[QueuedRun, runner.Outcome | None]], earlier: list[Path],
                  waiting: list[dict], parity: ParityRecord | None, command: str,
                  order: str | None) -> list[Path]:
    """The reports of a comparison whose runs ended with `outcomes` (beside `earlier` results
    of other invocations and `waiting`, the runs left for them): each framework at its best
    (DIR/best) and at its defaults (DIR/defaults), each a comparison of its own that the
    matched report, written last, quotes. Returns the matched report's files."""
    best_runs = [o.result_path for q, o in outcomes if q.config.variant == "best"
                 and o is not None and o.result_path.exists()]
    if best_runs:
        report.write(directory.best, report.load_runs(best_runs),
                     parity_module.for_runs_beside(parity, "each framework at its best"),
                     command, order_note=order)
    runs = [(q, o) for q, o in outcomes if not q.own_loop and q.config.variant == "matched"]
    finished = [o.result_path for _, o in runs if o is not None and o.result_path.exists()]
    _write_defaults(directory, finished + earlier,
                    parity_module.for_runs_beside(parity, "each framework at its defaults"),
                    command, order)
    not_run = [_not_run(q, _why_no_result(o)) for q, o in runs
               if o is None or not o.result_path.exists()] + waiting
    return report.write(directory.path, report.load_runs(finished + earlier), parity, command,
                        not_run, order_note=order)


def _write_defaults(directory: files.ComparisonDir, matched: list[Path],
                    parity: ParityRecord | None,
                    command: str, order: str | None) -> None:
    """The defaults comparison (DIR/defaults): the runs of each framework that trained at its
    own defaults, in this invocation or an earlier one (compare --framework), beside the other
    framework's matched runs, which ran at its defaults."""
    ran = report.load_runs([files.ComparisonDir(directory.defaults).runs])
    if not ran:
        return
    moved = {r.get("framework") for r in ran}
    beside = [r for r in report.load_runs(matched) if r.get("framework") not in moved]
    report.write(directory.defaults, ran + beside, parity, command, order_note=order)


def order_note(invocations: list[Invocation]) -> str | None:
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
    return " and ".join(FRAMEWORK_NAMES[fw] for fw in frameworks)


def _print_verdict(out: Path, console: Console) -> None:
    """The report's opening sentences, on the terminal too (from the summary just written)."""
    summary = schema.read_summary_if_any(files.ComparisonDir(out).summary)
    if summary is None:  # the report says why it could not be written
        return
    for sentence in summary.get("verdict") or report.verdict_sentences(summary):
        console.print(sentence)


def saved_comparison(directory: Path) -> tuple[RunConfig, ComparisonConfig]:
    """The run config and comparison settings of the comparison in `directory`, to resume it
    there (wherever it was started). A comparison saved before own loops, best runs or the
    defaults runs existed ran none of them, and resumes without them."""
    path = files.ComparisonDir(directory).comparison
    if not path.exists():
        raise UserError(f"--resume {directory}: no {path.name} there, so it is not a "
                        f"comparison directory")
    try:
        saved = files.read_json(path)
        config = RunConfig.from_dict(saved["config"]).replace(out=str(directory))
        comparison = ComparisonConfig(
            seeds=saved["seeds"], parity_steps=saved["parity_steps"],
            ignore_parity=saved["ignore_parity"], own_loops=saved.get("own_loops", False),
            best=saved.get("best", False), defaults=saved.get("defaults", False),
            turns=saved.get("turns", False))
        return config, comparison
    except files.Unreadable as exc:
        raise UserError(f"--resume {directory}: {exc}") from None
    except (KeyError, TypeError) as exc:
        raise UserError(f"--resume {directory}: {path} lacks {exc}") from None


def _saved_parity(out: Path) -> ParityRecord | None:
    """The parity record of an earlier session, if it passed (a failed one is redone)."""
    parity = parity_record.from_json(files.read_json_or_empty(files.ComparisonDir(out).parity))
    return parity if parity is not None and parity["passed"] else None


def _not_run(queued: QueuedRun, reason: str) -> dict:
    return {"framework": queued.config.framework, "seed": queued.config.seed, "reason": reason}


def _why_no_result(outcome: runner.Outcome | None) -> str:
    if outcome is None or outcome.status == "interrupted":  # e.g. waiting for its first turn
        return "interrupted"
    return outcome.error or f"exit code {outcome.code}, no result written"
