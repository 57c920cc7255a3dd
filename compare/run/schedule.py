"""The timing schedule of one run: how many calls make a timing window, when the turn passes to
the other framework's run, and which loop's window of a pair (the shared loop's, its own-loop
twin's) comes first. The rules and why: docs/measurement.md, "Step batching, timing windows"
and "On a busy host"."""

from __future__ import annotations

import math
import socket
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from compare.experiment.config import RunConfig

if TYPE_CHECKING:  # annotations only
    from compare.run.interface import Trainer

MAX_EPOCH_SHARE = 1 / 8  # the most of an epoch one window, or one turn, holds
TURN_S = 0.5  # s of a run's timing windows in one turn
FIRST_WINDOW_STEPS = 10  # several processes: steps per window while the size is measured

# The handover's protocol, over the parent's Unix socket (compare.process.turns.Arbiter)
HELLO = b"H"  # a process to the parent, then its framework's name and a newline
GO = b"G"  # the parent to a process: your turn
PASS = b"P"  # a process to the parent: my turn is done; then its share done and a newline


class Twin(Protocol):
    """What the schedule asks of a run's own-loop twin (compare.run.own_loop.Twin)."""

    def window(self) -> float | None: ...  # train one window: its ms per step (None: none)
    def first_epoch(self) -> None: ...
    def finish(self, window_pairs: list[list[float]], own_first: list[bool]) -> None: ...
    def stop(self, exc: BaseException) -> None: ...
    def close(self) -> None: ...


class TimingWindows:
    """How many calls make one synchronised timing window: config.timing_window steps in
    whole calls, or sized in the session's first epoch to last about config.timing_window_s
    (after its first window, which carries tracing) and at most MAX_EPOCH_SHARE of an epoch,
    then held. With several processes (`agree`, a collective) all take the slowest one's size
    after the first epoch, so that every process closes the same windows."""

    def __init__(self, config: RunConfig, steps_per_call: int,
                 agree: Callable[[float], float] | None = None,
                 steps_per_epoch: int | None = None):
        self.target_s = config.timing_window_s
        self.most_calls = (None if steps_per_epoch is None else
                           math.ceil(math.ceil(steps_per_epoch / steps_per_call)
                                     * MAX_EPOCH_SHARE))
        self.sizing = config.timing_window is None
        self.agree = agree
        if config.timing_window is not None:
            self.calls = math.ceil(config.timing_window / steps_per_call)
        else:
            self.calls = 1 if agree is None else math.ceil(FIRST_WINDOW_STEPS / steps_per_call)
        self.per_call_s: list[float] = []  # seconds per call of the measured windows
        self.seen = 0  # windows closed in this epoch

    def observe(self, seconds: float, calls: int) -> None:
        self.seen += 1
        if self.sizing and self.seen > 1:
            self.per_call_s.append(seconds / calls)
            if self.agree is None:
                self._size(float(np.median(self.per_call_s)))

    def end_epoch(self) -> None:
        """The size holds from here on, once measured (agreed by every process, if several)."""
        self.seen = 0
        if self.sizing and self.agree is not None:
            own = float(np.median(self.per_call_s)) if self.per_call_s else math.nan
            self._size(self.agree(own))
            self.sizing = False
        elif self.per_call_s:
            self.sizing = False

    def _size(self, per_call_s: float) -> None:
        if math.isfinite(per_call_s):
            per_call_s = max(per_call_s, 1e-6)  # s; 0 on a coarse clock
            calls = max(1, round(self.target_s / per_call_s))
            self.calls = calls if self.most_calls is None else min(calls, self.most_calls)


