"""How the processes of a run stop: on SIGINT, SIGTERM or SIGHUP, or when their parent dies.

One rule on both sides: a stop is never lost, and it never cuts the writing of a result short.

- A parent (the CLI's `run`, `compare` and `sweep`; PyTorch's launcher of DDP processes)
  runs `forwarding()`: every stop signal it receives is passed on to each process it
  started and is watching, and it goes on waiting for them; its exit code is then 128 + the
  signal. A terminal's Ctrl-C reaches the whole process group, but `kill PID`, `timeout`
  and job schedulers may signal the parent alone.
- A trainer process calls `install_trainer()`: its first stop is remembered and raises
  `compare.errors.Interrupted` only inside `interruptible()` code (the epochs, the parity
  probe); a stop that arrives elsewhere (setting up, writing the result) takes effect at the
  next `interruptible()` entry. Later stops are ignored: the process is already stopping;
  but a stop signal FORCE_AFTER_S or more after the first ends it at once (the user insists).
  The trainer asks Linux for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG), and a
  write to its closed stdout/stderr (the parent is gone) is dropped and counts as a stop.
"""

from __future__ import annotations

import _thread
import ctypes
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from compare.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Exit codes of a process that stopped on a stop signal (128 + n), or on a closed output pipe
# (128 + SIGPIPE), or that a stop signal killed before it could handle it (-n, as Popen says).
INTERRUPT_CODES = frozenset([128 + s for s in (*STOP_SIGNALS, signal.SIGPIPE)]
                            + [-s for s in STOP_SIGNALS])
PARENT_PID_ENV = "CNNCOMPARE_PARENT_PID"  # set by compare.process.runner for the trainer it starts
# A stop signal this long (s) after the first one ends a trainer at once: the first one's
# writing has had its chance. Repeats that come together (a terminal's Ctrl-C reaches the
# group and is also forwarded; `timeout` signals the child and then the group) do not.
FORCE_AFTER_S = 5.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def is_interrupt(code: int) -> bool:
    """Whether a child's exit code says it stopped on a stop signal."""
    return code in INTERRUPT_CODES


# ---- the trainer's side


@dataclass
class TrainerState:
    """This process's stop: the first one counts, and raises at most once."""

    signum: int | None = None  # the first stop; SIGPIPE stands for a closed output pipe
    reason: str = ""
    since: float = 0.0  # time.monotonic() of the first stop
    raising: bool = False  # inside interruptible(): a stop raises Interrupted at once
    raised: bool = False
    parent_pid: int | None = None


_state = TrainerState()


def install_trainer(parent_pid: int | None = None) -> None:
    """In a trainer process: stop signals, the parent's death and a closed output pipe all
    become one remembered stop. `parent_pid`: the process that started this one (default:
    the one compare.process.runner names in the environment, else the current parent)."""
    _state.parent_pid = parent_pid or int(os.environ.get(PARENT_PID_ENV, 0)) or os.getppid()
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(signum, _on_trainer_signal)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != _state.parent_pid:  # the parent ended before prctl could take effect
        stop(signal.SIGTERM, f"the parent process {_state.parent_pid} ended")
    sys.stdout = GuardedStream(sys.stdout, _output_lost)
    sys.stderr = GuardedStream(sys.stderr, _output_lost)
    sys.excepthook = quiet_lost_reader  # inherited by forked DataLoader workers


def quiet_lost_reader(exc_type: type, exc: BaseException, traceback: Any) -> None:
    """sys.excepthook of trainer processes. A DataLoader worker hands each batch's shared
    memory to the trainer through multiprocessing.resource_sharer, whose server thread
    reports its own errors to sys.excepthook; a reader that vanished mid-handover because
    the trainer stopped is the stop working, not an error: no traceback. Everything else
    prints as usual."""
    first = traceback.tb_frame.f_code if traceback is not None else None
    if (issubclass(exc_type, (ConnectionError, EOFError)) and first is not None
            and first.co_name == "_serve" and first.co_filename.endswith("resource_sharer.py")):
        return
    sys.__excepthook__(exc_type, exc, traceback)


def stop(signum: int, reason: str) -> None:
    """Remember a stop (the first one counts); inside interruptible(), raise Interrupted."""
    if _state.signum is None:
        _state.signum, _state.reason, _state.since = signum, reason, time.monotonic()
    _raise_if_due()


def stop_received() -> int | None:
    """The signal of this process's stop, if one came (SIGPIPE: its output pipe closed)."""
    return _state.signum


@contextmanager
def interruptible() -> Iterator[None]:
    """Inside, a stop raises Interrupted at once (also on entry, for one that came before)."""
    previous = _state.raising
    try:
        _state.raising = True
        _raise_if_due()
        yield
    finally:
        _state.raising = previous


@contextmanager
def shielded() -> Iterator[None]:
    """Inside, a stop is only remembered, so that what is being written is written whole;
    within interruptible() code it takes effect when the block ends."""
    previous = _state.raising
    try:
        _state.raising = False
        yield
    finally:
        _state.raising = previous
    _raise_if_due()


