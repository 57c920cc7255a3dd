"""TensorFlow/Keras trainer: tf.data, MirroredStrategy, mixed precision; the loop and clock are compare.loop's.

Run by the CLI as `python -m tf_impl.train CONFIG.json`.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from compare import worker

worker.quiet_framework_logs()  # before TensorFlow is imported

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from compare import init, loop, parity, specs  # noqa: E402
from compare.config import RunConfig, update_rule  # noqa: E402
from compare.data import Dataset  # noqa: E402
from compare.errors import DeviceError  # noqa: E402
from compare.loop import DeviceChoice  # noqa: E402
from tf_impl import data as tf_data  # noqa: E402
from tf_impl.model import build_model, export_gradients, export_weights, load_weights  # noqa: E402

FRAMEWORK = "tf"
TF32_DEFAULT = tf.config.experimental.tensor_float_32_execution_enabled()  # before we change it




def select_device(config: RunConfig) -> DeviceChoice:
    """Chosen once, from --device and --devices; GPU when present under `auto`.

    Must run before TensorFlow initialises its devices: on a CPU-only machine it splits
    the CPU into --devices logical devices so MirroredStrategy runs the multi-replica path.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if config.device == "gpu" and not gpus:
        raise DeviceError("--device gpu: TensorFlow sees no GPU (is tensorflow[and-cuda] installed? "
                          "pip install -e '.[gpu]'); use --device cpu or auto")
    if config.device != "cpu" and gpus:
        if config.devices > len(gpus):
            raise DeviceError(f"--devices {config.devices}: TensorFlow sees only {len(gpus)} GPU(s)")
        used = gpus[: config.devices]
        tf.config.set_visible_devices(used, "GPU")
        for gpu in used:  # grow on demand, so other processes' memory figures stay honest
            tf.config.experimental.set_memory_growth(gpu, True)
        names = tuple(f"/gpu:{i}" for i in range(config.devices))
        label = ", ".join(tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in used)
        return DeviceChoice("gpu", names, f"GPU: {label}")
    try:
        tf.config.set_visible_devices([], "GPU")
        if config.devices > 1:
            tf.config.set_logical_device_configuration(
                tf.config.list_physical_devices("CPU")[0],
                [tf.config.LogicalDeviceConfiguration() for _ in range(config.devices)])
    except RuntimeError:  # TensorFlow already initialised in this process (tests): use what exists
        available = len(tf.config.list_logical_devices("CPU"))
        if available < config.devices:
            raise DeviceError(f"--devices {config.devices}: TensorFlow was initialised with "
                              f"{available} logical CPU device(s)") from None
    names = tuple(f"/cpu:{i}" for i in range(config.devices))
    why = "no GPU found" if config.device == "auto" else "--device cpu"
    return DeviceChoice("cpu", names, f"CPU ({why}), {config.devices} logical device(s)")


def configure_numerics(config: RunConfig, choice: DeviceChoice) -> dict:
    """Precision policy, TF32 and determinism; returns what was set."""
    tf.config.experimental.enable_tensor_float_32_execution(config.tf32)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    if config.precision == "mixed":
        policy = "mixed_float16" if choice.kind == "gpu" else "mixed_bfloat16"
    else:
        policy = "float32"
    keras.mixed_precision.set_global_policy(policy)
    return {"policy": policy}


class TorchFormSGD(keras.optimizers.Optimizer):
    """SGD in PyTorch's form, so both frameworks apply the same update:
    g += wd * p; v = mu * v + g; p -= lr * (g + mu * v if nesterov else v).
    (keras.optimizers.SGD keeps v in units of lr * g, which differs once lr changes.)"""

    def __init__(self, learning_rate, momentum=0.9, nesterov=False, l2=0.0, name="torch_form_sgd", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum, self.nesterov, self.l2 = momentum, nesterov, l2

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum") if self.momentum else []

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
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov, "l2": self.l2}


