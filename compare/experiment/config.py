"""One place for every default of a run; variants override a few fields.

A `RunConfig` is frozen: the CLI builds one, writes it to JSON beside the result, and the
framework subprocess reads that JSON back. Both frameworks read the same file, so the
recipe cannot drift between them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

FRAMEWORKS = ("tf", "torch")
FRAMEWORK_NAMES = {"tf": "TensorFlow/Keras", "torch": "PyTorch"}
PRECISIONS = ("auto", "mixed", "fp32")  # compare.precision resolves auto per device
DEVICE_CHOICES = ("auto", "cpu", "gpu")
SCHEDULES = ("constant", "onecycle")
PIPELINES = ("naive", "tuned", "device")
STRATEGIES = ("auto", "none", "mirrored")  # both frameworks' wrapper (compare.strategy)
# Training steps per call of a framework's step function when --steps-per-call is not given
# (see steps_per_call below). Measured on 2 CPU cores (lenet, fp32, 10,000 synthetic images,
# TensorFlow, MirroredStrategy, the second epoch's training time, medians of 3 alternated
# runs): K = 32 trains in 1.37 s where K = 1 takes 1.83 s at batch 32 (5.30 s against
# 7.51 s at batch 4): one tf.function call per step costs about 1 ms of host work here. On
# a GPU, where a lenet step is tens of microseconds of compute, that host work per call
# matters more still. A call of 32 resnet9 steps at batch 512 stays within a timing window
# of about 0.5 s on a GPU (a window holds whole calls). PyTorch's K steps per call run as
# K steps launched from Python (--cuda-graphs replays their forward and backward as graphs),
# so K changes only how often the loop calls it.
DEFAULT_STEPS_PER_CALL = {"cpu": 32, "gpu": 32}


@dataclass(frozen=True)
class PipelineConfig:
    """Input pipeline settings; each stage can be switched off and is recorded.

    `kind` is a preset: `tuned` (the frameworks' recommended settings), `naive` (one
    synchronous stage, no prefetch, no workers) or `device` (the whole training set resident
    on the device, batches gathered and augmented there). The other fields refine it.
    """

    kind: str = "tuned"
    cache: bool = True  # tf.data: cache the normalised test set in memory
    parallel_map: bool = True  # tf.data: map(num_parallel_calls=AUTOTUNE)
    prefetch: bool = True  # tf.data prefetch(AUTOTUNE); DataLoader prefetch_factor
    workers: int | None = None  # DataLoader worker processes; None: from the cores (below)
    prefetch_factor: int = 4  # batches each DataLoader worker keeps ready
    persistent_workers: bool = True  # DataLoader: keep workers alive between epochs
    pin_memory: bool = True  # DataLoader: page-locked host memory (GPU only)
    non_blocking: bool = True  # torch: asynchronous host-to-device copies (GPU only)

    @classmethod
    def preset(cls, kind: str) -> "PipelineConfig":
        if kind == "tuned":
            return cls(kind="tuned")
        if kind == "naive":
            return cls(kind="naive", cache=False, parallel_map=False, prefetch=False,
                       workers=0, prefetch_factor=0, persistent_workers=False,
                       pin_memory=False, non_blocking=False)
        if kind == "device":
            return cls(kind="device", cache=True, parallel_map=False, prefetch=False, workers=0,
                       prefetch_factor=0, persistent_workers=False, pin_memory=False,
                       non_blocking=False)
        raise ValueError(f"unknown pipeline {kind!r}; choose one of {', '.join(PIPELINES)}")


def loader_workers(pipeline: PipelineConfig, processes: int, cores: int | None = None) -> int:
    """DataLoader worker processes for each training process. Unset, they come from the
    cores this process may use: none with 2 or fewer per process (a worker then competes
    with the training threads for a core: the tuned pipeline measured 1.3-2.1x slower than
    an in-memory loop on 2 cores), else half of them, at most 8."""
    if pipeline.workers is not None:
        return pipeline.workers
    if pipeline.kind != "tuned":
        return 0
    cores = cores or len(os.sched_getaffinity(0))
    per_process = cores // max(1, processes)
    return 0 if per_process <= 2 else min(8, per_process // 2)


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one training run. Units in the comments."""

    framework: str = "torch"
    model: str = "lenet"
    dataset: str = "cifar10"
    data_dir: str | None = None  # None: the cache under $CNNCOMPARE_HOME
    synthetic_train_size: int = 10_000  # images (synthetic dataset only)
    synthetic_test_size: int = 2_000  # images (synthetic dataset only)
    validation_fraction: float = 0.1  # folder datasets without test/: held-out share
    epochs: int = 2
    batch_size: int = 32  # global batch, images per optimizer step over all replicas
    lr: float = 0.01  # peak learning rate per step
    schedule: str = "constant"  # constant | onecycle (linear up for warmup_fraction, down to 0)
    warmup_fraction: float = 0.2  # share of all steps spent rising (onecycle only)
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0  # L2 coefficient added to the gradient (PyTorch SGD form)
    label_smoothing: float = 0.0
    bn_momentum: float = 0.1  # PyTorch convention: new = (1 - m) * old + m * batch
    bn_epsilon: float = 1e-5
    augment: bool = True  # random crop with padding + horizontal flip, from the data plan
    crop_padding: int = 4  # pixels of zero padding before the random crop
    # auto | mixed | fp32 (compare.precision): auto is mixed (float16 + loss scaling) on GPUs
    # with tensor cores, mixed (bfloat16) on CPUs that compute it natively, float32 elsewhere
    precision: str = "auto"
    tf32: bool = False  # TensorFloat-32 matmuls/convs; off in both for equal numerics
    # Dynamic loss scaling under float16 (GPU), the same policy in both: start here, double
    # after this many steps without overflow, halve on overflow (PyTorch GradScaler defaults).
    loss_scale_initial: float = 65536.0
    loss_scale_growth_interval: int = 2000  # steps
    # PyTorch's memory format; None: channels_last on GPU (the AMP guide's advice for tensor
    # cores), contiguous on CPU. Keras always computes NHWC.
    channels_last: bool | None = None
    device: str = "auto"  # auto (GPU if present) | cpu | gpu
    devices: int = 1  # replicas: GPUs, or logical CPU devices / gloo processes on CPU
    allow_mixed_devices: bool = False  # compare/sweep: let the frameworks differ in device kind
    # Runs over several processes (TF_CONFIG workers, torchrun, DDP on one machine): how long
    # a collective waits for a peer before the run fails with the peer's name, seconds.
    # Long enough for a cold XLA/cuDNN autotune of resnet9 on one worker, short enough that
    # a dead machine does not hold the others for TensorFlow's and NCCL's default 30 min.
    collective_timeout_s: float = 300.0
    compile: bool = False  # XLA jit_compile (tf) / torch.compile (torch)
    # PyTorch on a GPU: replay the model's forward and backward as CUDA graphs
    # (torch.compile mode "reduce-overhead"), PyTorch's counterpart of TensorFlow's in-graph
    # step batching (steps_per_call). Off by default until measured on a GPU; TensorFlow
    # ignores it.
    cuda_graphs: bool = False
    cudnn_benchmark: bool = True  # cuDNN autotuning (torch; TF autotunes always)
    deterministic: bool = False  # framework determinism flags
    shared_init: bool = True  # load the same numpy-generated initial weights in both
    seed: int = 0
    # Training steps per call of the framework's step function: TF runs them in one
    # tf.function that takes its batches from the iterator inside the graph (what Keras'
    # steps_per_execution does); PyTorch runs them in one trainer call. None: the device's
    # default (steps_per_call below, DEFAULT_STEPS_PER_CALL).
    steps_per_call: int | None = None
    # Both frameworks' distribution wrapper (compare.strategy): auto (none for one replica,
    # MirroredStrategy and DDP for several), none, mirrored (the wrapper also on one
    # replica), or tf=CHOICE,torch=CHOICE to set them apart (a fairness caveat).
    strategy: str = "auto"
    # Synchronised timing windows end on call boundaries and last about timing_window_s
    # seconds (the loop sizes them from the first epoch's calls); timing_window, when set,
    # fixes them at that many steps instead (rounded up to whole calls).
    timing_window_s: float = 0.5  # seconds
    timing_window: int | None = None  # steps
    # Training steps recorded by each framework's profiler after the last epoch (rounded up
    # to whole calls), split into the step's phases (compare.phases); 0: none.
    profile_steps: int = 32
    target_accuracy: float | None = None  # fraction; reports time-to-accuracy when set
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    tensorboard_dir: str | None = None  # TensorBoard root; None: <out>/tensorboard
    out: str = "runs/latest"  # the CLI names it after the command: runs/<command>-...
    quiet: bool = False
    debug: bool = False

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        data = dict(data)
        data["pipeline"] = PipelineConfig(**data.get("pipeline", {}))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class ComparisonConfig:
    """How `compare` runs the two frameworks beside each other."""

    seeds: int = 1  # runs per framework, seeds seed, seed + 1, ...; 2+ give intervals
    parity_steps: int = 3  # SGD steps of the parity probe after the first-batch gradients
    ignore_parity: bool = False  # run even when the parity check fails (the report says so)


