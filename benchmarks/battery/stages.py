"""The battery's stages: what each one measures, for which frameworks, its commands
(commands.py), its time estimate (a run's, from estimates.py) and limits."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from benchmarks.battery.commands import (
    BOTH,
    FRAMEWORKS,
    KERNEL_STEPS,
    OVERHEAD_CONFIGS,
    REFERENCE_RUNS,
    REPO,
    STAGE_LIMIT_S,
    TINY_SKIPPED,
    batchnorm_commands,
    compare_commands,
    cudnn_commands,
    doctor_commands,
    kernels_commands,
    overhead_commands,
    prime_commands,
    reference_commands,
    run_commands,
    smoke_commands,
    suite_commands,
    sweep_commands,
    test_commands,
)
from benchmarks.battery.estimates import (
    MEASURED_PARITY_S,
    Context,
    Recipe,
    fixed_seconds,
    run_seconds,
)

CALIBRATION = REPO / "benchmarks" / "gpu_battery_calibration.json"
QUEUE_LIMIT_S = 1500  # a stage only a rental's background queue runs, under its deadline
SPARE_S = 60  # of --time-left, kept for packing and the command's own end
# The whole battery spread over rentals of 14 minutes of stages each (the plan's `rental`),
# TensorFlow's bundle arriving while PyTorch trains. What one 15-minute rental holds, the
# machine's start and a device call per part of the bundle counted, rental.py lays out.
RENTAL_S = 14 * 60  # a rental's GPU time for stages
RENTAL_CORE_S = RENTAL_S  # the core stages come first, over as many rentals as they need
PACK_FILES = 8  # files that come back from one command
PACK_TAR_BYTES = 15 * 2**20  # one file that comes back: at most 16 MiB


# The PyTorch CIFAR-10 tutorial's recipe (the seed's Net) and the DAWNBench ResNet-9's, whose
# 24 epochs are what its 94% needs.
LENET = dict(model="lenet", batch=4, epochs=2, lr=0.001, seeds=2)
RESNET9 = dict(model="resnet9", batch=512, epochs=24, target=0.94)


@dataclass(frozen=True)
class Stage:
    name: str
    core: bool
    frameworks: tuple[str, ...]
    what: str
    commands: Callable[[str, Context], list[list[str]]]  # (framework, context) -> argv list
    estimate: Callable[[str, Context], tuple[float, str]]  # (framework, context) -> (s, how)
    comparison: bool = False  # leaves a `compare` directory OUT/<name>
    json_out: bool = False  # its stdout is JSON, kept as OUT/<name>-<framework>.json
    # Runs under --tiny. A stage whose commands another stage's tiny run already proves, on
    # a network whose tiny run would take minutes of a CPU, says so and is skipped.
    tiny: bool = True
    tiny_reason: str = ""  # why --tiny skips it, where not TINY_SKIPPED's
    # The stage whose commands this one's are under --tiny on a CPU, where every stage trains
    # float32 (TinyWork.precision): skipped there, saying so, as a second run of the same.
    tiny_cpu_twin: str | None = None
    # Its times are figures: on a GPU it starts only on a quiet host (nothing else training,
    # unpacking or copying there: host.wait_for_quiet_host) and is refused otherwise; while it
    # runs the host is watched (host.HostWatch) and a co-runner marked. Untimed stages
    # (accuracy references, smoke tests, the images' decoding) fill the minutes while
    # TensorFlow's bundle arrives.
    timed: bool = True
    max_limit_s: int = STAGE_LIMIT_S  # its time limit at most (a 10-minute command's)
    # The share of its estimate that leaves a usable result: a stage runs when that much
    # time is left (a comparison over 3 seeds: its first seed of each framework)
    least_fraction: float = 1.0
    # The seconds that leave a usable result, where a share of the estimate would not say
    # (a warm comparison's warm-ups and parity check come before its first seed)
    least_s: Callable[[str, Context], float] | None = None
    # Its commands from this index on run on the TensorFlow bundle's fallback cuDNN (CUDA 12)
    # instead of the machine's (running.fallback_environment); None: all on the machine's
    fallback_from: int | None = None

    def tiny_skip(self, ctx: Context) -> str | None:
        """Why --tiny skips this stage in `ctx`, or None where it runs."""
        if not ctx.tiny:
            return None
        if not self.tiny:
            return self.tiny_reason or TINY_SKIPPED
        if self.tiny_cpu_twin and ctx.device == "cpu":
            return (f"--tiny on a CPU trains float32: the commands of {self.tiny_cpu_twin}, "
                    f"which runs")
        return None


# --------------------------------------------------------------------------- estimates

def comparison_estimate(recipe: Recipe) -> Callable[[str, Context], tuple[float, str]]:
    def estimate(framework: str, ctx: Context) -> tuple[float, str]:
        one, how = run_seconds(framework, recipe, ctx)
        seeds = recipe.seeds if ctx.seeds is None else ctx.seeds
        total, note = seeds * one, f"{seeds} seed(s) x [{how}]"
        # on a GPU, where the matched runs hold a framework off its default, it trains at it
        # too: TensorFlow/Keras with XLA beside eager runs, PyTorch eager beside compiled ones
        off_default = "tf" if not recipe.compiled else "torch"
        if framework == off_default and ctx.device == "gpu" and recipe.defaults:
            at_default, how_long = run_seconds(
                framework, replace(recipe, compiled=not recipe.compiled), ctx)
            total += seeds * at_default
            note += f" + {seeds} seed(s) at {framework}'s default: [{how_long}]"
        if framework == "tf" and ctx.device == "gpu" and recipe.model in MEASURED_PARITY_S:
            total += MEASURED_PARITY_S[recipe.model]
            note += f" + {MEASURED_PARITY_S[recipe.model]:.0f} s parity check (measured)"
        elif framework == "tf":  # the parity check runs with the second framework
            probes = 4 + (3 if recipe.precision != "fp32" else 0)
            total += probes * fixed_seconds("tf", recipe.model, ctx)
            note += f" + {probes} parity probes x the fixed cost"
        return total, note
    return estimate


def warm_ups_seconds(recipe: Recipe, forms: int, ctx: Context) -> tuple[float, str]:
    """A warm comparison's untimed warm-ups before its timed runs (compare --compile-cache
    warm): per framework one epoch, its caches cold, of each form of run that compiles
    (`forms`: the matched run, with its own loop beside it where it has one, counted as a
    second; the best run); nothing for a cold one."""
    if recipe.cache_state != "warm" or not recipe.compiled:
        return 0.0, ""
    one = replace(recipe, epochs=1, compile_cache="cold")
    parts = {fw: run_seconds(fw, one, ctx)[0] for fw in FRAMEWORKS}
    return forms * sum(parts.values()), (
        f" + the warm-ups, untimed: {forms} one-epoch runs per framework, caches cold ("
        + ", ".join(f"{fw} {seconds:.0f} s each" for fw, seconds in parts.items()) + ")")


def verdict_estimate(recipe: Recipe, beside: tuple[str, ...]
                     ) -> tuple[Callable[[str, Context], tuple[float, str]],
                                Callable[[str, Context], float]]:
    """The verdict's comparison of both in one command (both_estimate) with its warm-ups
    where its caches are warm (the matched run and its own loop, and the best run, per
    framework), and the seconds that leave a usable result: the warm-ups, the parity check and
    each framework's first seed."""
    forms = 1 + ("own loop" in beside) + ("best run" in beside)
    both = both_estimate(recipe, beside)

    def estimate(framework: str, ctx: Context) -> tuple[float, str]:
        total, how = both(framework, ctx)
        warm, warm_how = warm_ups_seconds(recipe, forms, ctx)
        return total + warm, how + warm_how

    def least(framework: str, ctx: Context) -> float:
        total, _ = both(framework, ctx)
        parity = MEASURED_PARITY_S.get(recipe.model, 0.0) if ctx.device == "gpu" else 0.0
        seeds = recipe.seeds if ctx.seeds is None else ctx.seeds
        return (warm_ups_seconds(recipe, forms, ctx)[0] + parity
                + (total - parity) / max(1, seeds))
    return estimate, least


