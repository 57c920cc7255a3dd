"""The battery's stages: each one's commands per framework, its time estimate (a run's, from
estimates.py) and limits; what --tiny runs instead."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from benchmarks.battery.estimates import (
    MEASURED_PARITY_S,
    Context,
    Recipe,
    fixed_seconds,
    run_seconds,
)

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from compare.cli import main; main()"]
FRAMEWORKS = ("torch", "tf")  # the plan's order: PyTorch can start before TensorFlow arrives
CALIBRATION = REPO / "benchmarks" / "gpu_battery_calibration.json"
STAGE_LIMIT_S = 570  # every stage's time limit stays under a 10-minute command
SPARE_S = 60  # of --time-left, kept for packing and the command's own end
# A rental: 15 minutes of device time, the machine's start (about 30 s, measured on an H200)
# and the last call's return included; TensorFlow's bundle arrives while PyTorch trains
# (benchmarks/battery/rental.sh), so the transfers cost no GPU time.
RENTAL_S = 14 * 60  # a rental's GPU time for stages
RENTAL_CORE_S = RENTAL_S  # the core stages come first, over as many rentals as they need
PACK_FILES = 8  # files that come back from one command
PACK_TAR_BYTES = 15 * 2**20  # one file that comes back: at most 16 MiB


@dataclass(frozen=True)
class TinyWork:
    """What --tiny runs: every stage's plumbing on work small enough to finish on any CPU.
    On a CPU "mixed" is bfloat16, which a CPU without bfloat16 instructions emulates at many
    times float32's step time (ResNet-9: 10-20x, benchmarks/results/cpu-epyc-2core/
    precision-resnet9-as-avx2.md), so tiny runs on a CPU
    train in float32 (the mixed-precision code paths have tests of their own); and the
    limits are the longest a stage may take, since the estimates are a GPU's."""

    images: int = 128  # synthetic training images (4 steps of 32)
    batch: int = 32
    epochs: int = 1
    seeds: int = 1

    def precision(self, precision: str, device: str) -> str:
        return "fp32" if device == "cpu" else precision

    def data(self) -> list[str]:
        return ["--dataset", "synthetic", "--synthetic-size", str(self.images)]

    def described(self, device: str) -> dict:
        """battery.json's record of the choice."""
        return {"images": self.images, "batch": self.batch, "epochs": self.epochs,
                "seeds": self.seeds, "limit_s": STAGE_LIMIT_S,
                "precision": ("fp32 for every stage: a CPU without bfloat16 instructions "
                              "emulates mixed (bfloat16) many times slower"
                              if device == "cpu" else "as each stage says")}


TINY = TinyWork()
TINY_SKIPPED = ("--tiny: the commands of resnet9-mixed on a bigger network or a longer schedule "
                "(minutes of a CPU); each network is tested in tests/test_networks.py and "
                "tests/test_parity.py")


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
        if framework == "tf" and ctx.device == "gpu":  # its runs at Keras' default too (XLA)
            total += seeds * one
            note += f" + {seeds} seed(s) at Keras' default (XLA), as long"
        if framework == "tf" and ctx.device == "gpu" and recipe.model in MEASURED_PARITY_S:
            total += MEASURED_PARITY_S[recipe.model]
            note += f" + {MEASURED_PARITY_S[recipe.model]:.0f} s parity check (measured)"
        elif framework == "tf":  # the parity check runs with the second framework
            probes = 4 + (3 if recipe.precision != "fp32" else 0)
            total += probes * fixed_seconds("tf", recipe.model, ctx)
            note += f" + {probes} parity probes x the fixed cost"
        return total, note
    return estimate


def fixed_estimate(seconds: float, how: str) -> Callable[[str, Context], tuple[float, str]]:
    return lambda framework, ctx: (seconds, how)


# --------------------------------------------------------------------------- commands

def recipe_for(recipe: Recipe, ctx: Context) -> Recipe:
    """The recipe as this invocation runs it: a few steps on tiny data with --tiny."""
    if not ctx.tiny:
        if ctx.seeds is None:
            return recipe
        return Recipe(recipe.model, recipe.precision, recipe.batch, recipe.epochs, ctx.seeds,
                      recipe.lr, recipe.target)
    return Recipe(recipe.model, TINY.precision(recipe.precision, ctx.device),
                  min(recipe.batch, TINY.batch), TINY.epochs, TINY.seeds, recipe.lr,
                  recipe.target)


