"""TensorFlow/Keras trainer: tf.data, MirroredStrategy, mixed precision.

The loop and its clock are compare.run.loop's; this module supplies the compare.run.interface
Trainer. Run by the CLI as `python -m tf_impl.train CONFIG.json`, in the environment
compare.experiment.frameworks.process_environment gives it: TensorFlow quiet from its import.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from compare.experiment import networks, stages, weights
from compare.experiment.config import RunConfig, steps_per_call
from compare.experiment.datasets import Dataset
from compare.machine import gpu_metrics
from compare.run import phases, worker
from compare.run.interface import DeviceChoice
from compare.run.phases import Capture, scope
from compare.run.schedule import Handover
from compare.run.validate import check_split
from tf_impl import data as tf_data
from tf_impl import device as trainer_device
from tf_impl import manifest as trainer_manifest
from tf_impl import own_loop  # noqa: F401 - the protocol's: compare.run.own_loop runs it
from tf_impl import profile as tf_profile
from tf_impl.device import (  # noqa: F401 - the protocol's: compare.run.worker looks here
    FRAMEWORK,
    _pci_bus_ids,
    describe_environment,
    float64_missing,
    select_device,
)
from tf_impl.model import build_model, export_gradients, export_weights, load_weights
from tf_impl.model import describe_model as describe_model  # noqa: PLC0414 - the protocol's
from tf_impl.optimizer import make_optimizer, restorer
from tf_impl.scalars import ScalarWriter


class Trainer:
    """The model, optimizer and pipelines, replicated by MirroredStrategy in this process."""

    framework = FRAMEWORK
    unbiased_running_variance = False  # Keras averages the biased batch variance (parity)

    def __init__(self, config: RunConfig, dataset: Dataset, choice: DeviceChoice):
        self.config, self.choice = config, choice
        # first the strategy (MultiWorkerMirroredStrategy), then numerics: before any TF op
        self.strategy = trainer_device.make_strategy(config, choice)
        self.numerics = trainer_device.configure_numerics(config, choice)
        keras.utils.set_random_seed(config.seed)
        self.replicas = self.strategy.num_replicas_in_sync
        self.steps_per_call = steps_per_call(config, choice.on_gpu)
        self.spec = networks.run_spec(config, len(dataset.classes))
        self.initial = weights.for_run(self.spec, config)  # None: the framework's own
        with self.strategy.scope():  # build, load and compile inside the scope (Keras guide)
            self.placement = stages.placement(config, choice.names)  # None: not split
            self.model = build_model(self.spec, config.bn_momentum, config.bn_epsilon,
                                     self.placement)
            if self.initial is not None:
                load_weights(self.model, self.initial, self.spec)
            self.optimizer = make_optimizer(self.model, config, choice)
            self.optimizer.build(self.model.trainable_variables)
            self._restore_optimizer = restorer(self.optimizer)  # to new, by reset()
            self.train_batches = tf_data.train_pipeline(dataset, config, choice)
            self.test_batches = tf_data.test_pipeline(dataset, config, choice)
        self.steps_per_epoch = self.train_batches.steps_per_epoch
        self.test_calls = math.ceil(len(dataset.test_y) / config.batch_size)  # global batches
        boards = choice.names[:1] if choice.shared_chip else choice.names  # logical GPUs: one
        self.gpu_indices = (gpu_metrics.nvml_indices(_pci_bus_ids(choice)[:len(boards)], boards)
                            if choice.on_gpu else None)
        # No AutoGraph: the steps hold no Python control flow on tensors (their one loop is an
        # explicit tf.while_loop; converting source costs part of the first epoch), and under
        # autograph=False strategy.run leaves the replica functions unconverted too.
        # --compile: XLA compiles what Model.fit's jit_compile does, a replica's whole step
        # with its update, where no strategy spreads replicas (nor the model stages over
        # devices); else the forward and backward, and the update (its all-reduce) outside.
        self.compiles_update = (config.compile and config.parallel != "model"
                                and self.strategy is tf.distribute.get_strategy())
        self._jit_part = tf.function(  # what compiled is read from it (tf_impl/manifest.py)
            self._forward_backward_update if self.compiles_update else self._forward_backward,
            jit_compile=config.compile, autograph=False)
        self.compile_baseline = trainer_manifest.compile_baseline()
        self._train_step = tf.function(self._distributed_step, autograph=False)
        # Traced once, at the first call, for any number of steps (train_steps): an epoch's
        # last call, shorter when steps_per_epoch is not a multiple of steps_per_call, would
        # otherwise trace it again, in the first epoch.
        self._train_steps = tf.function(self._distributed_steps, autograph=False)
        # The whole test set in one call: one trace whatever the last batch's size, and no
        # host round trip per batch
        self._evaluate = tf.function(self._distributed_evaluate, autograph=False)
        self.profiling = False  # a profiler records: train_steps keeps the input waits
        self.profiled_waits: list = []

    def batches(self, epoch: int):
        return self.train_batches.epoch(epoch)

    def train_steps(self, batches, lrs: list[float]):
        """len(lrs) steps in one call of the step function, which reads their batches from
        the distributed iterator inside the graph: (losses, each step's host clock before and
        after get_next)."""
        batches.check(len(lrs))
        if not self._train_steps.experimental_get_tracing_count():  # any length from here on
            self._train_steps.get_concrete_function(batches.iterator,
                                                    tf.TensorSpec([None], tf.float32))
        done = self._train_steps(batches.iterator, tf.constant(lrs, tf.float32))
        batches.took(len(lrs))
        if self.profiling:
            self.profiled_waits.append(done[1])
        return done

    def read_steps(self, pending) -> tuple[list[float], float]:
        losses = self._sum_over_workers(tf.concat([losses for losses, _ in pending], 0))
        waits = np.concatenate([stamps.numpy() for _, stamps in pending])  # host: no sync
        return (losses.numpy().astype(float).tolist(),  # one transfer per window
                float(np.sum(waits[:, 1] - waits[:, 0])))

    def train_step(self, batch, lr: float):
        return self._train_step(batch, tf.constant(lr, self.optimizer.learning_rate.dtype))

    def losses(self, pending) -> list[float]:
        stacked = self._sum_over_workers(tf.stack(pending))
        return stacked.numpy().astype(float).tolist()  # one transfer per window

    def _sum_over_workers(self, local_losses):
        """The global-batch losses from each worker's share (see _distributed_step): one
        collective per window under MultiWorkerMirroredStrategy, in which the first local
        replica of each worker brings the worker's values and the others zeros."""
        if self.choice.processes == 1:
            return local_losses
        local = len(self.choice.names)

        def share():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            return tf.where(replica % local == 0, local_losses, tf.zeros_like(local_losses))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, self.strategy.run(share),
                                    axis=None)

    def sync(self) -> None:
        """Wait for this process's replicas' queued work (tf.test.experimental.sync_devices
        does that for every device it knows, which under MultiWorkerMirroredStrategy
        includes the other workers' and fails; so the same op on the local ones)."""
        if self.choice.processes == 1:
            tf.test.experimental.sync_devices()
            return
        for device in self.strategy.extended.worker_devices:
            with tf.device(device):
                tf.raw_ops.SyncDevice()

    def epoch_device_time(self) -> float | None:
        return None  # TF has no CUDA events; its epoch clock is the synchronised wall clock

    def evaluate(self) -> tuple[float, float]:
        total_loss, correct, count = (float(s) for s in self._evaluate(
            iter(self.test_batches), tf.constant(self.test_calls)))
        return total_loss / count, correct / count

    def peak_memory(self) -> tuple[int | None, str | None]:
        if self.choice.on_gpu:
            info = tf.config.experimental.get_memory_info(self._first_device())
            return int(info["peak"]), "tf.config.experimental.get_memory_info peak, replica 0"
        return None, "CPU run: no device allocator to read (host peak RSS is in the summary)"

    def reset_peak_memory(self) -> None:
        if self.choice.on_gpu:
            tf.config.experimental.reset_memory_stats(self._first_device())

    def save_model(self, directory: Path) -> str:
        if self.placement is not None:  # a StagedModel has no config to save: its weights
            target = Path(directory) / "model.weights.h5"
            self.model.save_weights(target)
            return target.name
        target = Path(directory) / "model.keras"
        temporary = target.with_name(f".model.{os.getpid()}.tmp.keras")
        self.model.save(temporary)  # Keras insists on the .keras suffix
        os.replace(temporary, target)
        return target.name

    def save_checkpoint(self, directory: Path) -> str:
        """Weights, BatchNorm statistics and the optimizer's variables (momentum buffers,
        iterations, loss scale) with tf.train.Checkpoint; the file prefix written."""
        prefix = Path(directory) / "tf_state"
        tf.train.Checkpoint(model=self.model, optimizer=self.optimizer).write(str(prefix))
        return prefix.name

    def load_checkpoint(self, directory: Path) -> None:
        checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)
        checkpoint.read(str(Path(directory) / "tf_state")).assert_consumed()

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, tf.errors.ResourceExhaustedError)

    def manifest(self) -> dict:
        """TensorFlow's half of the fairness manifest (tf_impl/manifest.py)."""
        return trainer_manifest.describe(self)

    def start_profile(self, directory: Path) -> None:
        self.profile_directory = Path(directory)
        tf.profiler.experimental.start(str(self.profile_directory))
        self.profiling, self.profiled_waits = True, []

    def stop_profile(self) -> Capture:
        """A folder TensorBoard's profile plugin reads (plugins/profile/<run>/), read back
        into the recorded steps' phases, the input phase the steps' own waits (train_steps)."""
        tf.profiler.experimental.stop()
        self.profiling = False
        return phases.with_input_waits(
            tf_profile.read_capture(self.profile_directory, self.choice.on_gpu),
            [wait for stamps in self.profiled_waits for wait in stamps.numpy()])

    def scalar_writer(self, directory: Path) -> ScalarWriter:
        return ScalarWriter(directory)

    def gather_figures(self, figures: list[float]) -> list[list[float]]:
        if self.choice.processes == 1:
            return [list(figures)]
        row = tf.constant([figures], tf.float64)
        rows = self.strategy.gather(self.strategy.run(lambda: tf.identity(row)), axis=0)
        return rows.numpy()[:: len(self.choice.names)].tolist()  # a row per worker, not replica

    def peer_failures(self, exc: BaseException) -> dict[int, str] | None:
        return trainer_device.peer_failures(self.choice, exc)

    def close(self) -> None:
        """Let go of the pipelines. Deleting the training iterator can wait for tf.data's
        autotuning (seconds, in about half the runs on a small CPU; never with autotuning
        off), so it is deleted on a thread of its own: a framework
        process, which ends at once after its run (compare.run.worker.leave), does not wait
        for it; a longer-lived one frees it a moment later."""
        pipelines = [self.train_batches, self.test_batches]
        self.train_batches = self.test_batches = None  # type: ignore[assignment]  # closed
        tf_data._release_apart(pipelines)

    # ---- parity probe (compare.run.interface.ProbeTrainer)

    def gradients(self, batch) -> tuple[np.ndarray, float, dict[str, np.ndarray]]:
        """Logits, loss and canonical-layout gradients for one batch, no update."""
        images, labels = self._load(batch)
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = tf.reduce_mean(self._loss(labels, logits, self.config.label_smoothing))
        grads = tape.gradient(loss, self.model.trainable_variables)
        by_path = {v.path: g.numpy() for v, g in zip(self.model.trainable_variables, grads)}
        return logits.numpy(), float(loss), export_gradients(self.model, by_path, self.spec)

    def reset(self) -> None:
        assert self.initial is not None, "a reset needs the shared initial weights"
        load_weights(self.model, self.initial, self.spec)
        self._restore_optimizer()

    def loss_scale(self) -> float | None:
        """The dynamic loss scale now (LossScaleOptimizer's), None without loss scaling."""
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            # .numpy(): float() of a Keras variable fails under MirroredStrategy, where
            # its value is a MirroredVariable
            return float(self.optimizer.dynamic_scale.numpy())
        return None

    def compilation(self) -> dict:
        """What compiled of the training step so far (tf_impl/manifest.py)."""
        return trainer_manifest.compiled(self)

    def weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model, self.spec)

    # ---- the steps, traced by tf.function

    def _first_device(self) -> str:
        return self.choice.names[0].strip("/").upper()  # "/gpu:0" -> "GPU:0"

    def _load(self, batch):
        """(images, labels); for the `device` pipeline, loaded from the plan's keys here."""
        if self.config.pipeline.kind == "device":
            return self.train_batches.source.load_batch(*batch)
        return batch

    def _loss(self, labels, logits, smoothing: float):
        """Per-example cross-entropy with label smoothing, as torch's F.cross_entropy, in
        float32 (float64 in the parity probe)."""
        classes, dtype = self.spec.num_classes, self.numerics["dtype"]
        targets = tf.one_hot(labels, classes, dtype=dtype) * (1.0 - smoothing) + smoothing / classes
        return tf.nn.softmax_cross_entropy_with_logits(targets, tf.cast(logits, dtype))

    def _forward_backward(self, images, labels):
        """The loss and gradients of the replica's batch: in --micro-batches parts whose
        gradients add up (each part's loss scaled by the global batch, so the sum is the
        global-batch mean), or whole."""
        if self.config.micro_batches == 1:
            return self._part_forward_backward(images, labels)
        total, summed = 0.0, None
        for part_images, part_labels in zip(tf.split(images, self.config.micro_batches),
                                            tf.split(labels, self.config.micro_batches)):
            loss, grads = self._part_forward_backward(part_images, part_labels)
            total = total + loss
            summed = grads if summed is None else [a + b for a, b in zip(summed, grads)]
        return total, summed

    def _part_forward_backward(self, images, labels):
        # The name scopes mark the step's phases in the profiler's op names (compare.run.phases).
        with tf.GradientTape() as tape, tf.name_scope(scope("forward")):
            logits = self.model(images, training=True)
            per_example = self._loss(labels, logits, self.config.label_smoothing)
            # Scaled by the global batch: the all-reduce SUM then gives the global mean.
            loss = tf.nn.compute_average_loss(per_example,
                                              global_batch_size=self.config.batch_size)
            scaled = self.optimizer.scale_loss(loss)
        with tf.name_scope(scope("backward")):
            return loss, tape.gradient(scaled, self.model.trainable_variables)

    def _update(self, grads) -> None:
        with tf.name_scope(scope("update")):  # with any all-reduce, which Keras does here
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    def _forward_backward_update(self, images, labels):
        loss, grads = self._forward_backward(images, labels)
        self._update(grads)
        return loss

    def _replica_step(self, *batch):
        with tf.name_scope(scope("input")):
            images, labels = self._load(batch)
        if self.compiles_update:
            return self._jit_part(images, labels)
        loss, grads = self._jit_part(images, labels)
        self._update(grads)
        return loss

    def _distributed_step(self, batch, lr):
        """One step over all replicas: the global-batch loss, or under several workers this
        worker's share of it, summed over its own replicas only (a cross-worker reduction of
        the loss every step would be one more collective per step, which PyTorch does not
        pay: _sum_over_workers adds the shares once per window)."""
        with tf.name_scope(scope("update")):
            self.optimizer.learning_rate.assign(lr)
        per_replica = self.strategy.run(self._replica_step, args=batch)
        if self.choice.processes > 1:
            return tf.add_n(self.strategy.experimental_local_results(per_replica))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def _distributed_steps(self, iterator, lrs):
        """len(lrs) steps of _distributed_step in one graph, each on the iterator's next
        batch (a tf.while_loop, as Keras' steps_per_execution): the steps' losses and, for
        each step, the host clock (tf.timestamp, seconds since the epoch) before and after
        the iterator's get_next, pinned around it by control dependencies: the step's wait
        for its batch, kept in host memory so reading it never waits for the device."""
        count = tf.shape(lrs)[0]
        losses = tf.TensorArray(tf.float32, size=count)
        with tf.device("/cpu:0"):
            waits = tf.TensorArray(tf.float64, size=count, element_shape=(2,))

        def step(i, losses, waits):
            with tf.device("/cpu:0"), tf.name_scope(scope("input")):
                before = tf.timestamp()
            with tf.control_dependencies([before]), tf.name_scope(scope("input")):
                batch = iterator.get_next()
            with (tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)),
                  tf.device("/cpu:0"), tf.name_scope(scope("input"))):
                waits = waits.write(i, tf.stack([before, tf.timestamp()]))
            losses = losses.write(i, self._distributed_step(batch, lrs[i]))
            return i + 1, losses, waits

        _, losses, waits = tf.while_loop(lambda i, losses, waits: i < count, step,
                                         (tf.constant(0), losses, waits))  # i: 0 .. count - 1
        with tf.device("/cpu:0"):
            return losses.stack(), waits.stack()

    def _replica_eval(self, images, labels):
        logits = self.model(images, training=False)
        loss = tf.reduce_sum(self._loss(labels, logits, 0.0))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.int64))
        return (tf.cast(loss, tf.float64), tf.cast(correct, tf.float64),
                tf.cast(tf.size(labels), tf.float64))

    def _distributed_evaluate(self, iterator, calls):
        """The test set's summed loss, correct predictions and images, over all replicas:
        `calls` batches from the iterator in a tf.while_loop, the sums on the device."""
        def batch(i, sums):
            per_replica = self.strategy.run(self._replica_eval, args=iterator.get_next())
            return i + 1, [total + self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                           for total, v in zip(sums, per_replica)]
        zero = tf.constant(0.0, tf.float64)
        return tf.while_loop(lambda i, sums: i < calls, batch, (tf.constant(0), [zero] * 3))[1]


def train(config: RunConfig, dataset: Dataset, handover: Handover | None = None,
          resume: bool = False) -> int:
    """Train as `config` says, all replicas in this process under make_strategy's
    strategy (compare.experiment.strategy), taking turns through `handover`; an exit code.
    With `resume`, continue from the checkpoint in config.out (compare.run.checkpoint)."""
    check_split(config)
    return worker.train_process(sys.modules[__name__], config, dataset, select_device(config),
                                handover, resume)


if __name__ == "__main__":
    worker.run(sys.modules[__name__])