def own_loops_estimate(framework: str, ctx: Context) -> tuple[float, str]:
    """One framework's seeds of OWN_LOOPS, each run beside its own loop, as long as it."""
    one, how = run_seconds(framework, OWN_LOOPS, ctx)
    seeds = OWN_LOOPS.seeds if ctx.seeds is None else ctx.seeds
    return 2 * seeds * one, f"{seeds} seed(s) x 2 (the run and its own loop) x [{how}]"


def fixed_estimate(seconds: float, how: str) -> Callable[[str, Context], tuple[float, str]]:
    return lambda framework, ctx: (seconds, how)


# --------------------------------------------------------------------------- commands

def both_estimate(recipe: Recipe, beside: tuple[str, ...] = ()
                  ) -> Callable[[str, Context], tuple[float, str]]:
    """A comparison of both frameworks in one command: each framework's part, and for each
    of `beside` ("own loop", "best run") one more run as long beside each matched run."""
    def estimate(framework: str, ctx: Context) -> tuple[float, str]:
        parts = [comparison_estimate(recipe)(fw, ctx) for fw in FRAMEWORKS]
        seeds = recipe.seeds if ctx.seeds is None else ctx.seeds
        more = sum(seeds * run_seconds(fw, recipe, ctx)[0] for fw in FRAMEWORKS)
        total = sum(seconds for seconds, _ in parts) + len(beside) * more
        return total, ("; ".join(f"{fw}: {how}" for fw, (_, how) in zip(FRAMEWORKS, parts))
                       + "".join(f" + each seed's {run}, as long as its run" for run in beside))
    return estimate


