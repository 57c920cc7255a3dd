"""Each battery stage's commands per framework: the argv lists a stage runs, for a GPU and
for --tiny, the plumbing rehearsal on a CPU (what it runs instead)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from benchmarks.battery.estimates import Context, Recipe

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from compare.cli import main; main()"]
FRAMEWORKS = ("torch", "tf")  # the plan's order: PyTorch can start before TensorFlow arrives
BOTH = "both"  # a stage that runs both frameworks in one command (a comparison, alternated)
STAGE_FRAMEWORKS = (*FRAMEWORKS, BOTH)
STAGE_LIMIT_S = 570  # every stage's time limit stays under a 10-minute command


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


def recipe_for(recipe: Recipe, ctx: Context) -> Recipe:
    """The recipe as this invocation runs it: a few steps on tiny data with --tiny."""
    if not ctx.tiny:
        if ctx.seeds is None:
            return recipe
        return replace(recipe, seeds=ctx.seeds)
    return replace(recipe, precision=TINY.precision(recipe.precision, ctx.device),
                   batch=min(recipe.batch, TINY.batch), epochs=TINY.epochs, seeds=TINY.seeds)


def compare_commands(name: str, recipe: Recipe, own_loops: bool = False,
                     extra: tuple[str, ...] = ()) -> Callable[[str, Context], list[list[str]]]:
    """PyTorch's part of the comparison, or (its directory already there) TensorFlow's: the
    rest of it (`compare --resume`: the parity check, TensorFlow's seeds, the report); for
    BOTH, the whole comparison in one command, its seeds alternated between the frameworks;
    `extra`: more options of the comparison (--compile)."""
    def commands(framework: str, ctx: Context) -> list[list[str]]:
        out = ctx.out / name
        if (out / "compare.json").exists():  # everything not yet done, parity check included
            return [[*CLI, "compare", "--resume", str(out), "--quiet"]]
        r = recipe_for(recipe, ctx)
        # Own loops double a comparison's GPU time: a stage asks for them where it can
        # afford them; the tool-overhead stage measures them apart.
        chosen = [] if framework == BOTH else ["--framework", framework]
        return [[*CLI, "compare", *chosen, *r.options(), *extra, "--seeds", str(r.seeds),
                 "--device", ctx.device, "--ignore-parity",
                 "--own-loops" if own_loops else "--no-own-loops", *ctx.data, "--quiet",
                 "--out", str(out)]]
    return commands


REFERENCE_RUNS = 5  # airbench94 trainings after its warm-up (about 4 s each on an A100)


def reference_commands(framework: str, ctx: Context) -> list[list[str]]:
    return [[sys.executable, "-m", "benchmarks.reference_trainer", *ctx.data, "--runs",
             str(REFERENCE_RUNS), "--out", str(ctx.out / "reference")]]


def run_commands(name: str, recipe: Recipe, extra: tuple[str, ...] = ()
                 ) -> Callable[[str, Context], list[list[str]]]:
    """One `cnncompare run` of the recipe per seed, with `extra` options."""
    def commands(framework: str, ctx: Context) -> list[list[str]]:
        r = recipe_for(recipe, ctx)
        data = TINY.data() if ctx.tiny else ctx.data
        return [[*CLI, "run", "--framework", framework, *r.options(), *extra, "--seed",
                 str(seed), "--device", ctx.device, *data, "--quiet", "--out",
                 str(ctx.out / name / f"{framework}-seed{seed}")] for seed in range(r.seeds)]
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


COMMIT_ENV = "BATTERY_COMMIT"  # the checkout's commit, where its copy has no .git (a rental's)


def _git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=30, check=False)
        changed = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain",
                                  "--untracked-files=no"], cwd=REPO, capture_output=True,
                                 text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0 or changed.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if changed.stdout.strip() else "")


def checkout_commit() -> str | None:
    """The commit the checkout is at, as battery.json and each GPU-test report record it:
    BATTERY_COMMIT where given (a rental's copy of the checkout has no .git: the plan's calls
    and `rental.sh start` pass it), else git's short hash, '-dirty' where tracked files differ
    from it; None where neither tells."""
    return os.environ.get(COMMIT_ENV, "").strip() or _git_commit()


def gpu_test_report(framework: str) -> str:
    """The JUnit XML report of a framework's GPU tests, in the battery's --out (packed, and
    in each rental call's live.tar.gz): every test named with its outcome."""
    return f"pytest-gpu-{framework}.xml"


def test_commands(framework: str, ctx: Context) -> list[list[str]]:
    # GPU tests are named test_torch_*, test_tf_* or test_both_* (tests/test_gpu.py and
    # tests/test_gpu_features.py)
    chosen = "test_torch_" if framework == "torch" else "test_tf_ or test_both_"
    if ctx.tests:
        chosen = f"({chosen}) and ({' or '.join(ctx.tests)})"
    # -v: each test's outcome on a line of its own as it ends, so a stage cut by its limit
    # still says which tests passed and which failed (summary_of_tests); the report names
    # each test, its suite the framework and the commit the tests ran at (docs/gpu.md's
    # record of the GPU tests is read from these reports)
    return [[sys.executable, "-m", "pytest", "-m", "gpu", "-k", chosen, "-v", "-rs",
             "-p", "no:cacheprovider", "--junitxml", str(ctx.out / gpu_test_report(framework)),
             "-o", f"junit_suite_name=gpu-tests-{framework}@{checkout_commit() or 'unknown'}"]]


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


def prime_commands(framework: str, ctx: Context) -> list[list[str]]:
    """One eager epoch of ResNet-9 on the stage's data, untimed: its images decoded into
    cnncompare's data cache, which every later run of either framework reads (the first
    decodes them while the bundle arrives; a timed comparison would otherwise). No compiler
    runs, and the run's compile caches are its own, removed after it (--compile-cache cold):
    it warms no framework's compile cache for a later comparison."""
    return [[*CLI, "run", "--framework", framework, "--model", "resnet9", "--precision",
             "mixed", "--batch-size", "512", "--epochs", "1", *ctx.data, "--profile", "0",
             "--no-compile", "--compile-cache", "cold", "--device", ctx.device, "--quiet",
             "--out", str(ctx.out / "prime" / framework)]]


KERNEL_STEPS = 32  # steps profiled for the kernel table, as a comparison's first seed's


def kernels_commands(framework: str, ctx: Context) -> list[list[str]]:
    """One epoch of ResNet-9 eager (PyTorch's default; TensorFlow/Keras without XLA), then
    KERNEL_STEPS steps under the framework's profiler: the GPU's kernels by kind and name in
    result.json's profile (each comparison's profile gives the compiled runs' own)."""
    return [[*CLI, "run", "--framework", framework, "--model", "resnet9", "--precision",
             "mixed", "--batch-size", "512", "--epochs", "1", *ctx.data, "--profile",
             str(KERNEL_STEPS), "--device", ctx.device, "--quiet",
             "--out", str(ctx.out / "kernels" / framework)]]


def batchnorm_commands(framework: str, ctx: Context) -> list[list[str]]:
    """BatchNorm alone on ResNet-9's shapes, each of the framework's variants
    (benchmarks/batchnorm.py)."""
    return [[sys.executable, "-m", "benchmarks.batchnorm", "--framework", framework,
             "--device", ctx.device, *(["--tiny"] if ctx.tiny else []),
             "--out", str(ctx.out / "batchnorm")]]


CUDNN_BUILDS = ("machine", "fallback")  # the machine's CUDA 13 cuDNN, the bundle's CUDA 12 one


def cudnn_commands(framework: str, ctx: Context) -> list[list[str]]:
    """ResNet-9 at Keras' default (XLA), one epoch then KERNEL_STEPS profiled steps, once per
    cuDNN build (CUDNN_BUILDS, in order; the battery runs the second on the bundle's fallback
    cuDNN): the convolutions' kernel times on each, on the device's clock."""
    return [[*CLI, "run", "--framework", framework, "--model", "resnet9", "--precision",
             "mixed", "--batch-size", "512", "--epochs", "1", "--compile", *ctx.data,
             "--profile", str(KERNEL_STEPS), "--device", ctx.device, "--quiet",
             "--out", str(ctx.out / "cudnn" / build)] for build in CUDNN_BUILDS]


def shown(arg: str) -> str:
    if arg == sys.executable:
        return "python"
    return arg if arg and " " not in arg and ";" not in arg else json.dumps(arg)
