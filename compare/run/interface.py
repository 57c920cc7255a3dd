"""What a framework package provides, written down once.

`tf_impl` and `torch_impl` implement these protocols; `compare.run.loop`,
`compare.experiment.parity` and `compare.run.worker` use nothing else of them. They are
also the checklist for a third framework: a package with a `train` module that satisfies
`FrameworkModule`, whose `Trainer` satisfies `ProbeTrainer`: the small protocols Training,
Checkpointing, Profiling, Collectives and Probing together.

Words used throughout: a *replica* is one model copy kept in sync with the others (the
global batch is split over the replicas); `--devices N` asks for N replicas. A *process*
is an operating-system process: TensorFlow runs all its replicas in one process
(MirroredStrategy), PyTorch one replica per process (DDP); `rank` numbers the processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterator, NotRequired, Protocol, TypedDict

from compare.experiment.config import RunConfig
from compare.experiment.precision_rule import Resolved
from compare.schema import FrameworkEnvironment

if TYPE_CHECKING:  # annotations only
    import numpy as np

    from compare.experiment import specs
    from compare.experiment.datasets import Dataset
    from compare.run import phases


class Numerics(TypedDict):
    """What a framework's configure_numerics set, named alike in both."""

    resolved: Resolved  # the run's precision, the one its config carries for this device
    policy: str  # the framework's precision policy, in its words
    loss_scaling: bool
    dtype: Any  # the weights' dtype, as the framework names it
    autocast_dtype: NotRequired[Any]  # PyTorch: autocast's dtype (None: no autocast)

@dataclass(frozen=True)
class DeviceChoice:
    """Where this process trains: chosen once by the framework's select_device, passed down."""

    kind: str  # "gpu" or "cpu"
    # The framework's device name of each replica this process trains: all of TensorFlow's
    # (MirroredStrategy keeps every local replica in one process), PyTorch's one (DDP runs a
    # process per replica). Other processes' devices are not listed.
    names: tuple[str, ...]
    name: str | None  # the accelerator's product name, e.g. "NVIDIA H100 80GB HBM3"; None on CPU
    description: str  # what the user is told, e.g. "GPU: NVIDIA H100 80GB HBM3"
    rank: int = 0  # this process's index among the processes of the run
    processes: int = 1  # processes that train together (DDP ranks; 1 for MirroredStrategy)
    capability: tuple[int, int] | None = None  # the GPU's CUDA compute capability; None on CPU
    # The run's devices are carved from one chip (logical GPUs or processes sharing one GPU
    # under --share-device; a CPU's logical devices or processes): one board's time, memory
    # and energy, not a multi-device speed-up.
    shared_chip: bool = False

    @property
    def on_gpu(self) -> bool:
        return self.kind == "gpu"

    @property
    def is_chief(self) -> bool:
        """The process that writes files and shows progress."""
        return self.rank == 0


class ScalarWriter(Protocol):
    """TensorBoard events through the framework's own summary writer."""

    def scalars(self, tag: str, values: list[float], steps: list[int]) -> None:
        """A series: value i at step steps[i]."""

    def flush(self) -> None: ...
    def close(self) -> None: ...


