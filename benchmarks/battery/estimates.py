"""A training run's GPU time as the battery estimates it: the run (its recipe and where the
battery runs it), and what the estimate rests on: the assumptions where nothing has measured
a configuration on a GPU, and what one rental on an H200 did measure, used in their place
where it can."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from compare.experiment import networks, specs
from compare.machine import gpu_metrics

CIFAR10 = (50_000, 10_000)  # training and test images


@dataclass(frozen=True)
class Recipe:
    """One comparison's training: what the command says and what the estimate uses."""

    model: str
    precision: str
    batch: int
    epochs: int
    seeds: int
    lr: float | None = None
    target: float | None = None
    compiled: bool = False  # --compile: XLA; torch.compile
    # a comparison's runs of each framework at its own default where the matched runs are
    # not (compare --defaults, on by default)
    defaults: bool = True
    # --compile-cache: both frameworks' compile caches cold (each run's own, empty) or warm
    # (compare's untimed warm-up filled them); None: not said, cnncompare's default (cold)
    compile_cache: str | None = None

    @property
    def cache_state(self) -> str:
        return self.compile_cache or "cold"

    def options(self) -> list[str]:
        out = ["--model", self.model, "--precision", self.precision, "--batch-size",
               str(self.batch), "--epochs", str(self.epochs)]
        if self.lr is not None:
            out += ["--lr", str(self.lr)]
        if self.target is not None:
            out += ["--target-accuracy", str(self.target)]
        return out + (["--compile"] if self.compiled else []) + (
            [] if self.defaults else ["--no-defaults"]) + (
            ["--compile-cache", self.compile_cache] if self.compile_cache else [])


@dataclass
class Context:
    """Where and how this invocation runs its stages."""

    out: Path
    device: str  # gpu, or cpu for the tiny plumbing run
    tiny: bool
    data: list[str]  # --dataset/--data-dir options of every training command
    train_images: int
    test_images: int
    calibration: dict
    # every comparison's seeds, where a short rental cannot afford each stage's own; None:
    # each stage's own
    seeds: int | None = None
    # a stage's time limit as a multiple of its estimate (at least 120 s): 2 where stages
    # share commands of 10 minutes; a queue under one deadline can afford looser limits
    limit_factor: float = 2.0
    # the GPU-test stage's tests, by parts of their names (pytest -k ... or ...), for a rental
    # that runs what an earlier one did not reach; empty: every GPU test of the framework
    tests: tuple[str, ...] = ()


# What the estimate assumes where no CPU run can tell: the share of the H100's dense peak a
# CIFAR-10 network reaches (small convolutions keep tensor cores far from full), and the
# host's cost of one training step on a GPU (PyTorch: each step's kernel launches from
# Python, ~5 us each; TensorFlow: the step's ops inside one graph call of 32 steps).
ASSUMED_UTILISATION = {"fp16": 0.25, "fp32": 0.5}
# LeNet's measured at batch 4 in mixed precision on an H200 (MEASURED), float32 taken as the
# same; ResNet-18's and MobileNetV2's as their steady steps at batch 128 on an H100 (MEASURED),
# where the GPU idled most of each step (ResNet-18: 87% in PyTorch, 65% in TensorFlow, by
# each framework's profiler).
ASSUMED_HOST_STEP_MS = {("torch", "lenet"): 3.0, ("torch", "resnet9"): 0.9,
                        ("torch", "resnet18"): 13.05, ("torch", "mobilenetv2"): 31.3,
                        ("tf", "lenet"): 2.35, ("tf", "resnet9"): 0.5,
                        ("tf", "resnet18"): 18.45, ("tf", "mobilenetv2"): 48.1}
