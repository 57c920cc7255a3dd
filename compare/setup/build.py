"""TensorFlow's environment built aside and switched in: a new folder under
$CNNCOMPARE_HOME/environments, a virtual environment there, pip's installs shown as they go,
the probe that proves it what was asked, then config.json rewritten to name it (the switch:
one atomic write), then the folder it replaced removed. An interrupted or failed build
removes its own folder and leaves config.json as it was; a folder that a killed build left
behind is removed by the next build."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

from compare import errors
from compare.errors import UserError
from compare.setup import config, plan

LOG = "setup.log"  # beside the environments: the last build's whole output
LOCK = ".setup.lock"
# what a line of pip's says that is worth a glance while it works
SHOWN = ("Collecting", "Downloading", "Using cached", "Processing", "Building wheel",
         "Installing collected packages", "Successfully installed", "Obtaining")


class SetupFailed(UserError):
    """A step of the build failed; the environment in use is unchanged."""

    exit_code = errors.EXIT_FAILED


def venv_command(root: Path) -> list[str]:
    """The command that makes a virtual environment at `root` (a test may add --without-pip)."""
    return [sys.executable, "-m", "venv", str(root)]


def pip_command(python: str) -> list[str]:
    """pip in the environment of `python` (a test names a stand-in)."""
    return [python, "-m", "pip"]


@contextmanager
def locked() -> Iterator[None]:
    """One set-up at a time: the environments' lock (flock: dropped however its owner ends),
    a UserError while another set-up holds it."""
    folder = config.environments()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"another `{config.SETUP_COMMAND}` is building in {folder}: wait "
                            "for it to finish") from None
        yield
    finally:
        os.close(fd)


def sweep_leftovers() -> list[Path]:
    """Remove the folders under the environments that config.json does not name (a build
    killed before it could clean up, or a replaced environment whose removal was cut short).
    Only under the lock: no other build is running. The folders removed."""
    recorded = {Path(env.root) for env in config.read().environments.values()}
    removed = []
    for folder in sorted(config.environments().glob(f"{plan.FRAMEWORK}-*")):
        if folder.is_dir() and folder not in recorded:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def build(wanted: plan.Wanted, console: Any) -> config.Environment:
    """A new environment holding `wanted`, in a folder of its own; nothing recorded yet. On
    any failure or interrupt its folder is removed and the exception goes on (SetupFailed:
    one line naming the step, pip's last error and the log)."""
    folder = config.environments()
    folder.mkdir(parents=True, exist_ok=True)
    root = _new_folder(folder)
    python = str(root / "bin" / "python")
    others = len(wanted.requirements) - 1
    steps = [(f"a virtual environment in {root}", venv_command(root)),
             (f"{wanted.requirements[0]} and the project's {others} other requirements",
              [*pip_command(python), "install", *wanted.requirements]),
             (f"cnncompare ({wanted.project.described}) without its dependencies",
              [*pip_command(python), "install", "--no-deps", *wanted.project.args])]
    began = time.monotonic()
    try:
        with open(folder / LOG, "w") as log, _stops_as_interrupts(), \
                console.status("starting") as status:
            for what, argv in steps:
                console.print(f"  {what}")
                _run(argv, what, log, status, folder / LOG)
        built = config.Environment(plan.FRAMEWORK, python, str(root), wanted.kind,
                                   wanted.requirements, wanted.project.described,
                                   time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        found = plan.probe(python)
        wrong = plan.stale(built, found, wanted)
        if wrong:
            raise SetupFailed(f"the new environment is not what was asked: {'; '.join(wrong)}"
                              "; the environment in use is unchanged")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    console.print(f"  built in {time.monotonic() - began:.0f} s: TensorFlow {found.tensorflow}, "
                  f"cnncompare {found.project_version}")
    return built


def switch_in(built: config.Environment) -> config.Environment | None:
    """Record `built` for its framework (config.json, atomically), then remove the folder of
    the environment it replaces (one the set-up built: under the environments). The replaced
    entry, if any."""
    before = config.read()
    replaced = before.environments.get(built.framework)
    config.write(before.with_environment(built))
    if replaced is not None and replaced.root != built.root:
        old = Path(replaced.root)
        if old.parent == config.environments():
            shutil.rmtree(old, ignore_errors=True)
    return replaced


def _new_folder(folder: Path) -> Path:
    """A name no build has used: the framework, the time, a count where that is taken."""
    stem = f"{plan.FRAMEWORK}-{time.strftime('%Y%m%d-%H%M%S')}"
    root, count = folder / stem, 1
    while root.exists():
        count += 1
        root = folder / f"{stem}-{count}"
    return root


def _run(argv: list[str], what: str, log: IO[str], status: Any, log_path: Path) -> None:
    """Run one step, its output to the log and its telling lines to the status; SetupFailed
    with its last error where it fails. Interrupted, the step's process is ended first."""
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    status.update(what)
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except OSError as exc:
        raise SetupFailed(f"setting up {what}: cannot start {argv[0]}: {exc}; the environment "
                          "in use is unchanged") from None
    last = ""
    try:
        assert process.stdout is not None  # a pipe was asked for
        for line in process.stdout:
            log.write(line)
            text = line.strip()
            if text.startswith(SHOWN):
                status.update(f"{what}: {text[:90]}")
            if text.startswith("ERROR:") or (text and not last.startswith("ERROR:")):
                last = text
        code = process.wait()
    except BaseException:
        _end(process)
        raise
    finally:
        log.flush()
    if code != 0:
        raise SetupFailed(f"setting up {what} failed (exit {code}): {last or 'no output'} "
                          f"(all of its output: {log_path}); the environment in use is "
                          "unchanged")


def _end(process: subprocess.Popen[str]) -> None:
    """Stop a step's process and wait for it (a Ctrl-C at a terminal has reached it too)."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def _stops_as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP, like Ctrl-C, interrupt the build (its folder removed, exit
    128 + the signal); outside the main thread signals stay as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise errors.Interrupted(signum, signal.Signals(signum).name)

    kept = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)