class KerasTrainer:
    """The model, optimizer and pipelines, replicated by MirroredStrategy."""

    framework = FRAMEWORK

    def __init__(self, config: RunConfig, dataset: Dataset, choice: DeviceChoice,
                 rank: int = 0, world_size: int = 1):
        self.config, self.choice = config, choice
        self.is_chief = True
        self.on_gpu = choice.kind == "gpu"
        self.numerics = configure_numerics(config, choice)
        keras.utils.set_random_seed(config.seed)
        self.strategy = tf.distribute.MirroredStrategy(list(choice.names))
        self.replicas = self.strategy.num_replicas_in_sync
        self.spec = specs.get_spec(config.model, len(dataset.classes))
        self.initial = init.initial_weights(self.spec, config.seed) if config.shared_init else None
        with self.strategy.scope():  # build and compile inside the scope (Keras guide)
            self.model = build_model(self.spec, config.bn_momentum, config.bn_epsilon)
            if self.initial is not None:
                load_weights(self.model, self.initial, self.spec)
            self.optimizer = make_optimizer(self.model, config)
            self.optimizer.build(self.model.trainable_variables)
            self.device_source = (tf_data.PlanImages(dataset.train_x, dataset.train_y, dataset.mean,
                                                     dataset.std, config.crop_padding, config.augment, device=True)
                                  if config.pipeline.kind == "device" else None)
        self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        mean, std = dataset.mean, dataset.std
        self.train_source = tf_data.PlanImages(dataset.train_x, dataset.train_y, mean, std, config.crop_padding,
                                               config.augment)
        self.test_source = tf_data.PlanImages(dataset.test_x, dataset.test_y, mean, std, config.crop_padding,
                                              augment=False)
        self.train_size = len(dataset.train_y)
        self.test_set = self.strategy.experimental_distribute_dataset(
            tf_data.test_pipeline(self.test_source, len(dataset.test_y), config))
        self.steps_per_epoch = self.train_size // config.batch_size
        self.gpu_indices = list(range(len(choice.names))) if self.on_gpu else None
        self.device_name = choice.description.split(": ", 1)[1].split(", ")[0] if self.on_gpu else None
        # XLA compiles the forward/backward; the update and all-reduce stay outside it.
        self._gradients = tf.function(self._forward_backward, jit_compile=config.compile)
        self._train_step = tf.function(self._distributed_step)
        self._eval_step = tf.function(self._distributed_eval)

    def _loss(self, labels, logits, smoothing: float):
        """Per-example cross-entropy with label smoothing, as torch's F.cross_entropy."""
        classes = self.spec.num_classes
        targets = tf.one_hot(labels, classes) * (1.0 - smoothing) + smoothing / classes
        return tf.nn.softmax_cross_entropy_with_logits(targets, tf.cast(logits, tf.float32))

    def _forward_backward(self, images, labels):
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            per_example = self._loss(labels, logits, self.config.label_smoothing)
            # Scaled by the global batch: the all-reduce SUM then gives the global mean.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.config.batch_size)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        return loss, grads

    def _replica_step(self, *batch):
        # (images, labels), or for the device pipeline the plan's keys for this replica's slice
        images, labels = self.device_source.load_batch(*batch) if self.device_source else batch
        loss, grads = self._gradients(images, labels)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def _distributed_step(self, batch, lr):
        self.optimizer.learning_rate.assign(lr)
        per_replica = self.strategy.run(self._replica_step, args=batch)
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def _replica_eval(self, images, labels):
        logits = self.model(images, training=False)
        loss = tf.reduce_sum(self._loss(labels, logits, 0.0))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1), labels), tf.int64))
        return loss, correct, tf.size(labels, out_type=tf.int64)

    def _distributed_eval(self, batch):
        per_replica = self.strategy.run(self._replica_eval, args=batch)
        return [self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in per_replica]

    def batches(self, epoch: int):
        dataset = tf_data.train_pipeline(self.train_source, self.train_size, self.config, epoch)
        return iter(self.strategy.experimental_distribute_dataset(dataset))

    def train_step(self, batch, lr: float):
        return self._train_step(batch, tf.constant(lr, tf.float32))

    def losses(self, pending) -> list[float]:
        return [float(v) for v in pending]

    def sync(self) -> None:
        tf.test.experimental.sync_devices()

    def epoch_device_time(self) -> float | None:
        return None  # TF has no CUDA events; its epoch clock is the synchronised wall clock

    def evaluate(self) -> tuple[float, float]:
        total_loss = correct = count = 0.0
        for batch in self.test_set:
            loss, right, n = self._eval_step(batch)
            total_loss, correct, count = total_loss + float(loss), correct + int(right), count + int(n)
        return total_loss / count, correct / count

    def peak_memory(self) -> tuple[int | None, str | None]:
        if self.on_gpu:
            info = tf.config.experimental.get_memory_info(self.choice.names[0].strip("/").upper())
            return int(info["peak"]), "tf.config.experimental.get_memory_info peak, replica 0"
        return None, "CPU run: no device allocator to read (host peak RSS is in the summary)"

    def save_model(self, directory: Path) -> str:
        target = Path(directory) / "model.keras"
        temporary = target.with_name(f".model.{os.getpid()}.tmp.keras")
        self.model.save(temporary)  # Keras insists on the .keras suffix
        os.replace(temporary, target)
        return target.name

    def is_out_of_memory(self, exc: BaseException) -> bool:
        return isinstance(exc, tf.errors.ResourceExhaustedError)

    def close(self) -> None:
        self.test_set = None

    # ---- parity probe

    def gradients(self, batch) -> tuple[np.ndarray, float, dict[str, np.ndarray]]:
        """Logits, loss and canonical-layout gradients for one batch, no update."""
        images, labels = self.device_source.load_batch(*batch) if self.device_source else batch
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = tf.reduce_mean(self._loss(labels, logits, self.config.label_smoothing))
        grads = tape.gradient(loss, self.model.trainable_variables)
        by_path = {v.path: g.numpy() for v, g in zip(self.model.trainable_variables, grads)}
        return logits.numpy(), float(loss), export_gradients(by_path, self.model, self.spec)

    def reset_weights(self) -> None:
        load_weights(self.model, self.initial, self.spec)

    def weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model, self.spec)


