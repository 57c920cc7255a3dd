"""A framework's own idiomatic loop on a run's recipe (Keras' compile + fit, the plain PyTorch
loop): the answer to "is the shared loop handicapping my framework?". It trains the run's
Trainer (same model, initial weights, data plan, optimizer, precision and distribution) in a
process of its own (`python -m tf_impl.train CONFIG --own-loop`), or, under `compare`, in the
run's process as its twin (`Twin`), a timing window of each loop in turn (docs/measurement.md,
"On a busy host"). Its clock is the shared loop's (`WindowClock`); its record is
own-loop.json (compare.records.OwnLoopRecord), written from the start and after every epoch.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from compare import files, schema
from compare.errors import EXIT_OK, UserError
from compare.experiment.config import RunConfig
from compare.experiment.datasets import Dataset
from compare.experiment.recipe import learning_rate
from compare.records import ClockWindow, OwnLoopRecord
from compare.run import shutdown, wall_time
from compare.run.interface import DeviceChoice
from compare.run.schedule import TimingWindows
from compare.run.summary import steady_step_times

T = TypeVar("T")


class WindowClock:
    """An own loop's clock, the shared loop's (compare.run.loop) in the loop's own hands: each
    epoch timed from a synchronised start to a synchronised end and cut into windows of whole
    calls sized by TimingWindows, so that the two loops' step times are the same statistic.
    The loop says when an epoch begins, when steps have been issued and when the epoch ends;
    `sync` waits for the device. `windows` holds one {"epoch", "steps", "seconds"} per window
    (epochs 1-based). What runs `away`, between two windows, is in no window and no epoch."""

    def __init__(self, config: RunConfig, steps_per_call: int, sync: Callable[[], None],
                 steps_per_epoch: int | None = None):
        self.sizes = TimingWindows(config, steps_per_call, steps_per_epoch=steps_per_epoch)
        self.steps_per_call, self.sync = steps_per_call, sync
        self.windows: list[ClockWindow] = []
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
        """`steps` more steps have been issued; True: a window closed after its last call."""
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


class OwnLoopRun:
    """One own loop on `config` and its record (own-loop.json in config.out): built here,
    trained an epoch each time `epoch` is called (or a timing window each `window`), then
    `finish`ed (or `stop`ped). The record
    is written from the start and after every epoch, so one cut short says how far it got."""

    def __init__(self, impl: ModuleType, config: RunConfig, dataset: Dataset,
                 choice: DeviceChoice, beside: bool = False):
        if choice.processes > 1:
            raise UserError(f"own loops train in one process; this run's {impl.FRAMEWORK} "
                            f"side spans {choice.processes} processes")
        self.impl, self.config = impl, config
        self.path = files.RunDir(Path(config.out)).own_loop
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.record = OwnLoopRecord(
            schema_version=schema.OWN_LOOP_VERSION, framework=impl.FRAMEWORK, seed=config.seed,
            status="running", config=config.to_dict(), device_used=choice.description,
            trained=BESIDE if beside else APART)
        files.write_json(self.path, self.record.to_dict())
        try:
            self.trainer = impl.Trainer(config, dataset, choice)
        except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - recorded, then raised
            self.stop(exc)
            raise
        total = self.trainer.steps_per_epoch * config.epochs
        lrs = [learning_rate(config, step, total) for step in range(total)]
        self.record.steps_per_epoch = self.trainer.steps_per_epoch
        self.record.steps_per_call = self.trainer.steps_per_call
        self.clock = WindowClock(config, self.trainer.steps_per_call, self.trainer.sync,
                                 self.trainer.steps_per_epoch)
        self.mean_losses: list[list[float]] = []
        self.epochs = impl.own_loop.own_loop(self.trainer, config, dataset, lrs, self.clock,
                                             self.mean_losses)

    def epoch(self) -> bool:
        """Train the rest of this epoch; False when every epoch is trained (or the loop
        stopped)."""
        return self._until(lambda: len(self.record.epoch_times_s))

    def window(self) -> bool:
        """Train the next timing window (and end its epoch, where it is the last); False when
        every epoch is trained (or the loop stopped)."""
        return self._until(lambda: len(self.clock.windows))

    def _until(self, count: Callable[[], int]) -> bool:
        """Advance the loop until `count` grows; False if it ends first."""
        before = count()
        while self._advance():
            if count() > before:
                return True
        return False

    def _advance(self) -> bool:
        """The loop to its next window's or epoch's end; False when it has none left."""
        if self.record.status != "running":
            return False
        try:
            seconds = next(self.epochs)
        except StopIteration:
            return False
        if seconds is None:  # a window closed
            return True
        self.record.epoch_times_s.append(seconds)
        self.record.windows = self.clock.windows
        done = len(self.record.epoch_times_s)
        print(f"{self.impl.FRAMEWORK} own loop  epoch {done}/{self.config.epochs}  "
              f"train {seconds:.2f} s  test_acc at the end", flush=True)
        files.write_json(self.path, self.record.to_dict())
        return True

    def finish(self) -> None:
        """Train what epochs are left, evaluate once, write the completed record."""
        while self.epoch():
            pass
        test_loss, test_accuracy = self.trainer.evaluate()
        epochs = [{"epoch": number} for number in range(1, len(self.record.epoch_times_s) + 1)]
        self.record = dataclasses.replace(
            self.record, loop=self.impl.own_loop.LOOP, windows=self.clock.windows,
            steady_step_time_ms=steady_step_times(epochs, self.clock.windows),
            mean_losses=self.mean_losses, final_test_accuracy=test_accuracy,
            final_test_loss=test_loss, status="completed")
        files.write_json(self.path, self.record.to_dict())
        print(f"{self.impl.FRAMEWORK} own loop: "
              f"{steady_seconds(self.record.epoch_times_s):.2f} s after the first epoch, "
              f"test_acc {test_accuracy:.4f}", flush=True)

    def stop(self, exc: BaseException) -> None:
        """Record why the loop ended early (a stop signal: interrupted; else failed)."""
        stopped = isinstance(exc, KeyboardInterrupt)
        self.record.status = "interrupted" if stopped else "failed"
        self.record.error = str(exc) or type(exc).__name__
        files.write_json(self.path, self.record.to_dict())

    def close(self) -> None:
        self.epochs.close()
        self.trainer.close()


# How an own loop trained, in its record (the report says it)
APART = "in a process of its own"
BESIDE = "in its run's process, a timing window of each loop in turn"


def run(impl: ModuleType, config: RunConfig, dataset: Dataset) -> int:
    """Train `config` with `impl`'s own loop in this process alone and write own-loop.json
    into config.out; an exit code. A stop signal ends it at once; a failure or stop is
    written, then raised on (compare.run.worker reports it in one line). `impl` holds its
    framework's `own_loop` module (compare.run.interface.OwnLoopModule)."""
    own = None
    try:
        with shutdown.interruptible():
            own = OwnLoopRun(impl, config, dataset, impl.select_device(config))
            wall_time.mark("built")
            own.finish()
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - recorded, then one line
        if own is not None:
            own.stop(exc)
        raise
    finally:
        if own is not None:
            own.close()
    return EXIT_OK