def compare_commands(name: str, recipe: Recipe) -> Callable[[str, Context], list[list[str]]]:
    """PyTorch's part of the comparison, or (its directory already there) TensorFlow's: the
    rest of it (`compare --resume`: the parity check, TensorFlow's seeds, the report)."""
    def commands(framework: str, ctx: Context) -> list[list[str]]:
        out = ctx.out / name
        if (out / "compare.json").exists():  # everything not yet done, parity check included
            return [[*CLI, "compare", "--resume", str(out), "--quiet"]]
        r = recipe_for(recipe, ctx)
        # Own loops would double each comparison's GPU time; the tool-overhead stage measures
        # the shared loop against them on the GPU instead.
        return [[*CLI, "compare", "--framework", framework, *r.options(), "--seeds",
                 str(r.seeds), "--device", ctx.device, "--ignore-parity", "--no-own-loops",
                 *ctx.data, "--quiet", "--out", str(out)]]
    return commands


# TensorFlow's first GPU op, before anything long: a float16 3x3 convolution (cuDNN; a 1x1 one
# may go to cuBLAS and prove nothing about cuDNN) forward and gradient, on the device.
# The loss is a mean, so its gradient stays far inside float16's range (a sum of squares over
# 131,072 outputs overflowed it on an AVX2 CPU, whose kernels accumulate in float16).
SMOKE = """import json, sys
import tensorflow as tf
tf.random.set_seed(0)
with tf.device(sys.argv[1]):
    x = tf.random.normal((8, 32, 32, 16), dtype=tf.float16)
    w = tf.Variable(tf.random.normal((3, 3, 16, 16), dtype=tf.float16))
    with tf.GradientTape() as tape:
        y = tf.nn.conv2d(x, w, 1, "SAME")
        loss = tf.reduce_mean(tf.cast(y, tf.float32) ** 2)
    grad = tape.gradient(loss, w)
print(json.dumps({"device": y.device, "gpus": len(tf.config.list_physical_devices("GPU")),
                  "finite": bool(tf.reduce_all(tf.math.is_finite(grad)))}))
on_device = sys.argv[1].strip("/").lower() in y.device.lower()
sys.exit(0 if on_device and bool(tf.reduce_all(tf.math.is_finite(grad))) else 1)
"""


def smoke_commands(framework: str, ctx: Context) -> list[list[str]]:
    from compare.process import runner
    device = "/GPU:0" if ctx.device == "gpu" else "/CPU:0"
    return [[runner.python_for("tf"), "-c", SMOKE, device]]


def doctor_commands(framework: str, ctx: Context) -> list[list[str]]:
    return [[*CLI, "doctor", "--json", "--framework", framework, "--device", ctx.device]]


def test_commands(framework: str, ctx: Context) -> list[list[str]]:
    # GPU tests are named test_torch_*, test_tf_* or test_both_* (tests/test_gpu.py and
    # tests/test_gpu_features.py)
    chosen = "test_torch_" if framework == "torch" else "test_tf_ or test_both_"
    if ctx.tests:
        chosen = f"({chosen}) and ({' or '.join(ctx.tests)})"
    # -v: each test's outcome on a line of its own as it ends, so a stage cut by its limit
    # still says which tests passed and which failed (summary_of_tests)
    return [[sys.executable, "-m", "pytest", "-m", "gpu", "-k", chosen, "-v", "-rs",
             "-p", "no:cacheprovider", "--junitxml", str(ctx.out / f"pytest-gpu-{framework}.xml")]]


def suite_commands(framework: str, ctx: Context) -> list[list[str]]:
    # The README's test command on the GPU host, as a user there runs it: the quick tier on
    # two workers, in TensorFlow's environment, which holds PyTorch too. Its non-GPU tests
    # must pass there seeing no GPU (tests/conftest.py hides it from each).
    return [[sys.executable, "-m", "pytest", "-n", "2", "-rs", "-p", "no:cacheprovider",
             "--junitxml", str(ctx.out / "pytest-suite.xml")]]