class Training(Protocol):
    """One framework's model, optimizer and pipelines, as compare.run.loop drives them."""

    framework: str  # "tf" or "torch"
    choice: DeviceChoice
    spec: "specs.ModelSpec"
    replicas: int  # model copies over all processes
    steps_per_epoch: int
    steps_per_call: int  # training steps per train_steps call (config.steps_per_call)
    gpu_indices: list[int] | None  # NVML indices of this run's GPUs; None on CPU
    numerics: Numerics

    def __init__(self, config: RunConfig, dataset: Dataset, choice: DeviceChoice) -> None: ...
    def batches(self, epoch: int) -> Iterator[Any]: ...  # epoch is 0-based
    # The loop's call: len(lrs) steps (lrs: each step's learning rate) on the next len(lrs)
    # batches of `batches`, as the framework batches steps (TF: one tf.function that reads
    # the iterator in the graph). Returns a handle of the steps' losses, not synchronised.
    def train_steps(self, batches: Iterator[Any], lrs: list[float]) -> Any: ...
    # The global-batch losses of every step of these train_steps handles, in one transfer,
    # and the seconds those steps waited for their batches (timed where the framework
    # takes them: around next() in PyTorch, around the iterator's get_next in TF's graph).
    def read_steps(self, pending: list[Any]) -> tuple[list[float], float]: ...
    # One step on a batch the caller holds (the parity probe, the doctor), and its losses.
    def train_step(self, batch: Any, lr: float) -> Any: ...  # the loss, not yet synchronised
    def losses(self, pending: list[Any]) -> list[float]: ...  # global-batch losses, one transfer
    def sync(self) -> None: ...  # wait for all queued device work
    def epoch_device_time(self) -> float | None: ...  # seconds from device events, if any
    def evaluate(self) -> tuple[float, float]: ...  # (test loss, test accuracy)
    def peak_memory(self) -> tuple[int | None, str | None]: ...  # (bytes, how / why None)
    def reset_peak_memory(self) -> None: ...  # the next peak_memory counts from now
    def is_out_of_memory(self, exc: BaseException) -> bool: ...
    def manifest(self) -> dict[str, Any]: ...  # this framework's half of the fairness manifest
    # What compiled of the training step (XLA, torch.compile), read from the compiler itself,
    # not from the config: {"compiler", "compiled", and the compiler's own counts}.
    def compilation(self) -> dict[str, Any]: ...
    def loss_scale(self) -> float | None: ...  # the dynamic loss scale now; None unscaled
    def scalar_writer(self, directory: Path) -> ScalarWriter: ...
    def close(self) -> None: ...


class Checkpointing(Protocol):
    """What `--resume` and `--save-model` need (compare.run.checkpoint)."""

    def save_model(self, directory: Path) -> str: ...  # the file name written
    # Everything a resumed run needs that the data plan does not give: weights, BatchNorm
    # statistics, optimizer state (momentum buffers) and the loss scale; files in `directory`.
    def save_checkpoint(self, directory: Path) -> str: ...  # the file (prefix) written
    def load_checkpoint(self, directory: Path) -> None: ...  # what save_checkpoint wrote


class Profiling(Protocol):
    """The phase profile after the timed epochs (compare.run.phases)."""

    def start_profile(self, directory: Path) -> None: ...  # the framework's own profiler
    # The trace written and the recorded steps' phases read from it (compare.run.phases).
    def stop_profile(self) -> "phases.Capture": ...


class Collectives(Protocol):
    """What the processes of a multi-process run tell each other."""

    # Every process's `figures`, one row per process in rank order: a collective that all
    # processes of a multi-process run call together (compare.run.loop.per_process).
    def gather_figures(self, figures: list[float]) -> list[list[float]]: ...
    # After `exc` ended a multi-process run: on the chief, what each other rank said of its
    # end ({rank: reason}), None elsewhere or for a single process.
    def peer_failures(self, exc: BaseException) -> dict[int, str] | None: ...


class Probing(Protocol):
    """The parity probe's access to weights and gradients (compare.run.parity_probe.write_probe)."""

    initial: dict[str, np.ndarray] | None  # the shared initial weights, canonical layout
    spec: Any  # the specs.ModelSpec built
    # BatchNorm's running variance averages the unbiased batch variance (PyTorch), not the
    # biased one (Keras): compare.experiment.parity maps one to the other exactly
    unbiased_running_variance: bool

    def gradients(self, batch: Any) -> tuple[np.ndarray, float, dict[str, np.ndarray]]: ...
    # The state a new trainer starts from: the initial weights and BatchNorm statistics, the
    # optimizer and loss scaler as new
    def reset(self) -> None: ...
    def weights(self) -> dict[str, np.ndarray]: ...


class Trainer(Training, Checkpointing, Profiling, Collectives, Protocol):
    """Everything compare.run.loop uses of a framework's trainer."""


class ProbeTrainer(Trainer, Probing, Protocol):
    """A trainer the parity probe can drive: each framework's Trainer is one."""


