"""TensorFlow/Keras trainer: tf.data, MirroredStrategy, mixed precision.

The loop and its clock are compare.run.loop's; this module supplies the compare.run.interface
Trainer. Run by the CLI as `python -m tf_impl.train CONFIG.json`.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from compare.run import worker

worker.quiet_framework_logs()  # before TensorFlow is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from compare.errors import DeviceError  # noqa: E402
from compare.experiment import precision, specs, stages, strategy, weights  # noqa: E402
from compare.experiment.config import RunConfig, steps_per_call  # noqa: E402
from compare.experiment.datasets import Dataset  # noqa: E402
from compare.experiment.validate import check_split  # noqa: E402
from compare.machine import devices, gpu_metrics  # noqa: E402
from compare.process import cluster  # noqa: E402
from compare.run.interface import DeviceChoice  # noqa: E402
from compare.run.phases import Capture, scope  # noqa: E402
from tf_impl import data as tf_data  # noqa: E402
from tf_impl import profile as tf_profile  # noqa: E402
from tf_impl.model import build_model, export_gradients, export_weights, load_weights  # noqa: E402

FRAMEWORK = "tf"
TF32_DEFAULT = tf.config.experimental.tensor_float_32_execution_enabled()  # before we set it


def select_device(config: RunConfig) -> DeviceChoice:
    """Chosen once, from --device and --devices; the GPU when present under `auto`.

    Must run before TensorFlow initialises its devices: on a CPU-only machine it splits
    the CPU into --devices logical devices so MirroredStrategy runs the multi-replica path.
    Under a TF_CONFIG of several workers (compare.process.cluster) each worker trains --devices
    local GPUs, or its one CPU, under MultiWorkerMirroredStrategy (make_strategy).
    """
    launched = cluster.launch(FRAMEWORK)
    workers = (f", worker {launched.rank} of {launched.processes} on {launched.nodes} "
               f"machine(s)" if launched.multi_process else "")
    gpus = tf.config.list_physical_devices("GPU")
    if config.device == "gpu" and not gpus:
        raise DeviceError("--device gpu: TensorFlow sees no GPU (is tensorflow[and-cuda] "
                          "installed? pip install -e '.[gpu]'); use --device cpu or auto")
    if config.device != "cpu" and gpus:
        if config.devices > len(gpus):
            raise DeviceError(f"--devices {config.devices}: TensorFlow sees only "
                              f"{len(gpus)} GPU(s)")
        used = gpus[: config.devices]
        tf.config.set_visible_devices(used, "GPU")
        for gpu in used:  # grow on demand, so other processes' memory figures stay honest
            tf.config.experimental.set_memory_growth(gpu, True)
        details = tf.config.experimental.get_device_details(used[0])
        name = details.get("device_name", used[0].name)
        names = tuple(f"/gpu:{i}" for i in range(config.devices))
        capability = details.get("compute_capability")
        return DeviceChoice("gpu", names, name,
                            devices.description(name, len(names), config.device, "", workers),
                            launched.rank, launched.processes,
                            tuple(capability) if capability else None)
    replicas = 1 if launched.multi_process else config.devices  # one CPU replica per worker
    try:
        tf.config.set_visible_devices([], "GPU")
        if replicas > 1:
            tf.config.set_logical_device_configuration(
                tf.config.list_physical_devices("CPU")[0],
                [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])
    except RuntimeError:  # TensorFlow already initialised in this process (tests): use it
        available = len(tf.config.list_logical_devices("CPU"))
        if available < replicas:
            raise DeviceError(f"--devices {replicas}: TensorFlow was initialised with "
                              f"{available} logical CPU device(s)") from None
    names = tuple(f"/cpu:{i}" for i in range(replicas))
    return DeviceChoice("cpu", names, None, devices.description(
        None, replicas, config.device, "logical device(s)", workers),
        launched.rank, launched.processes)


def make_strategy(config: RunConfig, choice: DeviceChoice) -> tf.distribute.Strategy:
    """The tf.distribute strategy the replicas train under (--strategy, experiment.strategy):
    MirroredStrategy over the chosen devices when wrapped (several replicas, or `mirrored` on
    one), else the default strategy (tf.distribute.get_strategy(): no distribution, as Keras'
    fit without a strategy). Under a TF_CONFIG of several workers,
    MultiWorkerMirroredStrategy: collective all-reduce over all workers' replicas, NCCL
    between GPUs and ring (gRPC) between CPUs, each collective failing after
    config.collective_timeout_s when a peer does not answer."""
    if config.parallel == "model":  # one replica, its stages on the devices (build_model)
        return tf.distribute.get_strategy()
    if choice.processes == 1:
        if not strategy.resolve(config.strategy, FRAMEWORK, len(choice.names)).wrapped:
            return tf.distribute.get_strategy()
        return tf.distribute.MirroredStrategy(list(choice.names))
    collectives = tf.distribute.experimental.CommunicationImplementation
    implementation = collectives.NCCL if choice.on_gpu else collectives.RING
    return tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation, timeout_seconds=config.collective_timeout_s))


def configure_numerics(config: RunConfig, choice: DeviceChoice) -> dict:
    """Precision policy (experiment.precision), TF32 and determinism; returns what was set."""
    tf.config.experimental.enable_tensor_float_32_execution(config.tf32)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    resolved = precision.resolve(config.precision, choice.on_gpu, choice.capability,
                                 model=config.model)
    if resolved.precision == "mixed":
        policy = "mixed_float16" if choice.on_gpu else "mixed_bfloat16"
    else:
        policy = "float32"
    keras.mixed_precision.set_global_policy(policy)
    return {"policy": policy, "loss_scaling": policy == "mixed_float16", "resolved": resolved}


class TorchFormSGD(keras.optimizers.Optimizer):
    """SGD in PyTorch's form, so both frameworks apply the same update:
    g += wd * p; v = mu * v + g; p -= lr * (g + mu * v if nesterov else v).
    (keras.optimizers.SGD keeps v in units of lr * g, which differs once lr changes.)"""

    def __init__(self, learning_rate, momentum=0.9, nesterov=False, l2=0.0,
                 name="torch_form_sgd", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum, self.nesterov, self.l2 = momentum, nesterov, l2

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = (self.add_optimizer_variables(variables, "momentum")
                          if self.momentum else [])

    def update_step(self, gradient, variable, learning_rate):
        lr = keras.ops.cast(learning_rate, variable.dtype)
        g = keras.ops.cast(gradient, variable.dtype)
        if self.l2:
            g = g + self.l2 * variable
        if self.momentum:
            v = self.momentums[self._get_variable_index(variable)]
            self.assign(v, self.momentum * v + g)
            g = g + self.momentum * v if self.nesterov else v
        self.assign_sub(variable, lr * g)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov,
                "l2": self.l2}


class ScalarWriter:
    """TensorBoard scalars through tf.summary's own event-file writer."""

    def __init__(self, directory: Path):
        self.writer = tf.summary.create_file_writer(str(directory))

    def scalar(self, tag: str, value: float, step: int) -> None:
        with self.writer.as_default():
            tf.summary.scalar(tag, value, step=step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Trainer:
    """The model, optimizer and pipelines, replicated by MirroredStrategy in this process."""

    framework = FRAMEWORK

    def __init__(self, config: RunConfig, dataset: Dataset, choice: DeviceChoice):
        self.config, self.choice = config, choice
        self.strategy = make_strategy(config, choice)  # first: MultiWorkerMirroredStrategy
        self.numerics = configure_numerics(config, choice)  # must come before any TF op
        keras.utils.set_random_seed(config.seed)
        self.replicas = self.strategy.num_replicas_in_sync
        self.steps_per_call = steps_per_call(config, choice.on_gpu)
        self.spec = specs.get_spec(config.model, len(dataset.classes))
        self.initial = (weights.initial_weights(self.spec, config.seed) if config.shared_init
                        else None)
        with self.strategy.scope():  # build, load and compile inside the scope (Keras guide)
            self.placement = stages.placement(config, choice.names)  # None: not split
            self.model = build_model(self.spec, config.bn_momentum, config.bn_epsilon,
                                     self.placement)
            if self.initial is not None:
                load_weights(self.model, self.initial, self.spec)
            self.optimizer = make_optimizer(self.model, config, choice)
            self.optimizer.build(self.model.trainable_variables)
            self.train_batches = tf_data.train_pipeline(dataset, config, choice)
            self.test_batches = tf_data.test_pipeline(dataset, config, choice)
        self.steps_per_epoch = self.train_batches.steps_per_epoch
        self.gpu_indices = (gpu_metrics.nvml_indices(_pci_bus_ids(choice), choice.names)
                            if choice.on_gpu else None)
        # XLA compiles the forward/backward; the update and all-reduce stay outside it.
        self._gradients = tf.function(self._forward_backward, jit_compile=config.compile)
        self._train_step = tf.function(self._distributed_step)
        # Traced once per number of steps: steps_per_call, and the epoch's last call when
        # steps_per_epoch is not a multiple of it.
        self._train_steps = tf.function(self._distributed_steps)
        self._eval_step = tf.function(self._distributed_eval)
        self.profiling = False  # a profiler records: train_steps keeps the input waits
        self.profiled_waits: list = []

    def batches(self, epoch: int):
        return self.train_batches.epoch(epoch)

    def train_steps(self, batches, lrs: list[float]):
        """len(lrs) steps in one call of the step function, which reads their batches from
        the distributed iterator inside the graph: (losses, each step's host clock before and
        after get_next)."""
        batches.check(len(lrs))
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
        return self._train_step(batch, tf.constant(lr, tf.float32))

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
        total_loss = correct = count = tf.constant(0.0, tf.float64)
        for batch in self.test_batches:  # sums stay on the device until the end
            loss, right, n = self._eval_step(batch)
            total_loss, correct, count = total_loss + loss, correct + right, count + n
        count = float(count)
        return float(total_loss) / count, float(correct) / count

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
        """TensorFlow's half of the fairness manifest (compare.run.fairness builds the rest)."""
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        scaling = None
        if self.numerics["loss_scaling"]:
            scaling = (f"dynamic (keras.optimizers.LossScaleOptimizer): initial "
                       f"{self.config.loss_scale_initial:g}, x2 after "
                       f"{self.config.loss_scale_growth_interval} finite steps, /2 on overflow")
        wrapped = strategy.resolve(self.config.strategy, FRAMEWORK, self.replicas,
                                   self.choice.processes)
        distribution = (f"MirroredStrategy over {', '.join(self.choice.names)}"
                        if wrapped.wrapped else
                        f"default strategy (no distribution) on {self.choice.names[0]}")
        if self.placement is not None:
            distribution = ("default strategy, one replica; its stages under tf.device of "
                            + ", ".join(self.placement))
        if self.choice.processes > 1:
            distribution = (f"MultiWorker{distribution} on each of {self.choice.processes} workers "
                            f"(collective {'NCCL' if self.choice.on_gpu else 'ring'} all-reduce)")
        return {
            "precision_policy": self.numerics["policy"],
            "tf32": {"matmul": tf32, "cudnn": tf32},
            "cudnn_autotune": self.choice.on_gpu,  # TF autotunes cuDNN convolutions by default
            "loss_scaling": scaling,
            "bn_momentum_as_set": 1.0 - self.config.bn_momentum,
            "bn_running_variance": "biased batch variance (Keras)",
            "optimizer_implementation": "TorchFormSGD (a keras.optimizers.Optimizer, "
                                        "tf_impl/train.py)",
            "distribution": distribution,
            "strategy": wrapped.to_dict(FRAMEWORK),
            "precision": self.numerics["resolved"].to_dict(self.config.precision),
            "step_batching": (f"{self.steps_per_call} step(s) per tf.function call, which reads "
                              "the distributed iterator inside the graph (tf.while_loop over "
                              "get_next, as Keras' steps_per_execution)" + (
                                  "; --cuda-graphs is PyTorch's alone" if self.config.cuda_graphs
                                  else "")),
            "input_wait": "tf.timestamp before and after the iterator's get_next inside the "
                          "step function (in the graph: no host next() to time)",
            "compile": "XLA jit_compile (forward+backward)" if self.config.compile else "off",
            "channels_last": True,  # Keras convolutions compute NHWC; not switchable here
            "pipeline": tf_data.pipeline_settings(self.config, self.choice),
            "placement": (None if self.placement is None else
                          [f"stage {i}: {d}" for i, d in enumerate(self.placement)]),
            "default_init": "Keras default initialisers",
            # What Keras itself does differently; no setting changes it.
            "loss_scale_check": (
                "Keras LossScaleOptimizer: each step branches (tf.cond) on whether every "
                "gradient is finite; the predicate is read on the host, a device-to-host "
                "wait per step" if self.numerics["loss_scaling"] else None),
            "batchnorm_kernel": (
                "Keras 3 BatchNormalization: moments and normalisation as separate ops (no "
                "fused kernel), in float32" + (
                    f" (inputs cast up from the {self.numerics['policy']} policy's compute type)"
                    if self.numerics["policy"] != "float32" else "")
                if specs.has_batchnorm(self.spec) else None),
        }

    def start_profile(self, directory: Path) -> None:
        self.profile_directory = Path(directory)
        tf.profiler.experimental.start(str(self.profile_directory))
        self.profiling, self.profiled_waits = True, []

    def stop_profile(self) -> Capture:
        """A folder TensorBoard's profile plugin reads (plugins/profile/<run>/), read back
        into the recorded steps' phases. The input phase is the steps' own waits for their
        batches (train_steps): TensorFlow's profiler leaves out ops its cost model has found
        cheap, get_next and the stamps among them."""
        tf.profiler.experimental.stop()
        self.profiling = False
        capture = tf_profile.read_capture(self.profile_directory, self.choice.on_gpu)
        if self.profiled_waits and not capture.origin_s:
            capture.notes.append("the profile has no start time: its input phase is empty "
                                 "(the input waits cannot be placed on its clock)")
        elif self.profiled_waits:
            waits = np.concatenate([w.numpy() for w in self.profiled_waits])
            capture.host["input"] += [(b - capture.origin_s, e - capture.origin_s)
                                      for b, e in waits]
        return capture

    def scalar_writer(self, directory: Path) -> ScalarWriter:
        return ScalarWriter(directory)

    def gather_figures(self, figures: list[float]) -> list[list[float]]:
        if self.choice.processes == 1:
            return [list(figures)]
        row = tf.constant([figures], tf.float64)
        rows = self.strategy.gather(self.strategy.run(lambda: tf.identity(row)), axis=0)
        return rows.numpy()[:: len(self.choice.names)].tolist()  # a row per worker, not replica

    def peer_failures(self, exc: BaseException) -> dict[int, str] | None:
        """After a failure under MultiWorkerMirroredStrategy: the workers TensorFlow's error
        names (its health check says which task it found down), as ranks; None when it
        names none or on one worker."""
        if self.choice.processes == 1 or not self.choice.is_chief:
            return None
        lines = str(exc).splitlines()
        failures = {}
        for rank in cluster.tf_tasks_named(str(exc)):
            at = next((i for i, line in enumerate(lines) if rank in cluster.tf_tasks_named(line)),
                      0)
            said = lines[at].strip()
            if said.startswith("/job:") and at > 0:  # a bare task name: the line before says why
                said = f"{lines[at - 1].strip()} {said}"
            if rank != self.choice.rank:
                failures[rank] = f"named by TensorFlow: {said[:300]}"
        return failures or None

    def close(self) -> None:
        self.train_batches = self.test_batches = None

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

    def reset_weights(self) -> None:
        load_weights(self.model, self.initial, self.spec)

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
        """Per-example cross-entropy with label smoothing, as torch's F.cross_entropy."""
        classes = self.spec.num_classes
        targets = tf.one_hot(labels, classes) * (1.0 - smoothing) + smoothing / classes
        return tf.nn.softmax_cross_entropy_with_logits(targets, tf.cast(logits, tf.float32))

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

    def _replica_step(self, *batch):
        with tf.name_scope(scope("input")):
            images, labels = self._load(batch)
        loss, grads = self._gradients(images, labels)
        with tf.name_scope(scope("update")):  # with the all-reduce, which Keras does here
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
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
        for i in tf.range(count):
            with tf.device("/cpu:0"), tf.name_scope(scope("input")):
                before = tf.timestamp()
            with tf.control_dependencies([before]), tf.name_scope(scope("input")):
                batch = iterator.get_next()
            with tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)):
                with tf.device("/cpu:0"), tf.name_scope(scope("input")):
                    waits = waits.write(i, tf.stack([before, tf.timestamp()]))
            losses = losses.write(i, self._distributed_step(batch, lrs[i]))
        with tf.device("/cpu:0"):
            return losses.stack(), waits.stack()

    def _replica_eval(self, images, labels):
        logits = self.model(images, training=False)
        loss = tf.reduce_sum(self._loss(labels, logits, 0.0))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.int64))
        return (tf.cast(loss, tf.float64), tf.cast(correct, tf.float64),
                tf.cast(tf.size(labels), tf.float64))

    def _distributed_eval(self, batch):
        per_replica = self.strategy.run(self._replica_eval, args=batch)
        return [self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                for v in per_replica]