# Per-model recipes: only the fields that differ from RunConfig's defaults. `lenet` is
# the seed's recipe (the PyTorch CIFAR-10 tutorial: no augmentation) scaled to batch 32;
# `resnet9` is the DAWNBench-style recipe (crop + flip augmentation).
RECIPES: dict[str, dict[str, Any]] = {
    "lenet": {"augment": False},
    "resnet9": {"batch_size": 512, "lr": 0.2, "schedule": "onecycle", "weight_decay": 5e-4,
                "nesterov": True, "label_smoothing": 0.2, "epochs": 10},
}


def shown_default(field_name: str) -> str:
    """A RunConfig field's default as --help shows it: one value, or one per model recipe
    when the recipes differ (e.g. "lenet 32, resnet9 512")."""
    if field_name == "steps_per_call":  # a default per device, not per model
        if len(set(DEFAULT_STEPS_PER_CALL.values())) == 1:
            return f"[default: {DEFAULT_STEPS_PER_CALL['cpu']} on every device]"
        return ("[default: " + ", ".join(f"{k} on {d.upper()}"
                                          for d, k in DEFAULT_STEPS_PER_CALL.items()) + "]")
    base = getattr(RunConfig(), field_name)
    per_model = {model: recipe.get(field_name, base) for model, recipe in RECIPES.items()}
    if len(set(map(repr, per_model.values()))) == 1:
        return f"[default: {_shown(base)}]"
    return "[default: " + ", ".join(f"{m} {_shown(v)}" for m, v in per_model.items()) + "]"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def steps_per_call(config: RunConfig, on_gpu: bool) -> int:
    """The training steps per call this run uses: --steps-per-call, else the device's
    default (DEFAULT_STEPS_PER_CALL). The one place it is resolved."""
    if config.steps_per_call is not None:
        return config.steps_per_call
    return DEFAULT_STEPS_PER_CALL["gpu" if on_gpu else "cpu"]