def make_optimizer(model: keras.Model, config: RunConfig) -> keras.optimizers.Optimizer:
    """SGD in PyTorch's form; wrapped in dynamic loss scaling under mixed_float16."""
    optimizer = TorchFormSGD(config.lr, config.momentum, config.nesterov, config.weight_decay)
    if keras.mixed_precision.global_policy().name == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def fairness_manifest(config: RunConfig, trainer: KerasTrainer) -> dict:
    """Every setting DESIGN.md lists, as this framework ran it."""
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    return {
        "precision_policy": trainer.numerics["policy"],
        "tf32": {"matmul": tf32, "cudnn": tf32},
        "cudnn_autotune": trainer.on_gpu,  # TF autotunes cuDNN convolutions by default
        "deterministic": config.deterministic,
        "loss_scaling": "dynamic (keras.optimizers.LossScaleOptimizer)" if trainer.loss_scaling else None,
        "bn_momentum": {"torch_convention": config.bn_momentum, "as_set": 1.0 - config.bn_momentum},
        "bn_epsilon": config.bn_epsilon,
        "bn_running_variance": "biased batch variance (Keras)",
        "bn_statistics": "per replica" if trainer.replicas > 1 else "single replica",
        "update_rule": update_rule(config),
        "optimizer_implementation": "TorchFormSGD (a keras.optimizers.Optimizer, tf_impl/train.py)",
        "weight_decay_form": f"L2 {config.weight_decay} added to the gradient before momentum",
        "loss": f"mean cross-entropy, label smoothing {config.label_smoothing}",
        "lr_schedule": f"{config.schedule}, peak {config.lr}, set every step",
        "global_batch": config.batch_size, "per_replica_batch": config.per_replica_batch,
        "replicas": trainer.replicas,
        "distribution": f"MirroredStrategy over {', '.join(trainer.choice.names)}",
        "compile": "XLA jit_compile (forward+backward)" if config.compile else "off",
        "channels_last": True,  # Keras convolutions run NHWC
        "pipeline": tf_data.pipeline_settings(config, trainer.on_gpu),
        "init_source": f"compare.init numpy weights, seed {config.seed}" if config.shared_init
        else "Keras default initialisers",
        "data_plan_seed": config.seed,
        "device_kind": trainer.choice.kind,
        "device": trainer.choice.description,
    }


def describe_environment() -> dict:
    """What TensorFlow sees: versions, devices, CUDA/cuDNN, TF32, precision support."""
    build = tf.sysconfig.get_build_info()
    gpus = [{"name": tf.config.experimental.get_device_details(g).get("device_name", g.name),
             "capability": ".".join(map(str, tf.config.experimental.get_device_details(g).get(
                 "compute_capability", ()))) or None}
            for g in tf.config.list_physical_devices("GPU")]
    return {"framework": FRAMEWORK, "tensorflow": tf.__version__, "keras": keras.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "cuda_available": bool(gpus), "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"), "gpus": gpus,
            "tf32_default": TF32_DEFAULT,
            "mixed_precision": "mixed_float16 + LossScaleOptimizer" if gpus else "mixed_bfloat16 (CPU)"}


def parity_probe(config: RunConfig, dataset: Dataset, path: Path, steps: int = 3) -> None:
    """This framework's side of the parity check (compare.parity.write_probe)."""
    config = parity.probe_config(config)
    parity.write_probe(KerasTrainer(config, dataset, select_device(config)), config, path, steps)


def _train_replica(config: RunConfig, dataset: Dataset, choice: DeviceChoice, rank: int,
                   world_size: int) -> int:
    trainer = KerasTrainer(config, dataset, choice, rank, world_size)
    environment = {**describe_environment(), "device_used": choice.description}
    return loop.train_and_record(trainer, config, trainer.spec, environment,
                                 fairness_manifest(config, trainer), dataset.info())


def train(config: RunConfig, dataset: Dataset) -> int:
    """Train as `config` says; several replicas run under one MirroredStrategy. Returns an exit code."""
    choice = select_device(config)
    loop.check_split(config)
    if not config.quiet:
        print(f"tf: training on {choice.description}", flush=True)
    return _train_replica(config, dataset, choice, 0, 1)


if __name__ == "__main__":
    sys.exit(worker.main(sys.modules[__name__]))