def _raise_if_due() -> None:
    if _state.raising and _state.signum is not None and not _state.raised:
        _state.raised = True
        raise Interrupted(_state.signum, _state.reason + _parent_note())


def _on_trainer_signal(signum: int, frame: Any) -> None:
    if _state.signum is not None and time.monotonic() - _state.since >= FORCE_AFTER_S:
        try:
            os.write(2, f"stopped at once by a second {signal.Signals(signum).name}\n".encode())
        finally:
            os._exit(128 + signum)
    stop(signum, signal.Signals(signum).name)


def _parent_note() -> str:
    """': the parent process N ended' when it has. Asked when the stop takes effect, not when
    the signal comes: Linux sends the parent-death signal as each thread of a dying parent
    ends, while the process still exists."""
    if not _state.parent_pid or not sys.platform.startswith("linux"):
        return ""
    try:
        stat = Path(f"/proc/{_state.parent_pid}/stat").read_text()
        alive = os.getppid() == _state.parent_pid and stat.rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        alive = False
    return "" if alive else f": the parent process {_state.parent_pid} ended"


def _output_lost(exc: OSError) -> None:
    reason = f"the output pipe closed ({exc.__class__.__name__}): the parent process is gone"
    if threading.current_thread() is threading.main_thread():
        stop(signal.SIGPIPE, reason)
        return
    # Only the main thread may raise Interrupted (a progress bar writes from its own thread):
    # remember the stop and hand it over as a signal, which Python runs in the main thread.
    if _state.signum is None:
        _state.signum, _state.reason, _state.since = signal.SIGPIPE, reason, time.monotonic()
    if signal.getsignal(signal.SIGTERM) is _on_trainer_signal:
        _thread.interrupt_main(signal.SIGTERM)


def set_parent_death_signal(signum: int) -> None:
    """Ask Linux to send `signum` when the parent process ends (nothing elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


class GuardedStream:
    """A text stream whose reader may vanish: the first failed write (EPIPE from a closed
    pipe, EIO from a hung-up terminal) points the descriptor at /dev/null, so later writes,
    C libraries' included, succeed, and calls `on_lost` once; nothing is raised to the
    writer (a print must not kill a process before it writes its result)."""

    def __init__(self, stream: Any, on_lost: Callable[[OSError], None]):
        self._stream, self._on_lost, self._lost = stream, on_lost, False

    def write(self, text: str) -> int:
        if not self._lost:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if not self._lost:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        self._lost = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture)
            pass
        self._on_lost(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# ---- the parent's side


class Forwarder:
    """A parent's stop: the first stop signal it received, passed on to its children."""

    def __init__(self, signum: int | None = None):
        self.signum = signum
        self.children: list[Any] = []  # subprocess.Popen or multiprocessing.Process objects

    def watch(self, child: Any) -> None:
        """Pass stops on to `child` from now on (and the stop already received, if any)."""
        self.children.append(child)
        if self.signum is not None:
            _send(child, self.signum)

    def unwatch(self, child: Any) -> None:
        if child in self.children:
            self.children.remove(child)

    def exit_code(self, code: int) -> int:
        """128 + the stop signal once one was received; else `code`."""
        return 128 + self.signum if self.signum is not None else code

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        for child in list(self.children):
            _send(child, signum)


_forwarder: Forwarder | None = None  # the active one, which runner reports children to


@contextmanager
def forwarding() -> Iterator[Forwarder]:
    """While inside, stop signals are remembered and passed on to the watched children
    instead of interrupting this process, and its output cannot fail (see GuardedStream)."""
    global _forwarder
    forwarder = Forwarder(_state.signum)  # a trainer that launches others keeps its stop
    handlers = {s: signal.signal(s, forwarder._on_signal) for s in STOP_SIGNALS
                if signal.getsignal(s) is not signal.SIG_IGN}
    streams = sys.stdout, sys.stderr
    sys.stdout = GuardedStream(sys.stdout, lambda exc: None)
    sys.stderr = GuardedStream(sys.stderr, lambda exc: None)
    outer, _forwarder = _forwarder, forwarder
    try:
        yield forwarder
    finally:
        _forwarder = outer
        sys.stdout, sys.stderr = streams
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


@contextmanager
def watching(child: Any) -> Iterator[None]:
    """Pass the active forwarding()'s stops on to `child` while inside (no-op without one)."""
    forwarder = _forwarder
    if forwarder is not None:
        forwarder.watch(child)
    try:
        yield
    finally:
        if forwarder is not None:
            forwarder.unwatch(child)


def parent_stop() -> int | None:
    """The stop signal the active forwarding() received, if any: start nothing new."""
    return _forwarder.signum if _forwarder is not None else None


def _send(child: Any, signum: int) -> None:
    alive = child.poll() is None if hasattr(child, "poll") else child.is_alive()
    if alive:
        try:
            os.kill(child.pid, signum)
        except ProcessLookupError:  # it ended just now
            pass