def sweep_stage(name: str, frameworks: tuple[str, ...], what: str, varies: list[str],
                recipe: Recipe, extra: tuple[str, ...] = (),
                tiny_varies: list[str] | None = None,
                estimate: Callable[[str, Context], tuple] | None = None) -> Stage:
    """A sweep stage whose description, commands and estimate come from one recipe."""
    runs = math.prod(len(v.split("=", 1)[1].split(",")) for v in varies)
    epochs = f"{recipe.epochs} epoch{'s' if recipe.epochs != 1 else ''}"
    described = (f"sweep --vary {' --vary '.join(varies)}{''.join(' ' + x for x in extra)}: "
                 f"{what} ({recipe.model}, {recipe.precision}, batch {recipe.batch}, {epochs})")
    return Stage(name, False, frameworks, described,
                 sweep_commands(name, varies, recipe, extra, tiny_varies),
                 estimate or sweep_estimate(runs, recipe))


# LeNet at batch 4 on a GPU host's CPU: 15.6 ms a step, PyTorch's over a whole epoch with one
# thread per core on an H100 host's 16 cores (benchmarks/results/gpu-h100/cpu-vs-gpu/); its
# estimate had assumed 1.5 ms. TensorFlow's is taken as the same.
CPU_LENET_STEP_S = 15.6e-3
CPU_VS_GPU = Recipe("lenet", "fp32", 4, 1, 1, lr=0.001)  # the tutorial's recipe, one epoch
# LeNet in the sweeps of a GPU's settings: two epochs, as on the H200 and the H100
SWEPT_LENET = Recipe("lenet", "mixed", 32, 2, 1)


def sweep_estimate(runs: int, recipe: Recipe) -> Callable[[str, Context], tuple]:
    def estimate(framework: str, ctx: Context) -> tuple[float, str]:
        one, how = run_seconds(framework, recipe, ctx)
        return runs * one, f"{runs} runs x [{how}]"
    return estimate


def overhead_estimate(framework: str, ctx: Context) -> tuple[float, str]:
    total, parts = 0.0, []
    for model, batch in OVERHEAD_CONFIGS:
        one, _ = run_seconds(framework, Recipe(model, "mixed", batch, 3, 1), ctx)
        total += 2 * 2 * one  # the shared and the own loop, twice each
        parts.append(f"{model} b{batch} {one:.0f} s")
    return total, ("4 runs (shared and own loop, 2 repeats) of 3 epochs per configuration: "
                   + ", ".join(parts))


