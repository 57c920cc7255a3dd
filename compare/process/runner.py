"""Run a framework's trainer in its own subprocess, and check it can run at all."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, cast

from compare import files, schema
from compare.errors import EXIT_INTERRUPTED, FrameworkMissing
from compare.experiment.config import FRAMEWORK_NAMES, RunConfig
from compare.experiment.frameworks import REQUIRES, impl_module, process_environment
from compare.process import warm
from compare.run import progress, shutdown, wall_time
from compare.setup.config import Interpreter, interpreter, read

# each framework's entry (a test may name a stand-in here)
MODULES = {framework: impl_module(framework, "train") for framework in REQUIRES}


@dataclass
class Outcome:
    framework: str
    out: Path
    code: int
    status: str  # the result's summary.status, or "failed" when there is no valid result
    error: str | None  # the last error line, when the run did not complete
    own_loop: bool = False  # the framework's own loop (own-loop.json), not a run
    # when it was launched and ended, on time.time()'s clock, and the marks the process
    # printed (compare.run.wall_time): where its wall time went
    timing: dict | None = None

    @property
    def result_path(self) -> Path:
        run = files.RunDir(self.out)
        return run.own_loop if self.own_loop else run.result

    @property
    def interrupted(self) -> bool:
        """It stopped on a stop signal (compare.run.shutdown), so what was queued after it
        waits."""
        return shutdown.is_interrupt(self.code)


def python_for(framework: str) -> str:
    """The interpreter a framework runs in (one virtual environment per framework, e.g.
    TensorFlow's CUDA 12 wheels apart from PyTorch's CUDA 13 ones): $CNNCOMPARE_TF_PYTHON /
    $CNNCOMPARE_TORCH_PYTHON where set, else the one `cnncompare setup gpu` recorded, else
    this process's (compare.setup.config.interpreter, the one rule)."""
    return interpreter(framework).python


def check_installed(framework: str) -> None:
    """FrameworkMissing naming the pip command, if the framework cannot be imported."""
    chosen = interpreter(framework)
    python = chosen.python
    if python != sys.executable:  # another environment: ask its interpreter
        probe = ("import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
                 "if importlib.util.find_spec(m) is None))")
        try:
            done = subprocess.run([python, "-c", probe, *REQUIRES[framework]],
                                  capture_output=True, text=True, timeout=120)
        except OSError as exc:
            raise FrameworkMissing(f"{FRAMEWORK_NAMES[framework]}: cannot start {python} "
                                   f"({chosen.described}): {exc}{_fix(chosen)}") from None
        if done.returncode != 0:
            raise FrameworkMissing(f"{FRAMEWORK_NAMES[framework]}: the interpreter "
                                   f"{python} ({chosen.described}) does not run: "
                                   f"{done.stderr.strip().splitlines()[-1:]}{_fix(chosen)}")
        missing = done.stdout.split()
    else:
        missing = [m for m in REQUIRES[framework] if importlib.util.find_spec(m) is None]
    if missing:
        where = f" in {python} ({chosen.described})" if python != sys.executable else ""
        raise FrameworkMissing(f"{FRAMEWORK_NAMES[framework]} is not installed{where} (missing "
                               f"{', '.join(missing)}): pip install {' '.join(missing)}"
                               f"{_fix(chosen)}")


def _fix(chosen: Interpreter) -> str:
    """What mends an interpreter the set-up recorded: running it again."""
    recorded = read().environments.get(chosen.framework)
    if chosen.source != "setup" or recorded is None:
        return ""
    return f", or run `{recorded.setup_command}` again"


def child_environment() -> dict[str, str]:
    """A framework process's environment (compare.experiment.frameworks), with this process's
    id so that it can tell when its parent has died."""
    return {**process_environment(), shutdown.PARENT_PID_ENV: str(os.getpid())}


