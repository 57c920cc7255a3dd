"""Where a TensorFlow process trains and in what numerics: its devices (logical CPU devices
or GPUs), the tf.distribute strategy over them, the precision policy, TF32 and determinism,
and what TensorFlow sees of the machine (`cnncompare env`, `doctor`)."""

from __future__ import annotations

import os
import platform

import keras
import tensorflow as tf

from compare.errors import DeviceError
from compare.experiment import precision_rule, strategy
from compare.experiment.config import RunConfig
from compare.machine import cluster, devices
from compare.run.interface import DeviceChoice, Numerics
from compare.schema import FrameworkEnvironment, FrameworkGpu

FRAMEWORK = "tf"

TF32_DEFAULT = tf.config.experimental.tensor_float_32_execution_enabled()  # before we set it


def select_device(config: RunConfig) -> DeviceChoice:
    """Chosen once, from --device and --devices; the GPU when present under `auto`.

    Must run before TensorFlow initialises its devices: on a CPU-only machine it splits
    the CPU into --devices logical devices so MirroredStrategy runs the multi-replica path.
    Under a TF_CONFIG of several workers (compare.machine.cluster) each worker trains --devices
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
        if config.devices > len(gpus) and not config.share_device:
            raise DeviceError(f"--devices {config.devices}: TensorFlow sees only "
                              f"{len(gpus)} GPU(s) (--share-device carves them from one)")
        used = gpus[:1] if config.share_device else gpus[: config.devices]
        tf.config.set_visible_devices(used, "GPU")
        if config.share_device:
            _carve(used[0], config.devices)
        else:
            for gpu in used:  # grow on demand, so other processes' memory figures stay honest
                tf.config.experimental.set_memory_growth(gpu, True)
        details = tf.config.experimental.get_device_details(used[0])
        name = details.get("device_name", used[0].name)
        names = tuple(f"/gpu:{i}" for i in range(config.devices))
        capability = details.get("compute_capability")
        return DeviceChoice("gpu", names, name, devices.description(
            name, len(names), config.device, "", workers, config.share_device),
            launched.rank, launched.processes, tuple(capability) if capability else None,
            shared_chip=config.share_device)
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
        launched.rank, launched.processes, shared_chip=replicas * launched.processes > 1)


def _carve(gpu, count: int) -> None:
    """Split one GPU into `count` logical GPUs, each an equal share of 90% of its memory
    (TensorFlow needs a limit per logical GPU; the rest is CUDA's own and the other
    framework's headroom)."""
    from compare.machine import gpu_metrics
    try:
        total = gpu_metrics.board_memory_bytes(0)
    except RuntimeError as exc:
        raise DeviceError(f"--share-device: cannot size the logical GPUs: {exc}") from None
    share_mb = int(total * 0.9 / count / 2**20)
    try:
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=share_mb)] * count)
    except RuntimeError:  # TensorFlow already initialised in this process (tests): use it
        if len(tf.config.list_logical_devices("GPU")) < count:
            raise DeviceError(f"--share-device: TensorFlow was initialised with fewer than "
                              f"{count} logical GPUs") from None


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


def configure_numerics(config: RunConfig, choice: DeviceChoice) -> Numerics:
    """Precision policy (compare.experiment.precision_rule), TF32 and determinism; returns
    what was set."""
    tf.config.experimental.enable_tensor_float_32_execution(config.tf32)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    # as the command resolved it before this process started, for the device it uses
    resolved = precision_rule.carried(config, choice.kind)
    if resolved.precision == "mixed":
        policy = f"mixed_{resolved.compute_type}"  # mixed_float16 or mixed_bfloat16
    else:
        policy = resolved.compute_type  # float32, or the parity probe's float64
    keras.mixed_precision.set_global_policy(policy)
    # The optimizer's learning rate and the inputs follow floatx: float32 there would round
    # the probe's learning rate and images before they reach float64 variables
    keras.config.set_floatx("float64" if policy == "float64" else "float32")
    # the weights', logits' and loss's dtype: float32, or float64 in the parity probe
    weights_dtype = keras.mixed_precision.global_policy().variable_dtype
    return {"policy": policy, "loss_scaling": policy == "mixed_float16", "resolved": resolved,
            "dtype": weights_dtype}


def float64_missing(spec) -> str | None:
    """The first layer of `spec` (a specs.ModelSpec) TensorFlow cannot compute in float64 on
    the CPU, each built alone and run forward and backward on two random inputs, as
    "NAME (KIND): TensorFlow's line"; None when every layer runs."""
    import numpy as np

    from compare.experiment import parity
    from tf_impl.model import KERAS_LAYERS

    def run_alone(layer, shape):
        shape = (*shape[1:], shape[0]) if len(shape) == 3 else shape  # CHW -> HWC
        with tf.device("/cpu:0"):
            inputs = keras.Input(shape, dtype="float64")
            alone = keras.Model(inputs, KERAS_LAYERS[type(layer)](
                layer, inputs, {"momentum": 0.1, "epsilon": 1e-5}))
            x = tf.constant(np.random.default_rng(0).standard_normal((2, *shape)))
            with tf.GradientTape() as tape:
                tape.watch(x)
                total = tf.reduce_sum(alone(x, training=True))
            tape.gradient(total, [x, *alone.trainable_variables])
    before = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float64")
    try:
        return parity.first_float64_failure(spec, run_alone)
    finally:
        keras.mixed_precision.set_global_policy(before)


def describe_environment() -> FrameworkEnvironment:
    """What TensorFlow sees: versions, devices, CUDA/cuDNN, TF32, precision support."""
    build = tf.sysconfig.get_build_info()
    details = [tf.config.experimental.get_device_details(g)
               for g in tf.config.list_physical_devices("GPU")]
    gpus: list[FrameworkGpu] = [
        {"name": d.get("device_name"),
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
            # set: the GPUs this process may see (none when it names none that exists)
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "mixed_precision": ("mixed_float16 + LossScaleOptimizer" if gpus
                                else "mixed_bfloat16 (CPU)")}


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


def peer_failures(choice: DeviceChoice, exc: BaseException) -> dict[int, str] | None:
    """After a failure under MultiWorkerMirroredStrategy: the workers TensorFlow's error
    names (its health check says which task it found down), as ranks; None when it
    names none or on one worker."""
    if choice.processes == 1 or not choice.is_chief:
        return None
    lines = str(exc).splitlines()
    failures = {}
    for rank in cluster.tf_tasks_named(str(exc)):
        at = next((i for i, line in enumerate(lines) if rank in cluster.tf_tasks_named(line)),
                  0)
        said = lines[at].strip()
        if said.startswith("/job:") and at > 0:  # a bare task name: the line before says why
            said = f"{lines[at - 1].strip()} {said}"
        if rank != choice.rank:
            failures[rank] = f"named by TensorFlow: {said[:300]}"
    return failures or None
