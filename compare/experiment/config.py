"""One place for every default and setting of a run; variants override a few fields.

A `RunConfig` is frozen: the CLI builds one, writes it to JSON beside the result, and the
framework subprocess reads that JSON back. Both frameworks read the same file, so the
recipe cannot drift between them. A field that the user sets declares its option in its
metadata (compare.experiment.checks.option): flag, help, check and whether `sweep` can vary
it; compare.experiment.settings derives the command line, the checks, `--vary` and the docs'
options table from these declarations.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from compare.experiment import networks, strategy
from compare.experiment.checks import (
    choice,
    count,
    flag,
    model_check,
    number,
    option,
    optional,
    path,
    strategy_check,
)
from compare.experiment.frameworks import FRAMEWORK_NAMES, FRAMEWORKS  # noqa: F401 - re-exported
from compare.experiment.precision_rule import CHOICES as PRECISIONS  # auto is resolved there
from compare.experiment.precision_rule import ResolvedRecord

DEVICE_CHOICES = ("auto", "cpu", "gpu")
SCHEDULES = ("constant", "onecycle")
PIPELINES = ("naive", "tuned", "device")
PARALLEL = ("data", "model")  # --parallel: replicas, or the network cut into stages
COMPILE_CACHES = ("cold", "warm")  # --compile-cache (compare.run.compile_cache)
DATASETS = ("cifar10", "tfds", "torchvision", "folder", "synthetic")
# Generated training images (--dataset synthetic): a smoke test's worth, few enough that the
# README's first command, eight runs of two epochs on them, ends in about a minute
SYNTHETIC_TRAIN_SIZE = 5_000  # images
SYNTHETIC_TEST_DIVISOR = 5  # test images, unless given: the training images / 5
# Training steps per call of a framework's step function when --steps-per-call is not given
# (steps_per_call below): one call per step costs host work that, on a GPU where a LeNet step
# is tens of microseconds of compute, would become the figure (docs/benchmarks.md, what the
# tool costs per step). A call of 32 resnet9 steps at batch 512 stays within a timing window
# of about 0.5 s on a GPU (estimated from its FLOPs; a window holds whole calls).
DEFAULT_STEPS_PER_CALL = {"cpu": 32, "gpu": 32}


@dataclass(frozen=True)
class PipelineConfig:
    """Input pipeline settings; each stage can be switched off and is recorded.

    `kind` is a preset: `tuned` (the frameworks' recommended settings), `naive` (one
    synchronous stage, no prefetch, no workers) or `device` (the whole training set resident
    on the device, batches gathered and augmented there). The other fields refine it.
    """

    kind: str = field(default="tuned", metadata=option(
        "--pipeline", "Input pipeline preset: tuned (parallel map, prefetch, workers), naive "
        "(one synchronous stage) or device (the whole training set resident on the device).",
        choice(PIPELINES), vary=True))
    cache: bool = True  # tf.data: cache the normalised test set in memory
    parallel_map: bool = True  # tf.data: map(num_parallel_calls=AUTOTUNE)
    prefetch: bool = True  # tf.data prefetch(AUTOTUNE); DataLoader prefetch_factor
    # DataLoader worker processes; None: from the cores (loader_workers below)
    workers: int | None = field(default=None, metadata=option(
        "--workers", "DataLoader worker processes (PyTorch).", optional(count(0)), vary=True,
        shown_default="tuned: none with 2 or fewer cores per process, else half the cores, "
                      "at most 8"))
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
    with the training threads for a core; docs/benchmarks.md, `tuned` against `naive`), else
    half of them, at most 8."""
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
    model: str = field(default="lenet", metadata=option(
        "--model", f"Network: one of {', '.join(networks.MODELS)} (built in, each with its "
        "recipe; `cnncompare models` describes them), or your own: a Python file building a "
        "spec from the spec's layer kinds (FILE.py, its `spec`, or FILE.py:NAME) or "
        "package.module:NAME.", model_check(),
        vary=True, metavar="NAME|FILE.py[:NAME]|MODULE:NAME"))
    dataset: str = field(default="cifar10", metadata=option(
        "--dataset", "Data source: the official CIFAR-10 archive, tfds, torchvision, an image "
        "folder, or generated synthetic images.", choice(DATASETS)))
    data_dir: str | None = field(default=None, metadata=option(  # None: the cache
        "--data-dir", "cifar10: the tar.gz or extracted cifar-10-batches-py/; folder: the root "
        "with train/<class>/; tfds/torchvision: their data root.", optional(
            path()), path=True, shown_default="the cache under $CNNCOMPARE_HOME"))
    synthetic_train_size: int = field(default=SYNTHETIC_TRAIN_SIZE, metadata=option(  # images
        "--synthetic-size", "Synthetic training images (test set: a fifth).", count()))
    synthetic_test_size: int | None = None  # images; None: a fifth of the training images
    validation_fraction: float = field(default=0.1, metadata=option(  # held-out share
        "--validation-fraction", "Folder datasets without test/: the share of train/ held "
        "out as the test set.", number(0, 1, low_open=True, high_open=True)))
    epochs: int = field(default=2, metadata=option(
        "--epochs", "Passes over the training set.", count(), vary=True))
    batch_size: int = field(default=32, metadata=option(  # images per step, all replicas
        "--batch-size", "Global batch: images per optimizer step over all replicas.", count(),
        vary=True))
    lr: float = field(default=0.01, metadata=option(  # peak learning rate per step
        "--lr", "Peak learning rate per step.", number(0, low_open=True), vary=True))
    schedule: str = field(default="constant", metadata=option(
        "--schedule", "Learning-rate schedule, applied per step: constant, or onecycle (linear "
        "up for --warmup-fraction of the steps, then down to 0).", choice(SCHEDULES)))
    warmup_fraction: float = field(default=0.2, metadata=option(  # share of all steps
        "--warmup-fraction", "onecycle: the share of all steps spent rising.",
        number(0, 1, low_open=True)))
    momentum: float = field(default=0.9, metadata=option(
        "--momentum", "SGD momentum (PyTorch's form in both frameworks).",
        number(0, 1, high_open=True)))
    nesterov: bool = False
    weight_decay: float = field(default=0.0, metadata=option(  # PyTorch SGD form
        "--weight-decay", "L2 coefficient added to the gradient.", number(0)))
    label_smoothing: float = field(default=0.0, metadata=option(
        "--label-smoothing", "Label smoothing of the cross-entropy.",
        number(0, 1, high_open=True)))
    dropout: bool = field(default=True, metadata=option(
        "--dropout/--no-dropout", "Train with the network's dropout layers, each framework "
        "drawing its own masks (off: every rate 0, as the parity check runs).", flag()))
    bn_momentum: float = 0.1  # PyTorch convention: new = (1 - m) * old + m * batch
    bn_epsilon: float = 1e-5
    augment: bool = field(default=True, metadata=option(
        "--augment/--no-augment", "Random crop (4-pixel zero padding) and horizontal flip, "
        "from the shared data plan.", flag()))
    crop_padding: int = 4  # pixels of zero padding before the random crop
    cutout: int = field(default=0, metadata=option(  # pixels, the square's side
        "--cutout", "With --augment, set a random square of this side (pixels) of each "
        "training image to the mean colour, from the shared data plan (cutout); 0: none.",
        count(0), vary=True))
    precision: str = field(default="auto", metadata=option(
        "--precision", "auto: mixed on a GPU with tensor cores; on a CPU float32, unless "
        "`cnncompare doctor` measured mixed faster in both frameworks here (bfloat16 speeds "
        "them up unequally, or is emulated); float32 elsewhere; mixed: float16 "
        "+ loss scaling on a GPU, bfloat16 on a CPU; fp16: float16 + dynamic loss scaling on "
        "any device, the CPU included; fp32: float32. The choice and its reason are recorded.",
        choice(PRECISIONS), vary=True))
    tf32: bool = field(default=False, metadata=option(  # off in both: equal numerics
        "--tf32/--no-tf32", "Allow TensorFloat-32 on Ampere+ GPUs, in both frameworks alike.",
        flag(), vary=True))
    # Dynamic loss scaling under float16 (GPU), the same policy in both: start here, double
    # after this many steps without overflow, halve on overflow (PyTorch GradScaler defaults).
    loss_scale_initial: float = 65536.0
    loss_scale_growth_interval: int = 2000  # steps
    # PyTorch's memory format; None: channels_last on GPU (the AMP guide's advice for tensor
    # cores), contiguous on CPU. Keras always computes NHWC.
    channels_last: bool | None = field(default=None, metadata=option(
        "--channels-last/--no-channels-last", "PyTorch's memory format (Keras always "
        "computes NHWC).", optional(flag()),
        shown_default="channels_last on GPU, contiguous on CPU"))
    device: str = field(default="auto", metadata=option(
        "--device", "auto: the GPU if there is one (and say which); gpu: fail if there is "
        "none.", choice(DEVICE_CHOICES), vary=True))
    devices: int = field(default=1, metadata=option(  # replicas, or stages (--parallel model)
        "--devices", "Devices: GPUs, or on CPU logical devices (tf) / gloo processes (torch); "
        "replicas under --parallel data, stages under --parallel model.", count(), vary=True))
    parallel: str = field(default="data", metadata=option(  # compare.experiment.stages
        "--parallel", "How the devices share the work: data (a replica on each: "
        "MirroredStrategy, DDP) or model (the network cut into --stages consecutive stages "
        "balanced by FLOPs, stage i on device i; one replica).", choice(PARALLEL), vary=True))
    stages: int | None = field(default=None, metadata=option(
        "--stages", "Stages of --parallel model, one per device.", optional(count()),
        shown_default="--devices"))
    micro_batches: int = field(default=1, metadata=option(
        "--micro-batches", "Split each global batch into this many micro-batches, their "
        "gradients accumulated before one update (GPipe's schedule, without overlap).",
        count(), vary=True))
    share_device: bool = field(default=False, metadata=option(
        "--share-device/--no-share-device", "GPU: carve --devices from one GPU (TensorFlow: "
        "logical GPUs, each an equal share of its memory; PyTorch: DDP processes sharing it "
        "over gloo, or every model-parallel stage on it) to run the multi-device paths on "
        "one chip. Recorded as one shared chip: its times are no multi-GPU speed-up. A CPU's "
        "devices always share it.", flag()))
    allow_mixed_devices: bool = False  # sweep: let the frameworks differ in device kind
    # Runs over several processes (TF_CONFIG workers, torchrun, DDP on one machine): how long
    # a collective waits for a peer before the run fails with the peer's name. Long enough
    # for a cold XLA/cuDNN autotune of resnet9 on one worker, short enough that a dead
    # machine does not hold the others for TensorFlow's and NCCL's default 30 min.
    collective_timeout_s: float = field(default=300.0, metadata=option(  # seconds
        "--collective-timeout", "Runs over several processes or machines: seconds a "
        "collective waits for a peer before the run fails naming it.",
        number(0, low_open=True, what="a number of seconds")))
    compile: bool = field(default=False, metadata=option(
        "--compile/--no-compile", "XLA jit_compile (tf) and torch.compile (torch); what "
        "compiled, read from the compiler, is in result.json's compilation.", flag(),
        vary=True))
    # PyTorch on a GPU: replay the model's forward and backward as CUDA graphs
    # (torch.compile mode "reduce-overhead"), PyTorch's counterpart of TensorFlow's in-graph
    # step batching (steps_per_call). TensorFlow ignores it.
    cuda_graphs: bool = field(default=False, metadata=option(
        "--cuda-graphs/--no-cuda-graphs", "PyTorch on a GPU: replay the model's forward and "
        "backward as CUDA graphs (torch.compile mode reduce-overhead); TensorFlow ignores it.",
        flag(), vary=True))
    # Both frameworks' compile caches on disk in one state; cold by default (docs/measurement.md)
    compile_cache: str = field(default="cold", metadata=option(
        "--compile-cache", "Compiled runs start from empty compile caches of their own (cold) or "
        "from caches an untimed run of the same configuration filled (warm: compare runs it "
        "first; run reuses cnncompare's cache folder). What each compiler found is in "
        "result.json's compilation.", choice(COMPILE_CACHES)))  # no sweep: no warm-up there
    compile_cache_dir: str | None = None  # warm: the folder compare's untimed run filled
    cudnn_benchmark: bool = True  # cuDNN autotuning (torch; TF autotunes always)
    deterministic: bool = False  # framework determinism flags
    shared_init: bool = field(default=True, metadata=option(
        "--shared-init/--no-shared-init", "Start both frameworks from the same "
        "numpy-generated weights.", flag()))
    init_weights: str | None = field(default=None, metadata=option(
        "--init-weights", "Start both frameworks from the weights in this NPZ file (the "
        "canonical layout, as `cnncompare port` writes them) instead of the seed's draw; "
        "checked against the network before any framework starts.", optional(path()),
        metavar="NPZ", path=True))
    seed: int = field(default=0, metadata=option(
        "--seed", "Seed of the initial weights and the data plan.", count(0)))
    # Training steps per call of the framework's step function: TF runs them in one
    # tf.function that takes its batches from the iterator inside the graph (what Keras'
    # steps_per_execution does); PyTorch runs them in one trainer call. None: the device's
    # default (steps_per_call below, DEFAULT_STEPS_PER_CALL).
    steps_per_call: int | None = field(default=None, metadata=option(
        "--steps-per-call", "Training steps per call of the step function: TF runs them in "
        "one tf.function that reads the iterator inside the graph (as Keras' "
        "steps_per_execution); PyTorch in one trainer call.", optional(count()), vary=True,
        shown_default=(f"{DEFAULT_STEPS_PER_CALL['cpu']} on every device"
                       if len(set(DEFAULT_STEPS_PER_CALL.values())) == 1 else
                       ", ".join(f"{k} on {d.upper()}"
                                 for d, k in DEFAULT_STEPS_PER_CALL.items()))))
    # Both frameworks' distribution wrapper (compare.experiment.strategy): auto (none for one
    # replica, MirroredStrategy and DDP for several), none, mirrored (the wrapper also on one
    # replica), or tf=CHOICE,torch=CHOICE to set them apart (a fairness caveat).
    strategy: str = field(default="auto", metadata=option(
        "--strategy", "Both frameworks' distribution wrapper: auto (none for one replica; "
        "MirroredStrategy and DDP for several), none (one replica), mirrored (the wrapper "
        "also on one replica), or tf=CHOICE,torch=CHOICE to set them apart (the report names "
        "it as a caveat).", strategy_check(), vary=True, metavar="|".join(strategy.CHOICES)))
    # Synchronised timing windows end on call boundaries and last about timing_window_s
    # seconds, at most an eighth of an epoch (the loop sizes them from the first epoch's
    # calls, compare.run.schedule); timing_window, when set, fixes them at that many steps
    # instead (rounded up to whole calls).
    timing_window_s: float = field(default=0.5, metadata=option(  # seconds
        "--timing-window-s", "Target length of a synchronised timing window, seconds "
        "(windows end on call boundaries, and last at most an eighth of an epoch).",
        number(0, low_open=True, what="a number of seconds")))
    timing_window: int | None = None  # steps
    # Steps profiled after the last epoch (whole calls), split into phases (compare.run.phases)
    profile_steps: int = field(default=32, metadata=option(
        "--profile", "After the last epoch, train this many more steps under each framework's "
        "profiler and split a step's time into its phases (input, copy, forward, backward, "
        "all-reduce, update); 0: off; compare: each framework's first seed. They count in no "
        "other figure.", count(0)))
    target_accuracy: float | None = field(default=None, metadata=option(  # a fraction
        "--target-accuracy", "Report the training time to reach this test accuracy "
        "(fraction).", optional(number(0, 1, low_open=True, what="a fraction"))))
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    tensorboard_dir: str | None = None  # TensorBoard root; None: <out>/tensorboard
    out: str = "runs/latest"  # the CLI names it after the command: runs/<command>-...
    quiet: bool = False
    debug: bool = False
    # "matched": the comparison's one setting for both; "defaults": a framework at its own
    # default compile state (compare.experiment.compile_state); "best": compare --best's run
    # with its framework's own advice (compare.experiment.best); reports never pool them
    variant: str = "matched"
    # No option: compare's own loops. The folder of this run's own-loop twin, trained in this
    # run's process beside the shared loop, a timing window of each in turn (compare.run.own_loop);
    # None: no twin here (`run --own-loop` trains one in a process of its own)
    own_loop_beside: str | None = None
    # No option: compare's runs on a CPU. The Unix socket where this run takes turns, window
    # by window, with the other framework's run of its seed, side by side in time
    # (compare.process.turns); None: the run works alone
    turns: str | None = None
    # No option: --precision as the command resolved it on this machine before any framework
    # started (compare.machine.precision_choice.carry), for each device kind the run may train on:
    # {"cpu" | "gpu": Resolved.to_dict(precision)}. The frameworks read it
    # (compare.experiment.precision_rule.carried); None: not resolved yet.
    precision_resolved: dict[str, ResolvedRecord] | None = field(default=None, hash=False)

    def replace(self, **changes: Any) -> "RunConfig":
        """This config with `changes`; a change of what the precision was resolved from
        (RESOLVED_FROM) drops the resolution, which the changed config must make again."""
        if changes.keys() & RESOLVED_FROM and "precision_resolved" not in changes:
            changes["precision_resolved"] = None
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