class Handover:
    """This process's end of taking turns with the other framework's run (RunConfig.turns, the
    parent's socket): it works only while it holds the turn. A closed socket lets it work on
    alone: taking turns only ever delays work, it never stops it."""

    def __init__(self, connection: socket.socket):
        self._connection: socket.socket | None = connection
        self._taken = 0  # the turns given so far, counting the one held

    @classmethod
    def join(cls, path: str | None, framework: str) -> Handover | None:
        """Connect to the parent at `path` and wait for the first turn; None without a path
        or when nothing answers there (the process works alone)."""
        if path is None:
            return None
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(path)
            connection.sendall(HELLO + framework.encode() + b"\n")
        except OSError:
            connection.close()
            return None
        handover = cls(connection)
        handover._wait_for_go()
        return handover

    def taken(self) -> int | None:
        """The turns given so far, counting the one held; None once the parent is gone."""
        return None if self._connection is None else self._taken

    def pass_turn(self, done: float | None = None) -> None:
        """Let the other run work and wait for the turn back; `done`: the share of this run's
        steps trained, by which the parent picks the run that is behind."""
        if self._connection is None:
            return
        share = b"" if done is None else f"{done:.6f}".encode()
        try:
            self._connection.sendall(PASS + share + b"\n")
        except OSError:
            self._leave()
            return
        self._wait_for_go()

    def _wait_for_go(self) -> None:
        assert self._connection is not None
        try:
            answer = self._connection.recv(1)
        except OSError:
            answer = b""
        if answer != GO:  # closed: work on alone
            self._leave()
            return
        self._taken += 1

    def _leave(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None


class Schedule:
    """What happens between a run's timing windows, made once per run: the window's size
    (TimingWindows), the turn passed to the other framework's run after about TURN_S of
    windows or MAX_EPOCH_SHARE of an epoch (`handover`), and the own-loop twin's window
    beside each of the run's from its second epoch on (`twin`), in pairs whose order turns
    pair by pair, or turn by turn where the run takes turns (the shared loop's first on even
    seeds). Nothing it runs is in the run's clock: the loop times its windows only."""

    def __init__(self, config: RunConfig, trainer: Trainer, handover: Handover | None = None,
                 twin: Twin | None = None):
        def slowest(own_s: float) -> float:  # the slowest process's time per call, on all
            measured = [row[0] for row in trainer.gather_figures([own_s])
                        if math.isfinite(row[0])]
            return max(measured) if measured else math.nan  # nan: none measured, size holds

        self.sizes = TimingWindows(config, trainer.steps_per_call,
                                   slowest if trainer.choice.processes > 1 else None,
                                   trainer.steps_per_epoch)
        self.handover, self.twin = handover, twin
        self.epochs, self.seed = config.epochs, config.seed
        self.windows_per_turn = (1 if config.timing_window is not None
                                 else max(1, round(TURN_S / config.timing_window_s)))
        self._in_turn = 0  # the run's windows in the turn held
        self._turn_began = 0.0  # the share of the run's steps trained when it began
        self._epochs_done = 0  # the shared loop's epochs trained in this process
        self._slot = 0  # the pair of windows the next ones belong to
        self._own_first: dict[int, bool] = {}  # slot: whether the twin's window came first
        self._shared_ms: dict[int, float] = {}  # slot: the shared loop's ms per step
        self._own_ms: dict[int, float] = {}  # slot: the twin's

    @property
    def calls(self) -> int:
        """Calls of the training step in the next window."""
        return self.sizes.calls

    def open_epoch(self) -> None:
        """The run's epoch is about to start (outside its clock)."""
        self._before_window()

    def between_windows(self, seconds: float, calls: int, steps: int, done: float,
                        epoch_goes_on: bool) -> None:
        """The run closed a window of `calls` calls and `steps` steps in `seconds`, `done` of
        its steps trained; `epoch_goes_on`: another window of this epoch follows."""
        self.sizes.observe(seconds, calls)
        if self.twin is not None and self._epochs_done:
            self._shared_ms[self._slot] = 1000.0 * seconds / steps
            if not self._own_first[self._slot]:
                self._twin_window()
            self._slot += 1
        if done < 1:  # after the run's last window, the turn is held to the exit
            self._offer_turn(done)
        if epoch_goes_on:
            self._before_window()

    def end_epoch_training(self) -> None:
        """The epoch's training is over: the window size holds once measured."""
        self.sizes.end_epoch()

    def after_epoch(self) -> None:
        """The epoch is recorded: after the run's first, the twin's first epoch, whole."""
        self._epochs_done += 1
        if self.twin is not None and self._epochs_done == 1:
            self.twin.first_epoch()

    def finish(self) -> None:
        """The run trained its epochs: the twin trains what it has left, with the pairs."""
        if self.twin is not None:
            slots = [slot for slot in sorted(self._shared_ms) if slot in self._own_ms]
            self.twin.finish([[self._shared_ms[s], self._own_ms[s]] for s in slots],
                             [self._own_first[s] for s in slots])

    def stop(self, exc: BaseException) -> None:
        if self.twin is not None:
            self.twin.stop(exc)

    def close(self) -> None:
        if self.twin is not None:
            self.twin.close()

    def _before_window(self) -> None:
        if self.twin is None or not self._epochs_done:
            return  # the run's first epoch: no pairs
        taken = None if self.handover is None else self.handover.taken()
        first = ((self._slot if taken is None else taken) + self.seed) % 2 == 1
        self._own_first[self._slot] = first
        if first:
            self._twin_window()

    def _twin_window(self) -> None:
        assert self.twin is not None
        ms = self.twin.window()
        if ms is not None:
            self._own_ms[self._slot] = ms

    def _offer_turn(self, done: float) -> None:
        if self.handover is None or self.handover.taken() is None:
            return
        self._in_turn += 1
        if (self._in_turn >= self.windows_per_turn
                or (done - self._turn_began) * self.epochs >= MAX_EPOCH_SHARE - 1e-9):
            self._in_turn, self._turn_began = 0, done
            self.handover.pass_turn(done)