class Twin:
    """A run's own-loop twin in the run's process (RunConfig.own_loop_beside), trained a
    window or its first epoch at a time as the run's schedule says (compare.run.schedule). A
    twin that fails is recorded and left; the run goes on."""

    def __init__(self, impl: ModuleType, config: RunConfig, dataset: Dataset,
                 choice: DeviceChoice):
        assert config.own_loop_beside is not None
        twin = config.replace(out=config.own_loop_beside, own_loop_beside=None,
                              tensorboard_dir=None, profile_steps=0)
        self.own: OwnLoopRun | None = None
        try:
            self.own = OwnLoopRun(impl, twin, dataset, choice, beside=True)
        except Exception as exc:  # noqa: BLE001 - the twin is extra (its record says why)
            print(f"{impl.FRAMEWORK} own loop failed: {exc.__class__.__name__}: {exc}",
                  file=sys.stderr, flush=True)

    def window(self) -> float | None:
        """Train the twin's next timing window; its ms per step (None: none trained)."""
        def window(own: OwnLoopRun) -> float | None:
            if not own.window():
                return None
            last = own.clock.windows[-1]
            return 1000.0 * last["seconds"] / last["steps"]
        return self._guarded(window)

    def first_epoch(self) -> None:
        self._guarded(lambda own: own.epoch())

    def finish(self, window_pairs: list[list[float]], own_first: list[bool]) -> None:
        """Train what the twin has left, then evaluate it and write its record with the
        pairs of windows ([shared, own] ms per step) and which came first in each."""
        if self.own is not None:
            self.own.record.window_pairs, self.own.record.own_first = window_pairs, own_first
        self._guarded(lambda own: own.finish())
        self.close()

    def stop(self, exc: BaseException) -> None:
        if self.own is not None:
            self.own.stop(exc)
        self.close()

    def close(self) -> None:
        if self.own is not None:
            own, self.own = self.own, None
            if own.record.status == "running":  # the run ended first (it failed)
                own.stop(RuntimeError("the run it trained beside ended before it"))
            own.close()

    def _guarded(self, work: Callable[[OwnLoopRun], T]) -> T | None:
        if self.own is None:
            return None
        try:
            return work(self.own)
        except Exception as exc:  # noqa: BLE001 - the twin is extra: the run goes on
            print(f"{self.own.impl.FRAMEWORK} own loop failed: "
                  f"{exc.__class__.__name__}: {exc}", file=sys.stderr, flush=True)
            self.stop(exc)
            return None


def steady_seconds(epoch_times_s: list[float]) -> float:
    """Training time of the epochs after the first (the first carries tracing, compilation
    and autotuning), or of the only epoch: the same rule as the shared loop's figures."""
    return sum(epoch_times_s[1:]) if len(epoch_times_s) > 1 else sum(epoch_times_s)


def running_means(losses: list[float], steps: list[int]) -> list[float]:
    """The running mean of `losses` (one per step, in order) after each count in `steps`:
    the shared loop's per-step losses in the form the own loops report theirs."""
    means, total, done = [], 0.0, 0
    for count in steps:
        total += sum(losses[done:count])
        done = count
        means.append(total / count)
    return means

