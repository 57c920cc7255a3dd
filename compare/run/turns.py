"""A framework process's side of taking turns with the other framework's run of the same seed
(RunConfig.turns): the two processes live side by side, but only the one holding the turn
works; it passes the turn after the first timing window (the first pair of windows, with an
own loop beside) that ends TURN_S or more after the turn began, saying what share of its
steps it has trained. Both runs then meet the host's slow spells within a second or two of
each other, where runs one after the other meet them minutes apart (docs/measurement.md, "On a
busy host").

The parent arbitrates (compare.process.turns) over a Unix socket: a process says its
framework (HELLO), waits for GO, and when its turn is over sends PASS with its share done (a
line: the fraction, or nothing) and waits for GO again. A
closed socket (the parent gone, or the arbiter's end) lets the process work on alone: taking
turns only ever delays work, it never stops it.
"""

from __future__ import annotations

import socket
import time

HELLO = b"H"  # then the framework's name and a newline
GO = b"G"  # the parent to a process: your turn
PASS = b"P"  # a process to the parent: my window is done; then the share done and a newline

# s: the least a turn lasts. The first window after a handover pays for it (caches the other
# framework's turn took over), TensorFlow's more than PyTorch's, so turns hold several short
# windows rather than passing after each (docs/benchmarks.md, "Windows of 0.125 s").
TURN_S = 1.0

_connection: socket.socket | None = None  # this process's, while it takes turns
_taken = 0  # the turns this process has been given
_began = 0.0  # time.perf_counter() when its current turn began, s


def join(path: str | None, framework: str) -> None:
    """Connect to the arbiter at `path` and wait for the first turn; a no-op without a path
    or when the arbiter cannot be reached (the process works alone)."""
    global _connection
    if path is None:
        return
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
        connection.sendall(HELLO + framework.encode() + b"\n")
    except OSError:
        connection.close()
        return
    _connection = connection
    _wait_for_go()


def pass_turn(done: float | None = None) -> None:
    """Let the other process work, and wait until it is this one's turn again (no-op when not
    taking turns); `done`: the share of this run's steps trained, by which the parent picks
    the one behind."""
    if _connection is None:
        return
    share = b"" if done is None else f"{done:.6f}".encode()
    try:
        _connection.sendall(PASS + share + b"\n")
    except OSError:
        _leave()
        return
    _wait_for_go()


def after_window(done: float | None = None) -> None:
    """A timing window (a pair, beside an own loop) has ended: pass the turn if it has lasted
    TURN_S, else keep it (no-op when not taking turns); `done` as for pass_turn."""
    if _connection is not None and time.perf_counter() - _began >= TURN_S:
        pass_turn(done)


def taken() -> int | None:
    """How many turns this process has been given so far, counting the one it holds; None
    while it does not take turns."""
    return None if _connection is None else _taken


def _wait_for_go() -> None:
    global _taken, _began
    assert _connection is not None
    try:
        answer = _connection.recv(1)
    except OSError:
        answer = b""
    if answer != GO:  # closed: work on alone
        _leave()
        return
    _taken += 1
    _began = time.perf_counter()


def _leave() -> None:
    global _connection
    if _connection is not None:
        _connection.close()
    _connection = None