# The accuracy the rentals' data allows: their CIFAR-10 is a JPEG re-encoding (quality about
# 75), on which airbench94, 94.01% on the original images, reaches 90.68% with its test-time
# augmentation (5 runs on an H100: benchmarks/results/gpu-h100-rental3/reference/
# reference.json); the verdict's target is a point below that mean, which a run at the data's
# ceiling reaches in its last epochs. On the original images the recipe's own 94% applies.
JPEG_COPY_TARGET = 0.897
VERDICT = Recipe(precision="mixed", seeds=3, compiled=True,
                 **{**RESNET9, "target": JPEG_COPY_TARGET})
# The verdict's comparison: its compile caches warm (compare's untimed warm-up fills both
# frameworks' before the timed runs), then cold (every run from empty caches of its own); each
# beside each framework's own loop and its best, and each framework also at its default
VERDICT_CACHES = ("warm", "cold")
VERDICT_BESIDE = ("own loop", "best run")
# The verdict's matched runs again, one seed, without the defaults runs it has measured
ONE_COMPILED = replace(VERDICT, seeds=1, defaults=False)
OWN_LOOPS = replace(VERDICT, defaults=False)  # 3 seeds beside each framework's own loop
EAGER = replace(VERDICT, compiled=False)  # matched eager, TensorFlow/Keras also at its default
PAGE = replace(VERDICT, seeds=1, compiled=False)  # as it ran (its label smoothing apart)