def command(config_path: Path, framework: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [python_for(framework), "-m", MODULES[framework], str(config_path), *extra]


def _noise(line: str) -> bool:
    """TensorFlow/absl start-up lines that say nothing about the run."""
    return line.startswith(("WARNING: All log messages before absl", "I0000 ", "E0000 ", "W0000 ",
                            "To enable the following instructions",
                            "USDT:")) or "DeviceProperties.cpp" in line  # torch.profiler (Kineto)


def run_framework(config: RunConfig, on_line: Callable[[str], None] | None = None,
                  extra: tuple[str, ...] = (), resume: bool = False,
                  directory: Path | None = None, own_loop: bool = False) -> Outcome:
    """Run `config.framework` in a subprocess, writing into config.out; with `resume`,
    continuing from the checkpoint there (compare.run.checkpoint). `directory` (default
    config.out) takes this process's config and log: a process other than rank 0 of a
    multi-process launch (compare.machine.cluster) writes no result, and its status is its
    exit. With `own_loop`, the framework's own loop trains instead (compare.run.own_loop)
    and writes own-loop.json.

    With `on_line` None the child shares the terminal (live progress bar); otherwise its
    output goes line by line to `on_line` and to the log. Ctrl-C reaches the child
    too (same process group); other stop signals are passed on to it under
    compare.run.shutdown.forwarding(). Either way we wait for it to finish writing.
    """
    out = Path(config.out)
    stop = shutdown.parent_stop()
    if stop is not None:  # stopping: start nothing new
        return Outcome(config.framework, out, 128 + stop, "interrupted", "interrupted",
                       own_loop)
    if own_loop:
        extra = (*extra, "--own-loop")
    if on_line is not None:  # each timing window's figures too, shown live by on_line's owner
        extra = (*extra, "--window-lines")
    own = files.RunDir(out if directory is None else directory)
    own.path.mkdir(parents=True, exist_ok=True)
    config_path = files.write_atomic(own.config, lambda f: f.write(config.to_json()))
    argv = command(config_path, config.framework, (*extra, *(("--resume",) if resume else ())))
    launched = time.time()
    process, stream = _start(argv, config.framework, on_line, warm_ok=directory is None)
    with shutdown.watching(process):
        followed = _follow(stream, own.log, on_line)
        code = _wait(process)
    timing = {"launched": launched, **followed.marks, "exited": time.time()}
    if followed.interrupted and code == 0:
        code = EXIT_INTERRUPTED
    if own_loop:
        return Outcome(config.framework, out, code, own_loop_status(out), followed.last_error,
                       True, timing)
    status, last_error = _status(out, own, code, followed.last_error, config.framework)
    return Outcome(config.framework, out, code, status, last_error, timing=timing)


def _start(argv: list[str], framework: str, on_line: Callable[[str], None] | None,
           warm_ok: bool) -> tuple[subprocess.Popen[str] | warm.ForkedProcess, IO[str]]:
    """The framework's process and the stream its lines come on: its stderr where it shares
    the terminal (`on_line` None); else its merged output, forked from the framework's
    server inside compare and sweep (compare.process.warm) where `warm_ok`."""
    env = child_environment()
    process: subprocess.Popen[str] | warm.ForkedProcess
    if on_line is None:
        process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
        stream = process.stderr
    else:
        process = ((warm.start(argv, framework, env) if warm_ok else None)
                   or subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True))
        stream = process.stdout
    assert stream is not None  # a pipe was asked for
    return process, stream


@dataclass
class _Followed:
    """What a framework process said while it ran."""

    last_error: str | None = None  # its last "error:" line
    marks: dict[str, float] = field(default_factory=dict)  # its wall-time marks (wall_time)
    interrupted: bool = False  # Ctrl-C reached this process too while it ran


def _follow(stream: IO[str], log_path: Path, on_line: Callable[[str], None] | None
            ) -> _Followed:
    """Read the process's lines to their end: each to its log (but live window figures and
    wall-time marks), its errors remembered, the rest shown (on_line, or the terminal)."""
    followed = _Followed()
    with open(log_path, "a") as log:
        while True:
            try:
                line = stream.readline()
            except KeyboardInterrupt:  # the child got SIGINT too: let it finish writing
                followed.interrupted = True
                continue
            if not line:
                return followed
            if progress.window_text(line) is not None:  # live figures, not the run's record
                if on_line is not None:
                    on_line(line.rstrip("\n"))
                continue
            log.write(line)
            log.flush()
            if (marks := wall_time.parse(line)) is not None:
                followed.marks.update(marks)
                continue
            if line.startswith("error:"):
                followed.last_error = line[len("error:"):].strip()
            if _noise(line):
                continue
            if on_line is None:
                sys.stderr.write(line)
            else:
                on_line(line.rstrip("\n"))


def _status(out: Path, own: files.RunDir, code: int, last_error: str | None,
            framework: str) -> tuple[str, str | None]:
    """A finished run's status and error: from its result (the chief, rank 0), else from
    its exit; a death mid-epoch, a signal or a stop before the first result said so."""
    chief = own.path == Path(out)
    status = result_status(out) if chief else "completed" if code == 0 else "failed"
    if code < 0:  # killed by a signal: say which
        last_error = f"{framework} process killed by {signal.Signals(-code).name}"
    if status == "running":  # the child died mid-epoch: its last write is still 'running'
        status = "failed"
        last_error = record_death(files.RunDir(out).result, code, own.log)
    if code != 0 and status == "completed":
        status = "failed"
    if shutdown.is_interrupt(code) and (not chief or not files.RunDir(out).result.exists()):
        status = "interrupted"  # stopped while starting up, before its first result
    return status, last_error


LOG_TAIL_LINES = 20  # of a dead trainer's log, kept in its result


