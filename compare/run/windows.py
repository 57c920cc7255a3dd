"""Synchronised timing windows: how many calls of the training step make one, and, for the
frameworks' own loops, a clock that closes them as the shared loop (compare.run.loop) does.

A window holds whole calls of `steps_per_call` steps and ends with the device synchronised,
so its time over its steps is one sample of the step time. The steady figures are medians
over these samples: a burst of other work on the host lands in a window or two and moves
the median little, where it moves a sum of epoch times by all of its length.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

import numpy as np

from compare.experiment.config import RunConfig

FIRST_WINDOW_STEPS = 10  # several processes: steps per window while the size is measured
# A window is at most this share of an epoch (rounded up to whole calls), whatever
# timing_window_s asks: a short epoch still gives several samples of its step time, and
# compare's shared / own and TF / PyTorch pairs several per epoch, where half-second windows
# cut an epoch of a second or two into two or three.
MAX_EPOCH_SHARE = 1 / 8


class TimingWindows:
    """How many calls make one synchronised timing window (a window ends on a call boundary,
    and at the end of the epoch).

    With config.timing_window, a fixed number of steps rounded up to whole calls. Otherwise
    sized so that a window lasts about config.timing_window_s: in the session's first epoch
    (its warm-up), after every window but the first (which carries tracing and compilation),
    from the median time per call of that epoch's windows so far, and at most
    MAX_EPOCH_SHARE of an epoch of `steps_per_epoch` steps; then held for the rest of the
    session, so that the steady-state windows of later epochs are alike. Syncing the
    device once per window, not every few steps, keeps the clock from draining the device's
    queue more often than the figures need.
    """

    def __init__(self, config: RunConfig, steps_per_call: int,
                 agree: Callable[[float], float] | None = None,
                 steps_per_epoch: int | None = None):
        self.target_s = config.timing_window_s
        # the most calls a window may hold (None: no bound)
        self.most_calls = (None if steps_per_epoch is None else
                           math.ceil(math.ceil(steps_per_epoch / steps_per_call)
                                     * MAX_EPOCH_SHARE))
        self.sizing = config.timing_window is None
        self.agree = agree
        if config.timing_window is not None:
            self.calls = math.ceil(config.timing_window / steps_per_call)
        else:  # several processes keep one fixed size through the first epoch (agree below)
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
        """The size holds from here on, once measured. With several processes it is agreed
        here, by all of them together (`agree`, a collective: every process calls it after
        its first epoch), from the slowest one's time per call: PyTorch all-reduces each
        window's losses, so every process must close the same windows."""
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


class WindowClock:
    """An own loop's clock: each epoch timed from a synchronised start to a synchronised end,
    and cut into windows of whole calls (`steps_per_call` steps) sized by TimingWindows, as
    the shared loop cuts its epochs, so that the two loops' median step times are the same
    statistic. The loop says when an epoch begins, when steps have been issued (a call's, or
    one at a time) and when the epoch ends; `sync` waits for the device (on a CPU each step
    has finished when it returns). `windows` holds one {"epoch", "steps", "seconds"} per
    window, epochs 1-based as in result.json. Between two windows the loop may let other work
    run (`away`: the shared loop's window, compare.run.own_loop.Beside), in no window and
    left out of the epoch's seconds."""

    def __init__(self, config: RunConfig, steps_per_call: int, sync: Callable[[], None],
                 steps_per_epoch: int | None = None):
        self.sizes = TimingWindows(config, steps_per_call, steps_per_epoch=steps_per_epoch)
        self.steps_per_call, self.sync = steps_per_call, sync
        self.windows: list[dict[str, float]] = []
        self.epoch = self.epoch_steps = 0
        self.epoch_start = self.window_start = 0.0
        self.away_s = 0.0  # in this epoch, away
        self.calls = self.steps = 0  # in the open window

    def begin_epoch(self, epoch: int) -> None:
        """Epoch `epoch` (0-based, as the loops count) starts now."""
        self.sync()
        self.epoch, self.epoch_steps, self.calls, self.steps = epoch + 1, 0, 0, 0
        self.away_s = 0.0
        self.epoch_start = self.window_start = time.perf_counter()

    def steps_done(self, steps: int) -> bool:
        """`steps` more steps have been issued; a window closes after its last whole call
        (True: it closed)."""
        self.steps, self.epoch_steps = self.steps + steps, self.epoch_steps + steps
        if self.epoch_steps % self.steps_per_call:
            return False  # inside a call
        self.calls += 1
        if self.calls == self.sizes.calls:
            self._close()
            return True
        return False

    @contextmanager
    def away(self) -> Iterator[None]:
        """Between two windows: what runs inside is in no window and not in the epoch."""
        left = time.perf_counter()
        try:
            yield
        finally:
            self.away_s += time.perf_counter() - left
            self.window_start = time.perf_counter()

    def end_epoch(self) -> float:
        """The epoch's training seconds, its last (partial) window closed."""
        if self.steps:
            self._close()
        self.sync()
        seconds = time.perf_counter() - self.epoch_start - self.away_s
        self.sizes.end_epoch()
        return seconds

    def _close(self) -> None:
        self.sync()
        seconds = time.perf_counter() - self.window_start
        self.windows.append({"epoch": self.epoch, "steps": self.steps, "seconds": seconds})
        self.sizes.observe(seconds, max(self.calls, 1))
        self.calls, self.steps, self.window_start = 0, 0, time.perf_counter()