# The settings RunConfig.precision_resolved is resolved from, besides the machine
RESOLVED_FROM = frozenset({"precision", "device", "model"})


@dataclass(frozen=True)
class ComparisonConfig:
    """How `compare` runs the two frameworks beside each other."""

    seeds: int = field(default=1, metadata=option(  # runs per framework: seed, seed + 1, ...
        "--seeds", "Seeds per framework (seed, seed+1, ...): 2 give a range of the ratios, "
        "3 or more a 95% confidence interval.", count()))
    # SGD steps of the parity probe after the first-batch gradients
    parity_steps: int = field(default=3, metadata=option(
        "--parity-steps", "SGD steps of the parity check before the comparison.", count()))
    ignore_parity: bool = field(default=False, metadata=option(  # the report says so
        "--ignore-parity", "Run the comparison even when the parity check fails (the report "
        "says so).", flag()))
    own_loops: bool = field(default=True, metadata=option(  # compare.run.own_loop
        "--own-loops/--no-own-loops", "Also train each framework and seed with the framework's "
        "own loop (Keras compile + fit; a plain PyTorch loop) on the same model, weights, "
        "batches and recipe, and report the shared loop's time against it.", flag()))
    turns: bool = field(default=True, metadata=option(  # compare.process.turns
        "--turns/--no-turns", "On a CPU, run each seed's two frameworks side by side, one "
        "working at a time in turns of about half a second of timing windows (the one behind "
        "in its steps next), so that the host's slow spells hit both alike; --no-turns runs "
        "them one after the other.",
        flag()))
    defaults: bool = field(default=True, metadata=option(  # compare.experiment.compile_state
        "--defaults/--no-defaults", "On a GPU, also train each framework whose own default "
        "compile state (Keras: XLA there; PyTorch: eager) differs from the matched runs' at "
        "it, and report that ratio beside the matched one.", flag()))
    best: bool = field(default=False, metadata=option(  # compare.experiment.best
        "--best", "Also train each framework with the fast settings its own performance guide "
        "recommends for the device (recorded with their sources), and report best against "
        "best beside the matched comparison.", flag()))


# Per-model recipes: only the fields that differ from RunConfig's defaults, each declared
# with its network (compare.experiment.networks).
RECIPES: dict[str, dict[str, Any]] = {name: dict(network.recipe)
                                      for name, network in networks.MODELS.items()}


def data_replicas(config: RunConfig) -> int:
    """Replicas --devices asks for: all of them under --parallel data, one under model."""
    return config.devices if config.parallel == "data" else 1


def stage_count(config: RunConfig) -> int:
    """Stages of the network: --stages (default --devices) under --parallel model, else 1."""
    return (config.stages or config.devices) if config.parallel == "model" else 1


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
    return (f"the default on {'GPU' if on_gpu else 'CPU'} "
            "(compare.experiment.config.DEFAULT_STEPS_PER_CALL)")


def recipe_config(model: str, **overrides: Any) -> RunConfig:
    """The defaults for `model`, with the given overrides (None values ignored)."""
    fields = dict(RECIPES.get(model, {}))
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return RunConfig(model=model, **fields)
