"""Starting the CLI in a subprocess and watching what it leaves behind: the helpers of the tests
that stop, kill and lose processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import patience

# precision-, tolerance- or time-sensitive: CI runs these again as on an AVX2-only CPU


REPO = Path(__file__).resolve().parent.parent
CLI = "from compare.cli import main; main()"


TAG_ENV = "CNNCOMPARE_TEST_TAG"  # inherited by every process a test starts: leftovers show it


# A run long enough to be stopped in the middle: 20 steps an epoch, 200 epochs.
LONG_RUN = ("--dataset", "synthetic", "--synthetic-size", "640", "--epochs", "200",
            "--precision", "fp32", "--quiet")


def start(*args: str, out: Path, code: str = CLI, env: dict | None = None,
           group: bool = True) -> subprocess.Popen:
    """The CLI in a subprocess (its own process group unless `group` is False), tagged so
    that every process it starts can be found, its stop signals as a terminal gives them."""
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO,
                            env={**os.environ, TAG_ENV: str(out), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=group, preexec_fn=as_from_a_terminal)


def as_from_a_terminal() -> None:
    """In the child before it runs the CLI: SIGINT and SIGHUP to their defaults, as a command
    typed at a terminal has them. A test session started in the background (`nohup`, or `&`
    where the shell has no job control) ignores both, a child inherits that, and Python then
    leaves Ctrl-C ignored: the tests of what Ctrl-C and a hang-up do would test nothing."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def left_behind(out: Path) -> list[str]:
    """Live processes started for the test that writes into `out`: the path on their command
    line, or the tag in their environment (DDP processes and loader workers carry it)."""
    tag = f"{TAG_ENV}={out}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile, or not ours
            continue
        if str(out).encode() in cmdline or tag in environ:
            found.append(f"{proc.name}: {cmdline.replace(bytes(1), b' ').decode()}")
    return found


def wait_until_gone(out: Path, timeout: float = 10.0) -> list[str]:
    """What is still left after `timeout` seconds on the reference machine (conftest.patience;
    the multiprocessing resource tracker ends on its own a moment after the processes it
    served)."""
    deadline = time.monotonic() + patience(timeout)
    while left_behind(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left_behind(out)


def wait_for(predicate, process, timeout: float = 240.0) -> None:
    """Until `predicate` holds, while `process` runs, for at most `timeout` seconds on the
    reference machine (conftest.patience)."""
    deadline = time.monotonic() + patience(timeout)
    while time.monotonic() < deadline:
        assert process.poll() is None, "the command ended before it could be stopped"
        try:
            if predicate():
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise TimeoutError


def has_epoch(path: Path):
    return lambda: bool(json.loads(path.read_text())["epochs"])


# 96 images in batches of 16: 6 steps an epoch, 2 epochs; fp32 so the sums are exact.
SMALL_RUN = ("--dataset", "synthetic", "--synthetic-size", "96", "--batch-size", "16",
             "--epochs", "2", "--precision", "fp32", "--device", "cpu", "--quiet")


def free_ports(n: int) -> list[int]:
    """`n` free ports on localhost (bound, read, released)."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(ports: list[int], index: int) -> str:
    """TF_CONFIG of worker `index` among workers on localhost `ports`."""
    return json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def launcher_env(**extra: str) -> dict:
    """This environment without a launcher's variables, unbuffered, with `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "RANK", "WORLD_SIZE")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def cli_command(*args: str) -> list[str]:
    """The CLI with `args` as a command line in a new Python process."""
    return [sys.executable, "-c", CLI, *args]