def sweep_commands(name: str, varies: list[str], recipe: Recipe, extra: tuple[str, ...] = (),
                   tiny_varies: list[str] | None = None) -> Callable[[str, Context], list]:
    """`cnncompare sweep` of the recipe (its model, precision, batch, epochs and learning
    rate, each passed: a network's own defaults would run another schedule than the stage
    says and its estimate assumes) with `extra` options, one framework at a time."""
    def commands(framework: str, ctx: Context) -> list[list[str]]:
        chosen = tiny_varies if ctx.tiny and tiny_varies is not None else varies
        run = recipe if not ctx.tiny else replace(
            recipe, precision=TINY.precision(recipe.precision, ctx.device),
            batch=min(recipe.batch, TINY.batch), epochs=TINY.epochs)
        device = [] if any(v.startswith("device=") for v in chosen) else ["--device", ctx.device]
        return [[*CLI, "sweep", "--framework", framework, *run.options(), *extra, *device,
                 *[x for v in chosen for x in ("--vary", v)], *ctx.data, "--quiet",
                 "--out", str(ctx.out / name / framework)]]
    return commands


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


# The shared loop against each framework's own on a GPU: LeNet at batch 32 and ResNet-9 at
# 512. LeNet at batch 4 is host-bound at 2-3 ms a step on an H200 (estimates.MEASURED): its four
# runs of 3 epochs alone would fill a 10-minute command; the CPU results measure it.
OVERHEAD_CONFIGS = (("lenet", 32), ("resnet9", 512))


def overhead_commands(framework: str, ctx: Context) -> list[list[str]]:
    configs = f"lenet:{TINY.batch}" if ctx.tiny else ",".join(
        f"{model}:{batch}" for model, batch in OVERHEAD_CONFIGS)
    data = TINY.data() if ctx.tiny else ctx.data
    return [[sys.executable, "-m", "benchmarks.tool_overhead", "--frameworks",
             framework, "--configs", configs, "--repeats", "1" if ctx.tiny else "2",
             "--epochs", "2" if ctx.tiny else "3", f"--option=--device={ctx.device}", *data,
             "--out", str(ctx.out / "tool-overhead" / framework)]]


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


STAGES: list[Stage] = [
    Stage("tf-smoke", True, ("tf",), "TensorFlow's first GPU op, before anything long: a "
          "float16 3x3 convolution forward and gradient (cuDNN)", smoke_commands,
          lambda fw, ctx: (fixed_seconds(fw, "lenet", ctx), "one process's fixed cost"),
          json_out=True),
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
    # 8 epochs: TensorFlow's part, eager and at Keras' default (XLA), within one command
    *[Stage(f"{model}-mixed", False, FRAMEWORKS, f"{title} (pytorch-cifar), mixed "
            f"precision, its recipe on a short schedule ({recipe.epochs} epochs, batch "
            f"{recipe.batch}), 1 seed", compare_commands(f"{model}-mixed", recipe),
            comparison_estimate(recipe), comparison=True, tiny=False)
      for model, title in (("resnet18", "ResNet-18"), ("mobilenetv2", "MobileNetV2"))
      for recipe in [Recipe(model, "mixed", 128, 8, 1)]],
    Stage("gpu-tests", False, FRAMEWORKS, "pytest -m gpu: each GPU claim of the README",
          test_commands, lambda fw, ctx: ((490.0, "on an H100: 11 of its 19 took 278 s, "
                                                  "the other 8 and one again 209 s")
                                          if fw == "tf" else
                                          (60.0, "its 14 took 45 s on an H100"))),
    Stage("suite", False, ("tf",), "pytest -n 2: the README's test command (the quick tier) "
          "on the GPU host, both frameworks in TensorFlow's environment",
          suite_commands, fixed_estimate(300.0, "the quick tier took 219 s on two cores "
                                                "(a 2-core Xeon, CI)"), tiny=False,
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


def shown(arg: str) -> str:
    if arg == sys.executable:
        return "python"
    return arg if arg and " " not in arg and ";" not in arg else json.dumps(arg)
