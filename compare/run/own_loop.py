"""A framework's own idiomatic loop on a run's recipe: the answer to "is the shared loop
handicapping my framework?".

`python -m tf_impl.train CONFIG --own-loop` (or torch_impl) builds the run's Trainer (the
same model, shared initial weights, data plan, optimizer, precision and distribution), then
trains it with the framework's own loop instead of compare.run.loop: Keras' compile + fit
(tf_impl/own_loop.py) or the plain PyTorch loop (torch_impl/own_loop.py). `compare` trains
it in the run's own process instead (`Beside`): a second Trainer of the same run, an epoch of
each loop in turn, so the two loops' epochs of a pair meet the same state of a noisy host.
Each epoch is timed as the shared loop times it (the device synchronised at both ends,
evaluation apart); the test set is evaluated once, at the end. What it measured is written
to own-loop.json (compare.records.OwnLoopRecord) beside nothing else: no checkpoint, no
per-step files.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from compare import files, schema
from compare.errors import EXIT_OK, UserError
from compare.experiment.config import RunConfig
from compare.experiment.datasets import Dataset
from compare.experiment.recipe import learning_rate
from compare.records import OwnLoopRecord
from compare.run import shutdown, turns, wall_time
from compare.run.interface import DeviceChoice
from compare.run.summary import steady_step_times
from compare.run.windows import WindowClock


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


class Beside:
    """A run's own-loop twin trained in the run's process (RunConfig.own_loop_beside), a
    timing window of each loop in turn, so that the two windows of a pair meet the same state
    of a noisy host, whose speed changes within seconds (docs/measurement.md, "On a busy
    host"). One loop trains at any moment, and neither clock runs in the other's window.

    The shared loop's first epoch comes first, with no window of the twin's inside it (the other
    framework's turns, on a CPU side by side, still pass between its windows): it compiles and
    autotunes as a run alone does, where after the twin's first epoch it would find the
    process's caches (XLA's autotuning, the driver's kernels) filled, and the run's start-up and
    training time would understate a user's. The twin's first epoch follows, whole. From the
    second epoch on, the windows go in pairs, one of each loop, the twin's second in one pair
    and first in the next (the other way round on odd seeds), or, where the run takes turns
    with the other framework's, in one turn and the next (the turn passes between two pairs),
    so each loop comes back to the processor after something else ran (the other loop, or the
    other framework's turn) as often as the other does. Each pair of windows is one ratio of
    step times (own-loop.json's `window_pairs`, with `own_first` saying which came first). A
    twin that fails is recorded and left; the run goes on."""

    def __init__(self, impl: ModuleType, config: RunConfig, dataset: Dataset,
                 choice: DeviceChoice):
        assert config.own_loop_beside is not None
        twin = config.replace(out=config.own_loop_beside, own_loop_beside=None,
                              tensorboard_dir=None, profile_steps=0)
        self.seed = config.seed
        self.shared_epochs = 0  # the shared loop's epochs trained in this process
        self.slot = 0  # the pair the next windows belong to
        self.own_first: dict[int, bool] = {}  # slot: whether the twin's window came first
        self.shared_ms: dict[int, float] = {}  # slot: the shared loop's ms per step
        self.own_ms: dict[int, float] = {}  # slot: the twin's
        self.own: OwnLoopRun | None = None
        try:
            self.own = OwnLoopRun(impl, twin, dataset, choice, beside=True)
        except Exception as exc:  # noqa: BLE001 - the twin is extra (its record says why)
            print(f"{impl.FRAMEWORK} own loop failed: {exc.__class__.__name__}: {exc}",
                  file=sys.stderr, flush=True)

    def before_window(self) -> None:
        """The shared loop is about to open a window (outside its clock)."""
        if not self.shared_epochs:
            return  # its first epoch: no pairs
        self.own_first[self.slot] = self._order()
        if self.own_first[self.slot]:
            self._twin_window()

    def after_window(self, seconds: float, steps: int) -> None:
        """The shared loop closed a window of `steps` steps in `seconds` (outside its clock)."""
        if not self.shared_epochs:
            return  # its first epoch: no pairs
        self.shared_ms[self.slot] = 1000.0 * seconds / steps
        if not self.own_first[self.slot]:  # its order, set by before_window
            self._twin_window()
        self.slot += 1

    def after_epoch(self) -> None:
        self.shared_epochs += 1
        if self.shared_epochs == 1:  # the twin's first epoch, whole
            self._guarded(lambda own: own.epoch())

    def finish(self) -> None:
        """Train what the twin has left, then evaluate it and write its record."""
        if self.own is not None:
            slots = [slot for slot in sorted(self.shared_ms) if slot in self.own_ms]
            self.own.record.window_pairs = [[self.shared_ms[s], self.own_ms[s]] for s in slots]
            self.own.record.own_first = [self.own_first[s] for s in slots]
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

    def _order(self) -> bool:
        """Whether the twin's window comes first in the pair about to start: turn by turn
        where the run takes turns with the other framework's (every pair of a turn alike, so
        that the first window after a handover is the shared loop's in one turn and the
        twin's in the next), else pair by pair; the shared loop's first on even seeds."""
        taken = turns.taken()
        return ((self.slot if taken is None else taken) + self.seed) % 2 == 1

    def _twin_window(self) -> None:
        """One window of the twin's, in the current slot."""
        def window(own: OwnLoopRun) -> None:
            if own.window():
                last = own.clock.windows[-1]
                self.own_ms[self.slot] = 1000.0 * last["seconds"] / last["steps"]
        self._guarded(window)

    def _guarded(self, work: Callable[[OwnLoopRun], object]) -> None:
        if self.own is None:
            return
        try:
            work(self.own)
        except Exception as exc:  # noqa: BLE001 - the twin is extra: the run goes on
            print(f"{self.own.impl.FRAMEWORK} own loop failed: "
                  f"{exc.__class__.__name__}: {exc}", file=sys.stderr, flush=True)
            self.stop(exc)


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