TRAINER_PROTOCOLS = (Training, Checkpointing, Profiling, Collectives, Probing)


class FrameworkModule(Protocol):
    """The module `python -m <package>.train` runs (see compare.run.worker.main)."""

    FRAMEWORK: str
    Trainer: type

    def select_device(self, config: RunConfig) -> DeviceChoice: ...
    def describe_environment(self) -> FrameworkEnvironment: ...
    def describe_model(self, spec: Any) -> dict[str, Any]: ...  # a specs.ModelSpec
    # The first layer of the spec the framework cannot compute in float64 on the CPU, as
    # "NAME (KIND): the framework's line"; None when every layer can (the parity probe's).
    def float64_missing(self, spec: Any) -> str | None: ...
    def train(self, config: RunConfig, dataset: Dataset, resume: bool = False) -> int: ...
    @property
    def own_loop(self) -> "OwnLoopModule": ...  # the framework's own loop (compare.run.own_loop)


class OwnLoopModule(Protocol):
    """`<package>.own_loop`: the framework's own idiomatic loop (compare.run.own_loop)."""

    LOOP: str  # the loop in words

    # Train config.epochs epochs of `trainer`'s model with the framework's own loop, as far
    # as the caller asks, the per-step learning rates `lrs`, telling `clock`
    # (compare.run.own_loop.WindowClock) where each epoch begins and ends and as steps are
    # issued; yields None after each timing window (what the caller does before asking for
    # more is in no clock: WindowClock.away) and each epoch's training seconds at its end,
    # and fills `mean_losses` over the first epoch (fields of compare.records.OwnLoopRecord).
    def own_loop(self, trainer: Any, config: RunConfig, dataset: Dataset, lrs: list[float],
                 clock: Any, mean_losses: list[list[float]]) -> Iterator[float | None]: ...


class PortModule(Protocol):
    """`<package>.port`: reading a network of this framework into the spec, and the proof's
    outputs (compare.run.port_worker, compare.experiment.porting)."""

    FRAMEWORK: str
    SOURCE_KIND: str  # what `cnncompare port` takes, in words

    # Keep the framework off the GPUs: the proof computes on the CPU. Called where the
    # port's process starts, never on import.
    def hide_gpus(self) -> None: ...
    # The source network `reference` names, built with `kwargs` (porting.Refused if not).
    def load(self, reference: str, kwargs: dict) -> Any: ...
    # The source as a porting.Reading: spec named `name`, canonical weights, what it counts.
    def read(self, model: Any, input_shape: tuple[int, int, int] | None,
             name: str) -> Any: ...
    # Logits (eval mode), then one training step's loss and gradients (train mode) keyed
    # as the framework names its weights, float64 on the CPU; and the source's, as
    # {"logits", "loss", "grad/<weight>"} with the gradients in the canonical layout.
    def outputs(self, model: Any, images: Any, labels: Any) -> tuple[Any, float, dict]: ...
    def source_outputs(self, model: Any, reading: Any, images: Any, labels: Any) -> dict: ...
    # The twin built from the spec as the proof computes it (float64).
    def build_twin(self, spec: Any) -> Any: ...
    # The twin's side: <package>.model (build_model, load_weights, export_gradients,
    # count_parameters).
    framework_model: ModuleType


def check_module(module: ModuleType) -> list[str]:
    """The FrameworkModule and Trainer members `module` lacks (empty when it is complete)."""
    names = ("FRAMEWORK", "Trainer", "select_device", "describe_environment", "describe_model",
             "train")
    missing = [f"{module.__name__}.{name}" for name in names if not hasattr(module, name)]
    trainer = getattr(module, "Trainer", None)
    for protocol in TRAINER_PROTOCOLS:
        for name in _methods(protocol):
            if trainer is not None and not callable(getattr(trainer, name, None)):
                missing.append(f"{module.__name__}.Trainer.{name}")
    return sorted(set(missing))


def _methods(protocol: type) -> list[str]:
    return [name for name, value in vars(protocol).items()
            if callable(value) and not name.startswith("_")]
