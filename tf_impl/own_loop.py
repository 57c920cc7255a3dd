"""Keras' own loop: `model.compile` + `model.fit`, as the Keras guides train, on the run's
model, initial weights, batches and recipe (compare.run.own_loop drives it and writes what
it measured). Its twin is torch_impl/own_loop.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Protocol

import keras
import tensorflow as tf

from compare.experiment.config import RunConfig
from compare.experiment.datasets import Dataset
from compare.run.interface import DeviceChoice
from compare.run.own_loop import WindowClock
from tf_impl import data as tf_data
from tf_impl.optimizer import make_optimizer


class Trainer(Protocol):
    """What Keras' own loop uses of the run's Trainer (tf_impl.train.Trainer, whose module
    imports this one: named here, not imported, so the two import one way)."""

    model: keras.Model
    strategy: tf.distribute.Strategy
    choice: DeviceChoice
    steps_per_call: int
    steps_per_epoch: int
    train_batches: Any  # tf_impl.data's pipeline: its `source` loads the plan's images

    def _loss(self, labels: Any, logits: Any, label_smoothing: float) -> Any: ...


LOOP = ("Keras Model.compile + Model.fit, one fit call per epoch (steps_per_execution = the "
        "run's steps per call)")


def own_loop(trainer: Trainer, config: RunConfig, dataset: Dataset, lrs: list[float],
             clock: WindowClock, mean_losses: list[list[float]]) -> Iterator[float | None]:
    """Train config.epochs epochs of the trainer's model with Keras' fit, as far as the
    caller asks: compiled in the trainer's strategy scope with the same SGD (PyTorch's form,
    loss scaling as the run's), the per-step learning rates `lrs` as a Keras schedule, the
    run's per-example loss, and the data plan's batches in a tf.data pipeline, timed by
    `clock` from a callback (a synchronised window after each window's last call). Yields
    None after each window (the caller's work until the next `next` is in no clock) and each
    epoch's training seconds at its end (the device synchronised at both ends); fills
    `mean_losses`, over the first epoch, with Keras' running mean of the loss after each
    call ([steps, mean] pairs). `fit` cannot be paused from outside, so it runs on a thread
    of its own that works only while the caller waits (Baton), handing back
    from its callback after each window."""
    with trainer.strategy.scope():  # compile where the variables live (the Keras guide)
        optimizer = make_optimizer(trainer.model, config, trainer.choice,
                                   learning_rate=_PlanSchedule(lrs))
        # Its variables made now, as fit makes them under a distribution strategy: else
        # they are made while fit traces its step, and TensorFlow traces the step again
        # (a second trace in the first epoch)
        optimizer.build(trainer.model.trainable_variables)
        trainer.model.compile(
            optimizer=optimizer,
            # Keras casts the labels to the loss's float dtype; the loss takes them as indices
            loss=lambda labels, logits: trainer._loss(tf.cast(labels, tf.int64), logits,
                                                      config.label_smoothing),
            steps_per_execution=trainer.steps_per_call, jit_compile=config.compile)
    baton = Baton()
    handed: list[float | None] = []  # what the fit thread handed back with, last first
    failed: list[BaseException] = []
    timer = _EpochClock(clock, mean_losses, trainer.steps_per_epoch, baton, handed)
    kept = _KeptIterators()

    def fit_epochs() -> None:
        try:
            baton.wait_for_turn()
            for epoch in range(config.epochs):
                # One fit call per epoch, on that epoch's batches: fit given all epochs'
                # batches and steps_per_epoch would run whole calls of steps_per_execution
                # steps, crossing into the next epoch's batches when the epoch is not a
                # multiple of it; a finite epoch ends its last call early, as the shared
                # loop's shorter last call does.
                trainer.model.fit(_fit_batches(trainer, config, dataset, epoch),
                                  initial_epoch=epoch, epochs=epoch + 1,
                                  callbacks=[timer, kept], shuffle=False, verbose=0)
                handed.append(timer.times[-1])
                baton.back_to_caller()
        except Closed:
            pass
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            failed.append(exc)
        finally:
            baton.end()

    fitting = threading.Thread(target=fit_epochs, name="keras-fit", daemon=True)
    fitting.start()
    try:
        while True:
            baton.to_worker()
            if failed:
                raise failed[0]
            if baton.ended:
                break
            yield handed.pop()
    finally:
        baton.close()
        fitting.join(CLOSE_WAIT_S)
    kept.release()


CLOSE_WAIT_S = 60.0  # s: for fit's thread to reach its next hand-back (a window's end)


class _PlanSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The run's learning rate of each optimizer step (compare.experiment.recipe.learning_rate)."""

    def __init__(self, lrs: list[float]):
        self.lrs = tf.constant(lrs, tf.float32)

    def __call__(self, step):
        return tf.gather(self.lrs, tf.minimum(tf.cast(step, tf.int32), tf.size(self.lrs) - 1))

    def get_config(self) -> dict:
        return {"lrs": self.lrs.numpy().tolist()}


class _KeptIterators(keras.callbacks.Callback):
    """Holds the tf.data iterator of each epoch's fit call until the last epoch is done, then
    lets go of them on a thread of their own. Deleting an iterator waits for its autotuning
    thread's next wake-up (TensorFlow's RootDataset::Iterator destructor), which comes later
    the longer the iterator ran: up to a second after each epoch on a small CPU, in the main
    thread as fit returned, between two epochs' clocks. Only when that wait happens
    changes (after the training, off the main thread): the epochs and their times are fit's
    own. Each iterator is spent (fit read its epoch to the end), so holding it costs threads
    that sleep, not batches."""

    def __init__(self):
        super().__init__()
        self.iterators: list = []
        self.train_function = None

    def on_train_begin(self, logs=None):
        train_function = self.train_function = self.model.train_function

        def train(iterator):
            if not self.iterators or self.iterators[-1] is not iterator:
                self.iterators.append(iterator)
            return train_function(iterator)
        self.model.train_function = train

    def on_train_end(self, logs=None):
        self.model.train_function = self.train_function

    def release(self) -> None:
        iterators, self.iterators = self.iterators, []
        tf_data._release_apart(iterators)


class _EpochClock(keras.callbacks.Callback):
    """Tells `clock` where fit's epochs and calls begin and end (it synchronises the device
    at both ends of each epoch and after each window's last call), hands the turn back to
    the caller after each window (`baton`, with None in `handed`), and keeps the first
    epoch's running mean loss after each call of the step function (read there only: a
    read waits for the device, and the first epoch is not in the steady figures)."""

    def __init__(self, clock: WindowClock, mean_losses: list[list[float]],
                 steps_per_epoch: int, baton: Baton, handed: list[float | None]):
        super().__init__()
        self.clock, self.mean_losses, self.steps_per_epoch = clock, mean_losses, steps_per_epoch
        self.baton, self.handed = baton, handed
        self.times: list[float] = []
        self.epoch, self.steps = 0, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.steps = epoch, 0
        self.clock.begin_epoch(epoch)

    def on_train_batch_end(self, batch, logs=None):
        # fit names a call by its last step as if it were whole; an epoch's last call
        # ends with the epoch's batches
        steps = min(batch + 1, self.steps_per_epoch)
        closed = self.clock.steps_done(steps - self.steps)
        self.steps = steps
        if self.epoch == 0 and logs and "loss" in logs:
            self.mean_losses.append([steps, float(logs["loss"])])
        if closed:  # the caller's turn, in no clock
            with self.clock.away():
                self.handed.append(None)
                self.baton.back_to_caller()

    def on_epoch_end(self, epoch, logs=None):
        self.times.append(self.clock.end_epoch())


def _fit_batches(trainer: Trainer, config: RunConfig, dataset: Dataset,
                 epoch: int) -> tf.data.Dataset:
    """The epoch's global batches (images, labels) in the data plan's order, loaded and
    augmented in tf.data as the run's pipeline settings say; fit splits them over the
    strategy's replicas. The `device` pipeline's resident copy has no tf.data form, so its
    images are loaded on the host here."""
    source = trainer.train_batches.source
    if source.packed:
        source = tf_data.PlanImages(dataset.train_x, dataset.train_y, dataset.mean,
                                    dataset.std, config.crop_padding, config.augment,
                                    cutout=config.cutout)
    keys = tf_data._plan_key_batches(config, len(dataset.train_y), epoch, epoch + 1,
                                     (source.height, source.width))
    # flat_map hides the length, which fit reads to know the epoch's steps
    keys = keys.apply(tf.data.experimental.assert_cardinality(trainer.steps_per_epoch))
    return tf_data._finish(tf_data._map(keys, source.load_batch, config), config)


class Closed(Exception):
    """The caller closed the baton: the worker leaves its loop at its next hand-back."""


class Baton:
    """Two threads of one process taking turns, one working at a time: the caller hands the
    turn to the worker (`fit`'s thread) and waits for it back (`to_worker`); the worker hands
    it back and waits (`back_to_caller`), or `end`s. Once `close`d, the worker's next wait
    raises Closed. TensorFlow's thread pools are the process's, so a second thread costs its
    steps nothing; PyTorch's plain loop yields instead (docs/measurement.md, "On a busy
    host")."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._worker_holds = False
        self.ended = self.closed = False

    def to_worker(self) -> None:
        with self._condition:
            self._worker_holds = True
            self._condition.notify_all()
            self._condition.wait_for(lambda: not self._worker_holds or self.ended)

    def back_to_caller(self) -> None:
        with self._condition:
            self._worker_holds = False
            self._condition.notify_all()
        self.wait_for_turn()

    def wait_for_turn(self) -> None:
        with self._condition:
            self._condition.wait_for(lambda: self._worker_holds or self.closed)
            if self.closed:
                raise Closed

    def end(self) -> None:
        """The worker is done: the caller's waits return at once from here on."""
        with self._condition:
            self.ended, self._worker_holds = True, False
            self._condition.notify_all()

    def close(self) -> None:
        with self._condition:
            self.closed = True
            self._condition.notify_all()