STAGES: list[Stage] = [
    Stage("tf-smoke", True, ("tf",), "TensorFlow's first GPU op, before anything long: a "
          "float16 3x3 convolution forward and gradient (cuDNN)", smoke_commands,
          lambda fw, ctx: (fixed_seconds(fw, "lenet", ctx), "one process's fixed cost"),
          json_out=True, timed=False),
    Stage("doctor", True, FRAMEWORKS, "cnncompare doctor: versions, the CUDA libraries each "
          "framework loaded, a few real steps per precision on the GPU alone",
          doctor_commands, lambda fw, ctx: (2 * fixed_seconds(fw, "lenet", ctx) + 10.0,
                                            "two processes' fixed cost + 10 s of steps"),
          json_out=True),
    *[Stage(f"lenet-{p}", True, FRAMEWORKS, f"LeNet, the PyTorch tutorial's recipe (batch 4, "
            f"lr 0.001, 2 epochs), {p}, 2 seeds", compare_commands(f"lenet-{p}", recipe),
            comparison_estimate(recipe), comparison=True,
            tiny_cpu_twin="lenet-fp32" if p == "mixed" else None)
      for p in ("fp32", "mixed") for recipe in [Recipe(precision=p, **LENET)]],
    Stage("resnet9-mixed", True, FRAMEWORKS, "ResNet-9 (DAWNBench), mixed precision, 24 "
          "epochs, time to 94%, 2 seeds",
          compare_commands("resnet9-mixed", Recipe(precision="mixed", seeds=2, **RESNET9)),
          comparison_estimate(Recipe(precision="mixed", seeds=2, **RESNET9)), comparison=True,
          tiny_cpu_twin="resnet9-fp32"),
    Stage("resnet9-fp32", True, FRAMEWORKS, "ResNet-9 (DAWNBench), float32 (TF32 off), 24 "
          "epochs, time to 94%, 1 seed",
          compare_commands("resnet9-fp32", Recipe(precision="fp32", seeds=1, **RESNET9)),
          comparison_estimate(Recipe(precision="fp32", seeds=1, **RESNET9)), comparison=True),
    # Where 24 epochs fall short of 94% (the JPEG copy of CIFAR-10 loses a little): the same
    # recipe on a schedule long enough to show the accuracy this data allows
    Stage("resnet9-long", False, FRAMEWORKS, "ResNet-9 (DAWNBench), mixed precision, its "
          "recipe over 48 epochs (twice its own), time to 94%, 1 seed",
          compare_commands("resnet9-long", Recipe(precision="mixed", seeds=1,
                                                  **{**RESNET9, "epochs": 48})),
          comparison_estimate(Recipe(precision="mixed", seeds=1, **{**RESNET9, "epochs": 48})),
          comparison=True, tiny=False),
    # The GPU verdict: both frameworks in one command, seeds alternated (tf, torch, torch, tf,
    # ...), only on a quiet host and only in a rental's background queue, which is not held to
    # a 10-minute command. Matched compiled (XLA; torch.compile), each run beside its
    # framework's own loop, each framework also at its default (PyTorch eager: the defaults
    # ratio is Keras' default, XLA, against PyTorch's) and at its best; twice: both compile
    # caches warm (compare's own untimed warm-up), then both cold. No stage of the battery
    # warms one framework's compile cache for it: compare warms both, or neither.
    *[Stage(f"resnet9-verdict-{cache}", False, (BOTH,), "ResNet-9 (DAWNBench), mixed "
            "precision, 24 epochs, time to 89.7% (the JPEG copy's ceiling less a point), both "
            "frameworks alternated over 3 seeds, matched compiled (XLA; torch.compile) beside "
            "each framework's own loop (Keras fit; a plain PyTorch loop), each also at its "
            "default (PyTorch eager) and its best (--best), --compile-cache "
            + cache + (": compare's untimed warm-up fills both frameworks' compile caches "
                       "first" if cache == "warm" else ": every run from empty compile "
                       "caches of its own"),
            compare_commands(f"resnet9-verdict-{cache}", recipe, own_loops=True,
                             extra=("--best",)),
            estimate, comparison=True, tiny=False, max_limit_s=QUEUE_LIMIT_S, least_s=least)
      for cache in VERDICT_CACHES
      for recipe in [replace(VERDICT, compile_cache=cache)]
      for estimate, least in [verdict_estimate(recipe, VERDICT_BESIDE)]],
    # The same, matched eager: TensorFlow/Keras below its default, and also at it (XLA)
    Stage("resnet9-eager", False, (BOTH,), "ResNet-9 (DAWNBench), mixed precision, 24 "
          "epochs, time to 89.7%, both frameworks alternated over 3 seeds, matched eager and "
          "TensorFlow/Keras also at its default (XLA)",
          compare_commands("resnet9-eager", EAGER), both_estimate(EAGER), comparison=True,
          tiny=False, max_limit_s=QUEUE_LIMIT_S, least_fraction=1 / VERDICT.seeds),
    # The verdict's matched runs (both compiled; Keras at its default) over one seed, beside
    # each framework's own loop (Keras fit with XLA; a plain PyTorch loop compiled) and its own
    # best settings, in one command (one parity check); neither trains the defaults runs,
    # which the verdict stage measures
    Stage("resnet9-own-best", False, (BOTH,), "ResNet-9 (DAWNBench), mixed precision, 24 "
          "epochs, 1 seed, matched compiled, beside each run the framework's own loop (Keras "
          "fit; a plain PyTorch loop) and its own best (--best: its performance guide's "
          "settings for the GPU)",
          compare_commands("resnet9-own-best", ONE_COMPILED, own_loops=True, extra=("--best",)),
          both_estimate(ONE_COMPILED, beside=("own loop", "best run")), comparison=True,
          tiny=False, max_limit_s=QUEUE_LIMIT_S),
    # The verdict's matched runs (both compiled) over 3 seeds beside each framework's own
    # loop, without the best runs: the shared loop against each own loop with an interval.
    # One framework a command (`compare --framework`, no parity check, which needs both), so
    # a rental can afford the framework whose shared loop it is checking (TensorFlow's update
    # inside XLA's program as Model.fit's); the other's part resumes the same comparison.
    Stage("resnet9-own", False, FRAMEWORKS, "ResNet-9 (DAWNBench), mixed precision, 24 "
          "epochs, 3 seeds, matched compiled, beside each run the framework's own loop (Keras "
          "fit; a plain PyTorch loop): the shared loop against it with an interval",
          compare_commands("resnet9-own", OWN_LOOPS, own_loops=True),
          own_loops_estimate, comparison=True, tiny=False,
          max_limit_s=QUEUE_LIMIT_S, least_fraction=1 / OWN_LOOPS.seeds),
    # Untimed: what the minutes while TensorFlow's bundle arrives can hold. The data's ceiling
    # (a public reference trainer on the same images) and our ResNet-9 at Page's dawn.py
    # recipe (no label smoothing; its reflection padding the data plan cannot express: zeros)
    Stage("reference", False, ("torch",), "airbench94 (airbench 0.1.8) on the same data, "
          f"{REFERENCE_RUNS} runs after its warm-up, with and without its test-time "
          "augmentation: the accuracy this copy of CIFAR-10 allows",
          reference_commands, fixed_estimate(60.0, "decoding the data (about 20 s) + a "
                                                   "warm-up + 5 runs of about 5 s"),
          json_out=False, tiny=False, timed=False,
          tiny_reason="--tiny: airbench trains on a CUDA GPU only"),
    Stage("resnet9-page", False, ("torch",), "ResNet-9 at Page's dawn.py recipe (no label "
          "smoothing), mixed, 24 epochs, 1 seed: its accuracy on this data (untimed)",
          run_commands("resnet9-page", PAGE, ("--label-smoothing", "0")),
          lambda fw, ctx: run_seconds(fw, PAGE, ctx), tiny=False, timed=False),
    # Once a machine, the stage's images decoded into cnncompare's data cache, which every
    # later run of either framework reads: one untimed eager epoch of PyTorch while the bundle
    # arrives, so that no timed comparison decodes them. It compiles nothing and leaves no
    # compile cache (its run's are its own, removed after it): the compile caches' state is
    # each comparison's own (--compile-cache), the same for both frameworks.
    Stage("prime", False, ("torch",), "one untimed eager epoch of ResNet-9 in PyTorch on the "
          "stage's data: its images decoded into the data cache that every later run reads; "
          "no compiler runs", prime_commands,
          lambda fw, ctx: (fixed_seconds(fw, "resnet9", ctx) + 25.0, "a process's fixed cost "
                           "+ decoding the images (about 20 s) and an eager epoch"),
          tiny=False, timed=False, tiny_reason="--tiny: no image folder to decode"),
    # Kernel durations are read on the device's clock, which the host's work (a bundle part
    # arriving) does not stretch: untimed, so it may fill the minutes while TensorFlow arrives
    Stage("kernels", False, FRAMEWORKS, "one epoch of ResNet-9 eager (PyTorch's default; "
          f"TensorFlow/Keras without XLA), then {KERNEL_STEPS} steps under the framework's "
          "profiler: the GPU's kernels by kind and name", kernels_commands,
          lambda fw, ctx: (fixed_seconds(fw, "resnet9", ctx) + 30.0, "a process's fixed cost "
                           "+ an epoch + the profiled steps, its images decoded already"),
          tiny=False, timed=False, tiny_reason="--tiny: no GPU kernels to read"),
    # 8 epochs: TensorFlow's part, eager and at Keras' default (XLA), within one command
    *[Stage(f"{model}-mixed", False, FRAMEWORKS, f"{title} (pytorch-cifar), mixed "
            f"precision, its recipe on a short schedule ({recipe.epochs} epochs, batch "
            f"{recipe.batch}), 1 seed", compare_commands(f"{model}-mixed", recipe),
            comparison_estimate(recipe), comparison=True, tiny=False)
      for model, title in (("resnet18", "ResNet-18"), ("mobilenetv2", "MobileNetV2"))
      for recipe in [Recipe(model, "mixed", 128, 8, 1)]],
    # BatchNorm alone: Keras' unfused layer (with and without XLA) against TensorFlow's fused
    # kernel, PyTorch's cuDNN kernel eager and compiled; timed between synchronisations
    Stage("batchnorm", False, FRAMEWORKS, "BatchNorm alone on ResNet-9's shapes at batch 512, "
          "forward and backward, float16: Keras' layer (with and without XLA) against "
          "TensorFlow's fused kernel; PyTorch's eager and compiled",
          batchnorm_commands,
          lambda fw, ctx: (fixed_seconds(fw, "resnet9", ctx) + 50.0, "a process's fixed cost "
                           "+ a trace or compile of 8 layers per variant (XLA; torch.compile) "
                           "+ 150 steps of each")),
    # Kernel durations on the device's clock: untimed, like `kernels`. Needs the bundle's
    # fallback parts (rental.sh part fNN) beside its core.
    Stage("cudnn", False, ("tf",), "ResNet-9 at Keras' default (XLA), one epoch then "
          f"{KERNEL_STEPS} profiled steps, on the machine's CUDA 13 cuDNN and on the "
          "bundle's own CUDA 12 cuDNN: each build's convolution kernels",
          cudnn_commands,
          lambda fw, ctx: (2 * (fixed_seconds(fw, "resnet9", ctx) + 50.0), "twice: a "
                           "process's fixed cost + XLA's compile (about 40 s on an H100) + "
                           "an epoch + the profiled steps"),
          tiny=False, timed=False, fallback_from=1,
          tiny_reason="--tiny: no cuDNN builds to set side by side on a CPU"),
    Stage("gpu-tests", False, FRAMEWORKS, "pytest -m gpu: each GPU claim of the README",
          test_commands, lambda fw, ctx: ((490.0, "on an H100: 11 of its 19 took 278 s, "
                                                  "the other 8 and one again 209 s")
                                          if fw == "tf" else
                                          (60.0, "its 14 took 45 s on an H100")),
          timed=False),
    Stage("suite", False, ("tf",), "pytest -n 2: the README's test command (the quick tier) "
          "on the GPU host, both frameworks in TensorFlow's environment",
          suite_commands, fixed_estimate(300.0, "the quick tier took 219 s on two cores "
                                                "(a 2-core Xeon, CI)"), tiny=False, timed=False,
          tiny_reason="--tiny: the test suite, which runs the tiny battery itself"),
    sweep_stage("cpu-vs-gpu", FRAMEWORKS, "the GPU's speed-up over this machine's CPU, "
                "the tutorial's recipe", ["device=cpu,gpu"], CPU_VS_GPU,
                tiny_varies=["device=cpu"],
                estimate=lambda fw, ctx: (
                    run_seconds(fw, CPU_VS_GPU, ctx)[0] + fixed_seconds(fw, "lenet", ctx)
                    + CPU_VS_GPU.epochs * ctx.train_images / CPU_VS_GPU.batch
                    * CPU_LENET_STEP_S,
                    f"the GPU run + the CPU run ({CPU_LENET_STEP_S * 1e3:.1f} ms a step on "
                    "the host, as PyTorch's on an H100 host's 16 cores)")),
    sweep_stage("cuda-graphs", ("torch",), "speed and losses against eager; the default",
                ["cuda-graphs=off,on"], Recipe("resnet9", "mixed", 512, 3, 1),
                tiny_varies=["cuda-graphs=off"]),  # a CPU refuses CUDA graphs
    sweep_stage("strategy", FRAMEWORKS, "each framework's wrapper (MirroredStrategy, DDP) "
                "against none on one GPU", ["strategy=none,mirrored"], SWEPT_LENET),
    sweep_stage("shared-chip", FRAMEWORKS, "the multi-device paths (MirroredStrategy over "
                "logical GPUs, DDP over gloo) on one GPU, their losses against one device",
                ["devices=1,2"], replace(SWEPT_LENET, batch=64), extra=("--share-device",)),
    sweep_stage("steps-per-call", FRAMEWORKS, "what a call per step costs on a GPU",
                ["steps-per-call=1,8,32"], SWEPT_LENET),
    Stage("tool-overhead", False, FRAMEWORKS, "benchmarks/tool_overhead.py: the shared loop "
          "against each framework's own loop (LeNet b32, ResNet-9 b512)",
          overhead_commands, overhead_estimate),
]