def steps_per_call_source(config: RunConfig, on_gpu: bool) -> str:
    """Where steps_per_call came from, for the fairness manifest."""
    if config.steps_per_call is not None:
        return "--steps-per-call"
    return f"the default on {'GPU' if on_gpu else 'CPU'} (compare.config.DEFAULT_STEPS_PER_CALL)"


def recipe_config(model: str, **overrides: Any) -> RunConfig:
    """The defaults for `model`, with the given overrides (None values ignored)."""
    fields = dict(RECIPES.get(model, {}))
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return RunConfig(model=model, **fields)


def learning_rate(config: RunConfig, step: int, total_steps: int) -> float:
    """The learning rate for optimizer step `step` (0-based), the same in both frameworks."""
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "onecycle":
        rise = max(1, math.ceil(config.warmup_fraction * total_steps))
        if step < rise:
            return config.lr * (step + 1) / rise
        fall = max(1, total_steps - rise)
        return config.lr * max(0.0, (total_steps - step) / fall)
    raise ValueError(f"unknown schedule {config.schedule!r}")


def update_rule(config: RunConfig) -> str:
    """The SGD update both frameworks apply (PyTorch's form), with this config's numbers."""
    step = "g + mu*v" if config.nesterov else "v"
    return (f"g = grad + {config.weight_decay}*w; v = mu*v + g (mu={config.momentum}, v0 = 0); "
            f"w -= lr*({step})")
