"""A framework process's side of taking turns with the other framework's run of the same seed
(RunConfig.turns): the two processes live side by side, but only the one holding the turn
works; it passes the turn after about TURN_S seconds of its timing windows (a window at the
default length; beside an own loop, a pair of windows) or an eighth of an epoch, saying what
share of its steps it has trained. Both runs then meet the host's slow spells within a
second of each other, where runs one after the other meet them minutes apart
(docs/measurement.md, "On a busy host").

The parent arbitrates (compare.process.turns) over a Unix socket: a process says its
framework (HELLO), waits for GO, and when its turn is over sends PASS with its share done (a
line: the fraction, or nothing) and waits for GO again. A
closed socket (the parent gone, or the arbiter's end) lets the process work on alone: taking
turns only ever delays work, it never stops it.
"""

from __future__ import annotations

import socket

from compare.run.windows import MAX_EPOCH_SHARE

HELLO = b"H"  # then the framework's name and a newline
GO = b"G"  # the parent to a process: your turn
PASS = b"P"  # a process to the parent: my turn is done; then the share done and a newline

# A turn holds the run's windows until they add up to about TURN_S seconds (as many windows
# as --timing-window-s says: one at its default, four of 0.125 s) or to MAX_EPOCH_SHARE of
# an epoch, whichever comes first; beside an own loop each window is a pair, one of each
# loop. The first window after a handover pays for it (caches the other framework's turn
# took over), TensorFlow's more than PyTorch's, so shorter windows do not bring more
# handovers (docs/research/cpu-timing.md); a turn longer than an eighth of an
# epoch would let a slow spell of the host fall on one framework's epoch and not the other's
# (MAX_EPOCH_SHARE, declared with the windows, bounds a window the same way).
TURN_S = 0.5

_connection: socket.socket | None = None  # this process's, while it takes turns
_taken = 0  # the turns this process has been given
_windows = 0  # the run's windows in its current turn
_began_done = 0.0  # the share of its steps trained when its current turn began


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


def after_window(done: float, epochs: int, window_s: float | None) -> None:
    """One of the run's timing windows (of about `window_s` seconds; None: of fixed steps, a
    turn each) has ended, `done` of its steps trained over its `epochs` epochs: pass the turn
    when the turn's windows come to TURN_S or to MAX_EPOCH_SHARE of an epoch, else keep it
    (no-op when not taking turns)."""
    global _windows, _began_done
    if _connection is None:
        return
    _windows += 1
    per_turn = 1 if window_s is None else max(1, round(TURN_S / window_s))
    if _windows >= per_turn or (done - _began_done) * epochs >= MAX_EPOCH_SHARE - 1e-9:
        _windows, _began_done = 0, done
        pass_turn(done)


def taken() -> int | None:
    """How many turns this process has been given so far, counting the one it holds; None
    while it does not take turns."""
    return None if _connection is None else _taken


def _wait_for_go() -> None:
    global _taken
    assert _connection is not None
    try:
        answer = _connection.recv(1)
    except OSError:
        answer = b""
    if answer != GO:  # closed: work on alone
        _leave()
        return
    _taken += 1


def _leave() -> None:
    global _connection
    if _connection is not None:
        _connection.close()
    _connection = None
