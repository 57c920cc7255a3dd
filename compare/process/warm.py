"""A command that starts many framework processes pays each framework's import once.

Inside `fork_servers()` (compare and sweep hold it for the whole command),
compare.process.runner starts each framework process by asking that framework's fork
server (compare.run.fork_server: one per framework and interpreter, started at its first
use) to fork a child with the framework already imported. The child is a new process that
no run has touched (devices, caches, traces and generators start fresh), with its own pid,
exit status and output pipe, so stops, crashes and kills reach it and are reported exactly as
for a process the command started itself. A framework whose server cannot start, a server
that is busy with another run, or CNNCOMPARE_FORK_SERVER=0 falls back to a plain process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from compare.experiment.frameworks import impl_module

# What each server imports before it forks: the framework's train module, which imports the
# framework (runner.MODULES may name a stand-in in a test; this stays the framework's), and
# what every run would import later: the shared loop (compare.run.loop) and torch._dynamo,
# which torch_impl/manifest.py reads the compile counters from (the slowest of them, seconds
# on a small CPU). Imports only: no op, no device. (Not PyTorch's TensorBoard
# writer: its import needs torch_impl/scalars.py's guard against importing TensorFlow.)
PRELOAD = {"tf": (impl_module("tf", "train"), "compare.run.loop"),
           "torch": (impl_module("torch", "train"), "torch._dynamo", "compare.run.loop")}
DISABLE_ENV = "CNNCOMPARE_FORK_SERVER"  # "0": every framework process started afresh
SERVER_EXIT_S = 30.0  # how long the command waits for an idle server to end at its close


class Server:
    """One framework's fork server, from the command's side: a subprocess and its socket."""

    def __init__(self, python: str, framework: str, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        try:
            self.process = subprocess.Popen(
                [python, "-m", "compare.run.fork_server", ",".join(PRELOAD[framework]),
                 str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env,
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        finally:
            theirs.close()
        self.control = ours
        self.busy = threading.Lock()
        self.ready = self._receive() == {"ready": True}  # blocks while it imports
        self.started = self.ready  # False: it could not import its framework; not retried
        self.forked = 0  # children started

    def start(self, module: str, args: list[str]) -> ForkedProcess | None:
        """A child running `python -m module args`, or None when this server cannot (it
        died, or another run holds it)."""
        if not self.ready or not self.busy.acquire(blocking=False):
            return None
        read, write = os.pipe()
        try:
            socket.send_fds(self.control, [json.dumps({"module": module,
                                                       "args": args}).encode()], [write])
            reply = self._receive()
        except OSError:
            reply = None
        finally:
            os.close(write)
        if not reply or "pid" not in reply:
            os.close(read)
            self.ready = False
            self.busy.release()
            return None
        self.forked += 1
        return ForkedProcess(self, reply["pid"], os.fdopen(read, "r", errors="replace"))

    def _receive(self) -> dict | None:
        while True:
            try:
                message = self.control.recv(1 << 16)
            except InterruptedError:
                continue
            except OSError:
                return None
            return json.loads(message) if message else None

    def close(self) -> None:
        self.control.close()  # the server ends when it reads the end of its socket
        try:
            self.process.wait(timeout=SERVER_EXIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


class ForkedProcess:
    """A fork server's child, as much of subprocess.Popen as the runner and
    compare.run.shutdown use: pid, stdout, poll, wait, returncode."""

    def __init__(self, server: Server, pid: int, stdout: IO[str]):
        self.server, self.pid, self.stdout = server, pid, stdout
        self.returncode: int | None = None

    def communicate(self, timeout: float) -> str:
        """The child's whole output once it has ended (its exit status in returncode); past
        `timeout` seconds it is killed and subprocess.TimeoutExpired raised, as by
        subprocess.run."""
        chunks: list[str] = []
        reader = threading.Thread(target=lambda: chunks.append(self.stdout.read()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            reader.join()
            self.wait()
            raise subprocess.TimeoutExpired(f"forked process {self.pid}", timeout)
        self.wait()
        return "".join(chunks)

    def poll(self) -> int | None:
        """None while the child runs. Its exit status is the server's to read (see wait);
        this only asks whether the pid is gone, so that a signal handler may call it."""
        if self.returncode is not None:
            return self.returncode
        try:
            os.kill(self.pid, 0)
            return None
        except ProcessLookupError:
            return 0 if self.returncode is None else self.returncode

    def wait(self) -> int:
        """The child's exit status as Popen gives it (a killed child: minus the signal). A
        server that died while its child ran: exit status 1, and the server is dropped."""
        if self.returncode is None:
            reply = self.server._receive()
            if reply is None or "exit" not in reply:
                self.server.ready = False
                self.returncode = 1
            else:
                self.returncode = int(reply["exit"])
            self.stdout.close()
            self.server.busy.release()
        return self.returncode


class Pool:
    """The servers of one command, one per (interpreter, framework), started at first use."""

    def __init__(self) -> None:
        self.servers: dict[tuple[str, str], Server] = {}
        self.locks: dict[tuple[str, str], threading.Lock] = {}
        self.lock = threading.Lock()

    def start(self, argv: list[str], framework: str,
              env: dict[str, str]) -> ForkedProcess | None:
        python, flag, module, *args = argv
        if flag != "-m" or framework not in PRELOAD:
            return None
        key = (python, framework)
        with self.lock:
            lock = self.locks.setdefault(key, threading.Lock())
        with lock:  # one server per key; the two frameworks' imports go on together
            server = self.servers.get(key)
            if server is not None and server.started and not server.ready:  # died: anew
                server.close()
                server = None
            if server is None:
                server = self.servers[key] = Server(python, framework, env)
        return server.start(module, args)

    def close(self) -> None:
        for server in list(self.servers.values()):
            server.close()
        self.servers.clear()


_active: Pool | None = None


@contextmanager
def fork_servers() -> Iterator[Pool | None]:
    """While inside, runner.run_framework starts framework processes from fork servers
    (unless CNNCOMPARE_FORK_SERVER=0); they end when the block does."""
    global _active
    if os.environ.get(DISABLE_ENV) == "0" or _active is not None:
        yield _active
        return
    _active = pool = Pool()
    try:
        yield pool
    finally:
        _active = None
        pool.close()


def start(argv: list[str], framework: str, env: dict[str, str]) -> ForkedProcess | None:
    """`argv` (`python -m MODULE ARGS`) as a fork server's child, or None: start it afresh."""
    return _active.start(argv, framework, env) if _active is not None else None