CUDA_START_S = 5.0  # assumed on top of the CPU's fixed cost: CUDA context, cuDNN, autotuning
# Measured on a GPU, used in place of the assumptions above where a configuration (framework,
# model, precision, batch, compiled) ran there:
# the steady step (ms; LeNet at batch 4 is host-bound at 8-12x the assumed host step,
# MobileNetV2 at 6x), the first epoch's extra (s: tracing, cuDNN autotuning, TensorFlow's PTX
# compiled for the GPU) and one test-set pass (s). H200: each run's result.json in
# benchmarks/results/gpu-h200-lenet-mixed/ and gpu-h200-resnet9-mixed/; H100 (2026-11-26): in
# benchmarks/results/gpu-h100/mobilenetv2-mixed/, gpu-h100-resnet18-mixed/ and
# gpu-h100-rental2/mobilenetv2-mixed/.
MEASURED = {
    ("torch", "lenet", "mixed", 4, False): {"gpu": "H200", "step_ms": 3.01, "first_epoch_s": 2.5,
                                            "eval_s": 3.3},
    ("tf", "lenet", "mixed", 4, False): {"gpu": "H200", "step_ms": 2.35, "first_epoch_s": 1.4,
                                         "eval_s": 4.0},
    ("torch", "resnet9", "mixed", 512, False): {"gpu": "H200", "step_ms": 7.51,
                                                "first_epoch_s": 4.9, "eval_s": 0.11},
    ("tf", "resnet9", "mixed", 512, False): {"gpu": "H200", "step_ms": 24.25, "first_epoch_s": 7.5,
                                             "eval_s": 0.15},
    # epochs 3-8, alone on the GPU (epochs 1-2 shared it with a ResNet-18 run)
    ("torch", "mobilenetv2", "mixed", 128, False): {"gpu": "H100", "step_ms": 31.3,
                                                    "first_epoch_s": 27.5, "eval_s": 0.75},
    ("torch", "resnet18", "mixed", 128, False): {"gpu": "H100", "step_ms": 13.05,
                                                 "first_epoch_s": 8.5, "eval_s": 0.44},
    ("tf", "resnet18", "mixed", 128, False): {"gpu": "H100", "step_ms": 18.45,
                                              "first_epoch_s": 10.6, "eval_s": 0.37},
    # its second epoch's windows (the run was cut in its third); the first took 43 s more
    ("tf", "mobilenetv2", "mixed", 128, False): {"gpu": "H100", "step_ms": 48.1,
                                                 "first_epoch_s": 43.1, "eval_s": 0.66},
    # compiled, the H200 verdict's runs, 3 seeds each (benchmarks/results/
    # gpu-h200-resnet9-verdict/runs/): the step as epochs 2-24 averaged it (98 steps an epoch),
    # the first epoch's extra over a later one with, for TensorFlow, its first evaluation's,
    # where XLA compiles the evaluation step (about 8 s). `cache`: the compile caches' state
    # the first epoch was measured in (PyTorch's graph came from torch.compile's cache, which
    # the battery's untimed warm-up had filled; XLA kept none across processes), which
    # COMPILE_CACHE_EXTRA_S moves to the other state where it was measured
    ("torch", "resnet9", "mixed", 512, True): {"gpu": "H200", "step_ms": 9.36,
                                               "first_epoch_s": 3.9, "eval_s": 0.106,
                                               "cache": "warm"},
    ("tf", "resnet9", "mixed", 512, True): {"gpu": "H200", "step_ms": 6.5, "first_epoch_s": 36.6,
                                            "eval_s": 0.105, "cache": "cold"},
}
# A compiled run's first epoch in the other cache state than MEASURED's: (framework, model) ->
# seconds added cold over warm. PyTorch's, an H100 (benchmarks/results/gpu-h100-resnet9-own/
# runs/): seed 0's first epoch compiled cold, 21.6 s over a later epoch, seeds 1 and 2 from
# the cache it filled, 4.3 and 4.9 s. TensorFlow's warm first epoch has not run on a GPU
# (on this project's CPU XLA's LeNet epoch went from 2.51 s cold to 0.66 s warm): taken as
# its cold one, so a warm estimate errs long.
COMPILE_CACHE_EXTRA_S = {("torch", "resnet9"): 17.0}
# a training process's time outside its epochs (s), on the H200
MEASURED_FIXED_S = {"torch": 6.0, "tf": 10.5}
# The second framework's `compare --resume` up to its first run: start-up and the parity
# check (float64 on the H200 host's 16 cores, then the timed configuration's drift on the
# GPU), mixed precision; ResNet-9's float64 probes at batch 512 take most of it.
MEASURED_PARITY_S = {"lenet": 22.0, "resnet9": 91.0}