def make_optimizer(model: keras.Model, config: RunConfig, choice: DeviceChoice,
                   learning_rate=None) -> keras.optimizers.Optimizer:
    """SGD in PyTorch's form; under mixed_float16 (GPU) wrapped in dynamic loss scaling with
    the same initial scale and growth policy as PyTorch's GradScaler (from the config).
    `learning_rate`: config.lr unless given (a Keras schedule for Keras' own fit)."""
    optimizer = TorchFormSGD(config.lr if learning_rate is None else learning_rate,
                             config.momentum, config.nesterov, config.weight_decay)
    if choice.on_gpu and keras.mixed_precision.global_policy().name == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(
            optimizer, initial_scale=config.loss_scale_initial,
            dynamic_growth_steps=config.loss_scale_growth_interval)
    return optimizer


def describe_environment() -> dict:
    """What TensorFlow sees: versions, devices, CUDA/cuDNN, TF32, precision support."""
    build = tf.sysconfig.get_build_info()
    details = [tf.config.experimental.get_device_details(g)
               for g in tf.config.list_physical_devices("GPU")]
    gpus = [{"name": d.get("device_name"),
             "capability": ".".join(map(str, d.get("compute_capability", ()))) or None}
            for d in details]
    libraries = None
    if not gpus and build.get("is_cuda_build"):  # why not: which CUDA library is missing?
        from compare.machine.doctor import find_library
        cuda, cudnn = str(build.get("cuda_version", "12")), str(build.get("cudnn_version", "9"))
        names = (f"libcudart.so.{cuda.split('.')[0]}", f"libcublas.so.{cuda.split('.')[0]}",
                 f"libcudnn.so.{cudnn.split('.')[0]}")
        libraries = {name: find_library(name) for name in names}
    return {"framework": FRAMEWORK, "tensorflow": tf.__version__, "keras": keras.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "cuda_available": bool(gpus), "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"), "gpus": gpus, "tf32_default": TF32_DEFAULT,
            "gpu_libraries": libraries,
            "mixed_precision": ("mixed_float16 + LossScaleOptimizer" if gpus
                                else "mixed_bfloat16 (CPU)")}


def train(config: RunConfig, dataset: Dataset, resume: bool = False) -> int:
    """Train as `config` says, all replicas in this process under make_strategy's
    strategy (compare.experiment.strategy); an exit code.
    With `resume`, continue from the checkpoint in config.out (compare.run.checkpoint)."""
    check_split(config)
    return worker.train_process(sys.modules[__name__], config, dataset, select_device(config),
                                resume)


def _pci_bus_ids(choice: DeviceChoice) -> list[str]:
    """PCI bus ids of the chosen GPUs, from TensorFlow's device descriptions, so NVML samples
    the right boards even under CUDA_VISIBLE_DEVICES."""
    from tensorflow.python.client import device_lib  # the only place TF states the bus id
    found = {}
    for device in device_lib.list_local_devices():
        if device.device_type == "GPU" and "pci bus id:" in device.physical_device_desc:
            bus = device.physical_device_desc.split("pci bus id:")[1].split(",")[0].strip()
            found[device.name.lower().replace("/device:", "/")] = bus  # "/gpu:0"
    return [found.get(name, "") for name in choice.names]


if __name__ == "__main__":
    worker.run(sys.modules[__name__])