def exit_reason(code: int) -> str:
    """How a trainer process ended, in words: 'killed by SIGKILL', 'exited with code 1'."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def record_death(result_path: Path, code: int, log_path: Path) -> str:
    """A trainer that ended without writing its end (SIGKILL, the kernel's OOM killer, a
    crash inside a CUDA library) left its result 'running'; its parent, which saw the exit,
    marks it failed with how it ended and the last lines of its log. The error written."""
    reason = (f"the trainer process {exit_reason(code)} without writing its end (the kernel's "
              "OOM killer and crashes in native libraries end a process so)")
    try:
        lines = [ln.rstrip("\n") for ln in log_path.read_text(errors="replace").splitlines()
                 if ln.strip() and not _noise(ln)]
    except OSError:
        lines = []
    try:
        schema.mark_failed(result_path, reason, {"code": code, "reason": exit_reason(code),
                                                  "log_tail": lines[-LOG_TAIL_LINES:]})
    except schema.SchemaError:
        pass  # nothing valid to mark: the caller reports the exit alone
    return reason


def _wait(process: subprocess.Popen[str] | warm.ForkedProcess) -> int:
    while True:
        try:
            return process.wait()
        except KeyboardInterrupt:
            continue


def result_status(out: Path) -> str:
    try:
        return schema.read_result(files.RunDir(out).result)["summary"].status
    except schema.SchemaError:
        return "failed"


def own_loop_status(out: Path) -> str:
    try:
        return schema.read_own_loop(files.RunDir(out).own_loop).status
    except schema.SchemaError:
        return "failed"


def run_probe(config: RunConfig, path: Path, steps: int, perturb: bool = False,
              floor: Path | None = None,
              then: tuple[RunConfig, Path, Path] | None = None) -> tuple[int, str | None]:
    """The parity probe of `config.framework`, as configured, written to `path` (initial
    weights moved by 1 ulp with `perturb`), and with `floor` a second one so moved, written
    there by the same process; with `then` (a config, a path, a floor's path), that config's
    probe and floor next, by the same process; (exit code, last error)."""
    extra = ("--parity", str(path), "--parity-steps", str(steps)) + (("--perturb",) * perturb)
    extra += ("--parity-floor", str(floor)) if floor is not None else ()
    if then is not None:
        follow, follow_path, follow_floor = then
        Path(follow.out).mkdir(parents=True, exist_ok=True)
        written = files.write_atomic(files.RunDir(Path(follow.out)).config,
                                     lambda f: f.write(follow.to_json()))
        extra += ("--then", str(written), str(follow_path), str(follow_floor))
    outcome = run_framework(config, on_line=lambda line: None, extra=extra)
    return outcome.code, outcome.error


def concurrently(jobs: list[Callable[[], Any]], at_once: int = 2) -> list[Any]:
    """Each job's result, in order, at most `at_once` running together (each a subprocess's
    wait: untimed work such as the parity probes and the environment queries, whose start-up
    dominates). Ctrl-C reaches the children (same process group); their results still come
    back as they end."""
    from concurrent.futures import ThreadPoolExecutor, wait
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        futures = [pool.submit(job) for job in jobs]
        while True:
            try:
                wait(futures)
                break
            except KeyboardInterrupt:  # the children stop and write; wait for them
                continue
    return [f.result() for f in futures]


def framework_call(framework: str, module: str, args: list[str],
                   timeout: float) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` in the framework's interpreter (its subprocess, the checkout on
    PYTHONPATH), output captured; FrameworkMissing if it is not installed. Inside a command
    that holds fork servers (compare.process.warm), a forked child answers: the framework's
    import is paid once for the query and the runs after it. A child's stdout and stderr are
    one stream, so its answer is both; callers read its last line of JSON (_answer)."""
    check_installed(framework)
    argv = [python_for(framework), "-m", module, *args]
    env = child_environment()
    forked = warm.start(argv, framework, env)
    if forked is None:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    output = forked.communicate(timeout)
    assert forked.returncode is not None  # communicate waited for it
    return subprocess.CompletedProcess(argv, forked.returncode, output, output)


def last_error(proc: subprocess.CompletedProcess) -> str:
    """The last line a failed framework process printed that says something, else its exit."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not _noise(ln)]
    return lines[-1] if lines else f"exit {proc.returncode}"


def framework_environment(framework: str) -> schema.FrameworkEnvironment:
    """What the framework sees (its train module's --env), or an error entry."""
    try:
        proc = framework_call(framework, MODULES[framework], ["--env"], timeout=300)
    except FrameworkMissing as exc:
        return {"framework": framework, "error": str(exc)}
    if proc.returncode != 0:
        return {"framework": framework, "error": last_error(proc)}
    return cast(schema.FrameworkEnvironment, _answer(proc))  # its describe_environment


def framework_models(framework: str, names: list[str]) -> dict:
    """Each network as the framework builds it (its train module's --describe-models), or an
    error entry."""
    try:
        proc = framework_call(framework, MODULES[framework], ["--describe-models", *names],
                              timeout=600)
    except FrameworkMissing as exc:
        return {"error": str(exc)}
    if proc.returncode != 0:
        return {"error": last_error(proc)}
    return _answer(proc)


def _answer(proc: subprocess.CompletedProcess) -> dict:
    """A query's answer: its last line of JSON (a forked child's output also holds what the
    framework logged on stderr, which may follow)."""
    import json
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1])