def run_seconds(framework: str, recipe: Recipe, ctx: Context, epochs: int | None = None,
                train_images: int | None = None) -> tuple[float, str]:
    """One training process: (GPU seconds, how that was estimated): as measured where this
    configuration ran on a GPU on CIFAR-10 (MEASURED), else from FLOPs on an H100 SXM."""
    spec = networks.get_spec(recipe.model)
    mode = "fp16" if recipe.precision == "mixed" else "fp32"
    peak = gpu_metrics.PEAK_TFLOPS["H100"][mode] * 1e12 * ASSUMED_UTILISATION[mode]
    images = train_images or ctx.train_images
    steps = math.ceil(images / recipe.batch)
    compute = steps * recipe.batch * specs.train_flops(spec) / peak
    host_step = ASSUMED_HOST_STEP_MS[(framework, recipe.model)] / 1000
    host = steps * host_step
    evaluation = max(ctx.test_images * specs.forward_flops(spec) / peak,  # a third of the
                     math.ceil(ctx.test_images / recipe.batch) * host_step / 3)  # host's step
    epochs = epochs or recipe.epochs
    measured = (MEASURED.get((framework, recipe.model, recipe.precision, recipe.batch,
                              recipe.compiled))
                if ctx.device == "gpu" and images == CIFAR10[0] else None)
    if measured is not None:
        fixed = MEASURED_FIXED_S[framework]
        epoch = steps * measured["step_ms"] / 1000
        first, cache = first_epoch_seconds(framework, recipe, measured)
        total = fixed + first + epochs * (epoch + measured["eval_s"])
        return total, (f"measured on an NVIDIA {measured['gpu']}: {fixed:.0f} s fixed + "
                       f"{first:.1f} s first epoch{cache} + {epochs} epochs x "
                       f"({steps} steps x {measured['step_ms']} ms + "
                       f"{measured['eval_s']} s evaluation)")
    fixed = fixed_seconds(framework, recipe.model, ctx)
    total = fixed + epochs * (max(compute, host) + evaluation)
    bound = "compute" if compute >= host else "host"
    how = (f"{fixed:.0f} s fixed ({fixed - CUDA_START_S:.1f} s measured on "
           f"{ctx.calibration.get('cpu', 'a CPU')} + {CUDA_START_S:.0f} s assumed for CUDA) + "
           f"{epochs} epochs x ({bound}-bound {max(compute, host):.2f} s: {steps} steps, "
           f"{specs.train_flops(spec) / 1e9:.3g} GFLOP/image at "
           f"{ASSUMED_UTILISATION[mode]:.0%} of the {mode} peak, host "
           f"{ASSUMED_HOST_STEP_MS[(framework, recipe.model)]} ms/step assumed)")
    return total, how


def first_epoch_seconds(framework: str, recipe: Recipe, measured: dict) -> tuple[float, str]:
    """A measured configuration's first-epoch extra in the recipe's compile-cache state, and
    what that rests on (empty for an eager run, whose first epoch compiles nothing cached)."""
    first = measured["first_epoch_s"]
    if not recipe.compiled or "cache" not in measured:
        return first, ""
    state, was = recipe.cache_state, measured["cache"]
    extra = COMPILE_CACHE_EXTRA_S.get((framework, recipe.model))
    if state == was:
        return first, f" (caches {state})"
    if extra is None:
        return first, f" (caches {state}; measured {was} only, taken as the same)"
    return (max(0.0, first + extra if state == "cold" else first - extra),
            f" (caches {state}: {was} {first} s {'+' if state == 'cold' else '-'} {extra} s)")


def fixed_seconds(framework: str, model: str, ctx: Context) -> float:
    """A training process's cost outside its epochs: the CPU's measured start-up (import,
    build, the first call's tracing), plus the CUDA start assumed on a GPU."""
    measured = ctx.calibration.get("fixed_s", {}).get(f"{framework}/{model}", 6.0)
    return measured + (CUDA_START_S if ctx.device == "gpu" else 0.0)
