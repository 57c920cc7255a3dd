"""The GPU battery: everything the product measures on a GPU, in stages sized for a short rental.

A GPU rental here is short: about 30 minutes of GPU time, commands of at most 10 minutes, a
few files copied back per command, and TensorFlow arriving in parts while PyTorch is there
from the start. So the battery is a list of stages, each run for one framework at a time
(PyTorch's core stages first, then TensorFlow's, then the sweeps), each under its own time
limit, each rewriting the summary when it ends:

    python benchmarks/gpu_battery.py --plan                  # the stages, limits, estimates
    python benchmarks/gpu_battery.py --framework torch --stage doctor --stage lenet-fp32 \\
        --dataset folder --data-dir /tmp/cifar10-jpeg --out /tmp/battery --pack "$OUT"
    python benchmarks/gpu_battery.py --device cpu --tiny --out /tmp/b --pack /tmp/p  # plumbing

Stages: `tf-smoke` (TensorFlow's first GPU op: a float16 3x3 convolution forward and
gradient); `doctor`; `gpu-tests` (pytest -m gpu); the core comparisons `lenet-fp32`,
`lenet-mixed` (the PyTorch tutorial's recipe: batch 4, lr 0.001, 2 epochs), `resnet9-mixed`
and `resnet9-fp32` (the DAWNBench recipe, 24 epochs, --target-accuracy 0.94); then
`cpu-vs-gpu` (sweep --vary device=cpu,gpu), `tool-overhead` (benchmarks/tool_overhead.py) and
the open GPU questions as short sweeps: `cuda-graphs` (PyTorch), `strategy` (each framework's
distribution wrapper against none on one GPU) and `steps-per-call`. A comparison's
frameworks may run in different commands: PyTorch's stage runs `compare --framework torch`,
TensorFlow's then `compare --resume` in the same directory (the parity check, TensorFlow's
seeds, the report of both). The battery passes
--ignore-parity: a float32 parity failure on the GPU (tolerances were set on CPU; cuDNN
picks other algorithms) is recorded and shown in the report, and the timings stay.

Each stage's output is streamed to OUT/logs/<stage>-<framework>.log while it runs, so a stage
cut by a time limit leaves what it did. OUT/battery.json and OUT/battery.md are rewritten
after every stage; `--pack DIR` then also leaves at most 8 files directly in DIR: the battery
summary (json, md), one `cnncompare report` over all its comparisons (summary.json or
combined.json, report.md, report.html) and one tar.gz of the logs and results (no model
files, checkpoints or traces).

Estimates (GPU seconds on one H100 SXM) are made from FLOPs and CPU runs: the fixed cost of a
training process (start-up, imports, building, the first call's tracing) measured on this
project's CPU (`--calibrate` measures it again and writes benchmarks/gpu_battery_calibration.json),
plus per epoch the larger of the compute time (analytic training FLOPs x images / the H100's
dense peak x an assumed utilisation) and the host time (steps x an assumed host cost per
step), plus the evaluation. The assumptions are named in each stage's `how`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compare.experiment import specs  # noqa: E402
from compare.machine import gpu_metrics  # noqa: E402

STARTED = time.perf_counter()  # --time-left counts from here: imports and setup included
CLI = [sys.executable, "-c", "from compare.cli import main; main()"]
FRAMEWORKS = ("torch", "tf")  # the plan's order: PyTorch can start before TensorFlow arrives
CALIBRATION = Path(__file__).with_name("gpu_battery_calibration.json")
STAGE_LIMIT_S = 570  # every stage's time limit stays under a 10-minute command
SPARE_S = 60  # of --time-left, kept for packing and the command's own end
RENTAL_CORE_S = 25 * 60  # the core stages fit this much of one rental's GPU time
RENTAL_S = 27 * 60  # a rental's GPU time left after the machine's start and the transfers
PACK_FILES = 8  # files that come back from one command
PACK_TAR_BYTES = 15 * 2**20  # one file that comes back: at most 16 MiB
# What the estimate assumes where no CPU run can tell: the share of the H100's dense peak a
# CIFAR-10 network reaches (small convolutions keep tensor cores far from full), and the
# host's cost of one training step on a GPU (PyTorch: each step's kernel launches from
# Python, ~5 us each; TensorFlow: the step's ops inside one graph call of 32 steps).
ASSUMED_UTILISATION = {"fp16": 0.25, "fp32": 0.5}
ASSUMED_HOST_STEP_MS = {("torch", "lenet"): 0.4, ("torch", "resnet9"): 0.9,
                        ("tf", "lenet"): 0.25, ("tf", "resnet9"): 0.5}
CUDA_START_S = 5.0  # assumed on top of the CPU's fixed cost: CUDA context, cuDNN, autotuning
CIFAR10 = (50_000, 10_000)  # training and test images


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

    def options(self) -> list[str]:
        out = ["--model", self.model, "--precision", self.precision, "--batch-size",
               str(self.batch), "--epochs", str(self.epochs)]
        if self.lr is not None:
            out += ["--lr", str(self.lr)]
        if self.target is not None:
            out += ["--target-accuracy", str(self.target)]
        return out


# The PyTorch CIFAR-10 tutorial's recipe (the seed's Net) and the DAWNBench ResNet-9's, whose
# 24 epochs are what its 94% needs.
LENET = dict(model="lenet", batch=4, epochs=2, lr=0.001, seeds=2)
RESNET9 = dict(model="resnet9", batch=512, epochs=24, target=0.94)


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


# --------------------------------------------------------------------------- estimates

def run_seconds(framework: str, recipe: Recipe, ctx: Context, epochs: int | None = None,
                train_images: int | None = None) -> tuple[float, str]:
    """One training process: (GPU seconds on an H100 SXM, how that was estimated)."""
    spec = specs.get_spec(recipe.model)
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


def fixed_seconds(framework: str, model: str, ctx: Context) -> float:
    """A training process's cost outside its epochs: the CPU's measured start-up (import,
    build, the first call's tracing), plus the CUDA start assumed on a GPU."""
    measured = ctx.calibration.get("fixed_s", {}).get(f"{framework}/{model}", 6.0)
    return measured + (CUDA_START_S if ctx.device == "gpu" else 0.0)


def comparison_estimate(recipe: Recipe) -> Callable[[str, Context], tuple[float, str]]:
    def estimate(framework: str, ctx: Context) -> tuple[float, str]:
        one, how = run_seconds(framework, recipe, ctx)
        total, note = recipe.seeds * one, f"{recipe.seeds} seed(s) x [{how}]"
        if framework == "tf":  # the parity check runs with the second framework
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
        return recipe
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
SMOKE = """import json, sys
import tensorflow as tf
with tf.device(sys.argv[1]):
    x = tf.random.normal((8, 32, 32, 16), dtype=tf.float16)
    w = tf.Variable(tf.random.normal((3, 3, 16, 16), dtype=tf.float16))
    with tf.GradientTape() as tape:
        y = tf.nn.conv2d(x, w, 1, "SAME")
        loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
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
    return [[*CLI, "doctor", "--json", "--framework", framework]]


def test_commands(framework: str, ctx: Context) -> list[list[str]]:
    # GPU tests are named test_torch_*, test_tf_* or test_both_* (tests/test_gpu.py)
    chosen = "test_torch_" if framework == "torch" else "test_tf_ or test_both_"
    return [[sys.executable, "-m", "pytest", "-m", "gpu", "-k", chosen, "-q", "-rs",
             "-p", "no:cacheprovider", "--junitxml", str(ctx.out / f"pytest-gpu-{framework}.xml")]]


def sweep_commands(name: str, varies: list[str], options: list[str],
                   tiny_varies: list[str] | None = None) -> Callable[[str, Context], list]:
    def commands(framework: str, ctx: Context) -> list[list[str]]:
        chosen = tiny_varies if ctx.tiny and tiny_varies is not None else varies
        shown = list(options)
        if ctx.tiny:
            at = shown.index("--precision") + 1
            shown[at] = TINY.precision(shown[at], ctx.device)
        epochs = ["--epochs", str(TINY.epochs)] if ctx.tiny else []
        batch = ["--batch-size", str(TINY.batch)] if ctx.tiny and "resnet9" in options else []
        device = [] if any(v.startswith("device=") for v in chosen) else ["--device", ctx.device]
        return [[*CLI, "sweep", "--framework", framework, *shown, *epochs, *batch, *device,
                 *[x for v in chosen for x in ("--vary", v)], *ctx.data, "--quiet",
                 "--out", str(ctx.out / name / framework)]]
    return commands


def overhead_commands(framework: str, ctx: Context) -> list[list[str]]:
    configs = f"lenet:{TINY.batch}" if ctx.tiny else "lenet:4,lenet:32,resnet9:512"
    data = TINY.data() if ctx.tiny else ctx.data
    return [[sys.executable, str(REPO / "benchmarks" / "tool_overhead.py"), "--frameworks",
             framework, "--configs", configs, "--repeats", "1" if ctx.tiny else "2",
             "--epochs", "2" if ctx.tiny else "3", f"--option=--device={ctx.device}", *data,
             "--out", str(ctx.out / "tool-overhead" / framework)]]


def sweep_estimate(runs: int, recipe: Recipe, epochs: int,
                   train_images: int | None = None) -> Callable[[str, Context], tuple]:
    def estimate(framework: str, ctx: Context) -> tuple[float, str]:
        one, how = run_seconds(framework, recipe, ctx, epochs, train_images)
        return runs * one, f"{runs} runs x [{how}]"
    return estimate


def overhead_estimate(framework: str, ctx: Context) -> tuple[float, str]:
    total, parts = 0.0, []
    for model, batch in (("lenet", 4), ("lenet", 32), ("resnet9", 512)):
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
            comparison_estimate(recipe), comparison=True)
      for p in ("fp32", "mixed") for recipe in [Recipe(precision=p, **LENET)]],
    Stage("resnet9-mixed", True, FRAMEWORKS, "ResNet-9 (DAWNBench), mixed precision, 24 "
          "epochs, time to 94%, 2 seeds",
          compare_commands("resnet9-mixed", Recipe(precision="mixed", seeds=2, **RESNET9)),
          comparison_estimate(Recipe(precision="mixed", seeds=2, **RESNET9)), comparison=True),
    Stage("resnet9-fp32", True, FRAMEWORKS, "ResNet-9 (DAWNBench), float32 (TF32 off), 24 "
          "epochs, time to 94%, 1 seed",
          compare_commands("resnet9-fp32", Recipe(precision="fp32", seeds=1, **RESNET9)),
          comparison_estimate(Recipe(precision="fp32", seeds=1, **RESNET9)), comparison=True),
    Stage("gpu-tests", False, FRAMEWORKS, "pytest -m gpu: each GPU claim of the README",
          test_commands, lambda fw, ctx: ((240.0 if fw == "tf" else 180.0),
                                          "the GPU tests' runs and processes, counted by hand")),
    Stage("cpu-vs-gpu", False, FRAMEWORKS, "sweep --vary device=cpu,gpu: LeNet (the "
          "tutorial's recipe), 1 epoch, the GPU's speed-up over this machine's CPU",
          sweep_commands("cpu-vs-gpu", ["device=cpu,gpu"],
                         ["--model", "lenet", "--batch-size", "4", "--lr", "0.001",
                          "--precision", "fp32"], tiny_varies=["device=cpu"]),
          lambda fw, ctx: (2 * run_seconds(fw, Recipe("lenet", "fp32", 4, 1, 1), ctx)[0]
                           + 1.0 * ctx.train_images / 4 * 1.5e-3,
                           "the GPU run + the CPU run (1.5 ms a step on the host, assumed)")),
    Stage("cuda-graphs", False, ("torch",), "sweep --vary cuda-graphs=off,on: ResNet-9 "
          "(mixed, 3 epochs): speed and losses against eager; the default",
          sweep_commands("cuda-graphs", ["cuda-graphs=off,on"],
                         ["--model", "resnet9", "--precision", "mixed"],
                         tiny_varies=["cuda-graphs=off"]),  # a CPU refuses CUDA graphs
          sweep_estimate(2, Recipe("resnet9", "mixed", 512, 3, 1), 3)),
    Stage("strategy", False, FRAMEWORKS, "sweep --vary strategy=none,mirrored: each "
          "framework's wrapper (MirroredStrategy, DDP) against none on one GPU (LeNet, batch "
          "32, 3 epochs)",
          sweep_commands("strategy", ["strategy=none,mirrored"],
                         ["--model", "lenet", "--batch-size", "32", "--precision", "mixed"]),
          sweep_estimate(2, Recipe("lenet", "mixed", 32, 3, 1), 3)),
    Stage("steps-per-call", False, FRAMEWORKS, "sweep --vary steps-per-call=1,8,32 (LeNet, "
          "batch 32, 3 epochs): what a call per step costs on a GPU",
          sweep_commands("steps-per-call", ["steps-per-call=1,8,32"],
                         ["--model", "lenet", "--batch-size", "32", "--precision", "mixed"]),
          sweep_estimate(3, Recipe("lenet", "mixed", 32, 3, 1), 3)),
    Stage("tool-overhead", False, FRAMEWORKS, "benchmarks/tool_overhead.py: the shared loop "
          "against each framework's own loop (LeNet b4 and b32, ResNet-9 b512)",
          overhead_commands, overhead_estimate),
]


# --------------------------------------------------------------------------- the plan

def plan(stages: list[Stage], frameworks: tuple[str, ...], ctx: Context) -> list[dict]:
    """Every (stage, framework) to run, in order: PyTorch's core stages, TensorFlow's, then
    the rest (PyTorch's, then TensorFlow's); each with its command, limit, estimate and the
    rental it fits in."""
    rows = []
    order = ([(s, fw) for fw in FRAMEWORKS for s in stages if s.core and fw in s.frameworks]
             + [(s, fw) for fw in FRAMEWORKS for s in stages if not s.core
                and fw in s.frameworks])
    used, rental = 0.0, 1
    for stage, framework in order:
        if framework not in frameworks:
            continue
        seconds, how = stage.estimate(framework, ctx)
        limit = (STAGE_LIMIT_S if ctx.tiny
                 else min(STAGE_LIMIT_S, max(120, math.ceil(2 * seconds / 30) * 30)))
        capacity = RENTAL_CORE_S if stage.core and rental == 1 else RENTAL_S
        if used + seconds > capacity:  # the next rental
            rental, used = rental + 1, 0.0
        used += seconds
        rows.append({"stage": stage.name, "framework": framework, "core": stage.core,
                     "what": stage.what, "limit_s": limit, "estimate_s": round(seconds),
                     "estimated_how": how, "rental": rental,
                     "commands": [" ".join(_shown(a) for a in argv)
                                  for argv in stage.commands(framework, ctx)]})
    return rows


CALL_S = 540  # estimated seconds packed into one device command (10 minutes at most)


def device_calls(rows: list[dict], options: list[str]) -> list[dict]:
    """The plan's rows packed, in order, into device commands of at most CALL_S estimated
    seconds, each a `--stage ... --framework ...` invocation (a new command where the
    framework or the rental changes) with this invocation's data options."""
    calls: list[dict] = []
    for row in rows:
        last = calls[-1] if calls else None
        if (last is None or last["framework"] != row["framework"]
                or last["rental"] != row["rental"]
                or last["estimate_s"] + row["estimate_s"] > CALL_S):
            last = {"framework": row["framework"], "rental": row["rental"], "stages": [],
                    "estimate_s": 0}
            calls.append(last)
        last["stages"].append(row["stage"])
        last["estimate_s"] += row["estimate_s"]
    for call in calls:
        call["command"] = ("python benchmarks/gpu_battery.py --framework " + call["framework"]
                           + "".join(f" --stage {s}" for s in call["stages"])
                           + "".join(f" {_shown(o)}" for o in options)
                           + f" --time-left {STAGE_LIMIT_S} --out /tmp/battery --pack \"$OUT\"")
    return calls


CALL_CHARS = 2000  # one device command's length
CARRY_BYTES = 64 * 2**20  # what one device command may carry from the checkout


def rental_calls(calls: list[dict], root: Path, bundle: Path | None, data: Path | None,
                 scratch: str = "/tmp") -> list[dict]:
    """The device calls as a rental without a package index runs them, back to back, each one
    bash line (`bash`, of which `setup` comes first) with the checkout paths it carries
    (`carry`, relative to `root`, at most CARRY_BYTES): the first call carries the data and
    unpacks it under `scratch`; the next ones each carry one part of TensorFlow's bundle
    (`bundle`: c00/c.00, c01/c.01, ... and SHA256SUMS), check it and append it to one file
    while a PyTorch stage runs (calls that only carry where PyTorch has no stage left); the
    first TensorFlow call unpacks the bundle and activates it."""
    data_options: list[str] = []
    out = [dict(call, setup=[], carry=[]) for call in calls]
    if data is not None:
        on_device = f"{scratch}/cnncompare-data"
        if data.name == "cifar-10-python.tar.gz":  # the official archive: read as it is
            unpack = f"mkdir -p {on_device} && cp {data.relative_to(root)} {on_device}/"
            data_options = ["--dataset", "cifar10", "--data-dir", f"{on_device}/{data.name}"]
        else:  # an image folder (train/ and test/), archived
            unpack = f"mkdir -p {on_device} && tar xzf {data.relative_to(root)} -C {on_device}"
            data_options = ["--dataset", "folder", "--data-dir", on_device]
        out[0]["setup"].append(unpack)
        out[0]["carry"].append(str(data.relative_to(root)))
    parts = sorted(bundle.glob("c[0-9][0-9]")) if bundle is not None else []
    first_tf = next((i for i, c in enumerate(out) if c["framework"] == "tf"), len(out))
    slots = list(range(1 if data is not None else 0, first_tf))
    while len(slots) < len(parts):  # carry-only calls before TensorFlow's first
        out.insert(first_tf, {"framework": "torch", "rental": out[first_tf - 1]["rental"],
                              "stages": [], "estimate_s": 0, "setup": [], "carry": []})
        slots.append(first_tf)
        first_tf += 1
    archive = f"{scratch}/tf-bundle.tar.xz"
    for part, slot in zip(parts, slots):
        name = f"{part.name}/{part.name[0]}.{part.name[1:]}"
        folder = bundle.relative_to(root)
        out[slot]["setup"].append(
            f"(cd {folder} && grep ' {name}$' SHA256SUMS | sha256sum -c --quiet -) && "
            f"cat {folder}/{name} >> {archive}")
        out[slot]["carry"] += [str(folder / part.name), str(folder / "SHA256SUMS")]
    if parts and first_tf < len(out):
        out[first_tf]["setup"].append(f"mkdir -p {scratch}/tfgpu && tar xJf {archive} -C "
                                      f"{scratch}/tfgpu && source {scratch}/tfgpu/site/activate.sh")
    for call in out:
        run = (("PYTHONPATH=. python benchmarks/gpu_battery.py --framework " + call["framework"]
                + "".join(f" --stage {s}" for s in call["stages"])
                + "".join(f" {_shown(o)}" for o in data_options)
                + f" --time-left {STAGE_LIMIT_S} --out {scratch}/battery --pack \"$OUT\"")
               if call["stages"] else "true")
        call["setup"] = " && ".join(call["setup"])
        call["bash"] = " && ".join(x for x in (call["setup"], run) if x)
        call["carry"] = sorted(set(call["carry"]))
        call["carry_bytes"] = sum(f.stat().st_size for c in call["carry"]
                                  for f in ([root / c] if (root / c).is_file()
                                            else (root / c).rglob("*")) if f.is_file())
        if len(call["bash"]) > CALL_CHARS or call["carry_bytes"] > CARRY_BYTES:
            raise SystemExit(f"gpu_battery.py: a device call would carry "
                             f"{call['carry_bytes'] / 2**20:.0f} MiB or hold "
                             f"{len(call['bash'])} characters, over {CARRY_BYTES / 2**20:.0f} MiB "
                             f"/ {CALL_CHARS}")
    return out


def _shown(arg: str) -> str:
    if arg == sys.executable:
        return "python"
    return arg if arg and " " not in arg and ";" not in arg else json.dumps(arg)


# --------------------------------------------------------------------------- running

def run_command(argv: list[str], log: Path, limit_s: float, stdout: Path | None = None) -> dict:
    """Run argv with its output streamed to `log` (stdout to `stdout` when given, e.g.
    doctor's JSON), in its own process group, killed at `limit_s`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a") as err, (open(stdout, "w") if stdout else open(log, "a")) as out:
        err.write(f"$ {' '.join(_shown(a) for a in argv)}\n")
        err.flush()
        process = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err,
                                   start_new_session=True, env=_environment())
        try:
            code = process.wait(timeout=limit_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(process)
            code = process.returncode
    return {"exit_code": code, "seconds": time.perf_counter() - started, "timed_out": timed_out}


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the process group (trainers write what they finished), SIGKILL after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_stage(stage: Stage, framework: str, row: dict, ctx: Context) -> dict:
    log = ctx.out / "logs" / f"{stage.name}-{framework}.log"
    done = {"stage": stage.name, "framework": framework, "core": stage.core,
            "comparison": stage.comparison,
            "limit_s": row["limit_s"], "estimate_s": row["estimate_s"],
            "log": str(log.relative_to(ctx.out)), "commands": []}
    deadline = time.perf_counter() + row["limit_s"]
    for argv in stage.commands(framework, ctx):
        left = deadline - time.perf_counter()
        stdout = ctx.out / f"{stage.name}-{framework}.json" if stage.json_out else None
        outcome = run_command(argv, log, max(1.0, left), stdout)
        done["commands"].append({"argv": " ".join(_shown(a) for a in argv), **outcome})
        if outcome["timed_out"]:
            break
    codes = [c["exit_code"] for c in done["commands"]]
    done["seconds"] = sum(c["seconds"] for c in done["commands"])
    done["status"] = ("timed out" if any(c["timed_out"] for c in done["commands"])
                      else "ok" if all(code == 0 for code in codes) else "failed")
    done["figures"] = figures(stage, framework, ctx)
    if done["status"] != "ok":  # doctor says why in its verdict, the rest in a last line
        said = [line.strip() for line in log.read_text(errors="replace").splitlines()
                if line.strip() and not line.startswith("$ ")] if log.exists() else []
        verdict = done["figures"].get("verdict") if stage.name == "doctor" else None
        done["note"] = (verdict or (said[-1] if said else f"exit codes {codes}"))[:300]
    if stage.name == "gpu-tests" and ctx.device == "gpu" and done["status"] == "ok":
        # pytest exits 0 when every test skips: on a GPU host that proves nothing
        reasons = every_test_skipped(ctx.out / f"pytest-gpu-{framework}.xml")
        if reasons is not None:
            done["status"] = "failed"
            done["note"] = "every GPU test skipped: " + "; ".join(reasons)
    return done


def every_test_skipped(junit: Path) -> list[str] | None:
    """The distinct skip reasons when every test in a pytest JUnit XML report skipped (or it
    ran none); None when at least one test ran."""
    import xml.etree.ElementTree as ElementTree
    try:
        cases = ElementTree.parse(junit).getroot().iter("testcase")
    except (OSError, ElementTree.ParseError):
        return ["no test report was written"]
    reasons, ran = [], False
    for case in cases:
        skipped = case.find("skipped")
        if skipped is None:
            ran = True
        elif (skipped.get("message") or "") not in reasons:
            reasons.append(skipped.get("message") or "")
    return None if ran else (reasons or ["no test ran"])


def figures(stage: Stage, framework: str, ctx: Context) -> dict:
    """The stage's headline figures, read from what it wrote."""
    if stage.name == "tf-smoke":
        found = _read_json(ctx.out / f"tf-smoke-{framework}.json")
        return found or {"verdict": "no JSON on the smoke test's stdout"}
    if stage.name == "doctor":
        found = _read_json(ctx.out / f"doctor-{framework}.json")
        entry = (found.get("frameworks") or {}).get(framework) or {}
        return {"verdict": found.get("verdict") or "no JSON on doctor's stdout",
                "kinds": entry.get("kinds"), "libraries": sorted(
                    ((entry.get("runs") or {}).get("gpu") or {}).get("libraries") or [])}
    if stage.comparison:
        summary = _read_json(ctx.out / stage.name / "summary.json")
        per_framework = {}
        for fw, entry in (summary.get("frameworks") or {}).items():
            per_framework[fw] = {key: (entry.get(key) or {}).get("centre") for key in (
                "images_per_s", "steady_step_time_ms", "final_test_accuracy", "time_to_target_s",
                "peak_device_memory_bytes", "energy_per_image_j", "mfu", "train_time_s")}
            per_framework[fw]["completed"] = entry.get("completed")
        return {"parity_passed": (summary.get("parity") or {}).get("passed"),
                "frameworks": per_framework, "verdict": summary.get("verdict")}
    if stage.name == "gpu-tests":
        log = (ctx.out / "logs" / f"gpu-tests-{framework}.log")
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        closing = [ln for ln in lines if " passed" in ln or " failed" in ln or " skipped" in ln]
        return {"summary": closing[-1] if closing else None}
    if stage.name == "tool-overhead":
        found = _read_json(ctx.out / "tool-overhead" / framework / "overhead.json")
        return {"ratios": {r["config"]: r.get("ratio") for r in found.get("rows") or []}}
    sweep = _read_json(ctx.out / stage.name / framework / "sweep.json")
    return {"rows": [{"settings": r.get("settings"), "status": r.get("status"),
                      "images_per_s": (r.get("summary") or {}).get("images_per_s"),
                      "speedup": r.get("speedup")} for r in sweep.get("rows") or []]}


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


# --------------------------------------------------------------------------- summary and pack

def markdown(battery: dict) -> str:
    lines = [f"# GPU battery, {battery['started_at']}", "",
             f"Machine: {battery['machine']}; device: {battery['device']}"
             + (" (tiny plumbing run: {images} synthetic images, batch {batch}, {epochs} "
                "epoch, {seeds} seed, each stage's limit {limit_s} s; precision: {precision})"
                .format(**battery["tiny"]) if battery["tiny"] else ""), "",
             "| stage | framework | status | seconds | estimate | limit | figures |",
             "|---|---|---|---|---|---|---|"]
    for s in battery["stages"]:
        lines.append(f"| {s['stage']} | {s['framework']} | {s['status']} | "
                     f"{s.get('seconds', 0):.0f} | {s['estimate_s']} | {s['limit_s']} | "
                     f"{_brief(s)} |")
    latest = {s["stage"]: s for s in battery["stages"] if s.get("comparison")}
    for s in latest.values():  # a comparison's figures once, as its latest part left them
        for fw, f in ((s.get("figures") or {}).get("frameworks") or {}).items():
            lines.append(f"- {s['stage']} {fw}: " + ", ".join(
                f"{k} {v:.4g}" for k, v in f.items() if isinstance(v, (int, float))))
    return "\n".join(lines) + "\n"


def _brief(stage: dict) -> str:
    f = stage.get("figures") or {}
    if "verdict" in f and isinstance(f["verdict"], str):
        return f["verdict"].replace("|", "/")[:120]
    if "summary" in f:
        return str(f["summary"])[:120]
    if "parity_passed" in f:
        return f"parity {'passed' if f['parity_passed'] else f['parity_passed']}"
    if "rows" in f:
        return "; ".join(f"{r.get('settings')} {r.get('status')}" for r in f["rows"])[:120]
    if "ratios" in f:
        return "; ".join(f"{k}: tool/bare {v:.3f}" if v else f"{k}: n/a"
                         for k, v in f["ratios"].items())
    return ""


def write_summary(battery: dict, out: Path) -> None:
    (out / "battery.json").write_text(json.dumps(battery, indent=2))
    (out / "battery.md").write_text(markdown(battery))


def pack(out: Path, target: Path) -> list[Path]:
    """At most PACK_FILES files directly in `target`: the summary, one report over every
    comparison, and a tar.gz of logs and results (no models, checkpoints or traces). Built
    beside `target` and moved in file by file (each move atomic), then the previous pack's
    other files removed: a command killed while packing leaves the previous pack whole."""
    building = target.parent / f".{target.name}.partial"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    files = _build_pack(out, building)
    target.mkdir(parents=True, exist_ok=True)
    moved = []
    for path in files:
        os.replace(path, target / path.name)
        moved.append(target / path.name)
    for old in target.iterdir():  # the previous pack's files this one does not replace
        if old.is_file() and old not in moved:
            old.unlink()
    shutil.rmtree(building, ignore_errors=True)
    return moved


def _build_pack(out: Path, target: Path) -> list[Path]:
    written = [shutil.copy(out / name, target / name) for name in ("battery.json", "battery.md")]
    comparisons = sorted(p.parent for p in out.glob("*/compare.json"))
    if comparisons:
        report_dir = out / "report"
        shutil.rmtree(report_dir, ignore_errors=True)  # one report of what is there now
        run_command([*CLI, "report", *map(str, comparisons), "--out", str(report_dir)],
                    out / "logs" / "report.log", 300)
        for name in ("summary.json", "combined.json", "report.md", "report.html"):
            if (report_dir / name).exists():
                written.append(shutil.copy(report_dir / name, target / name))
    archive = target / "battery-results.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and _packed(path.relative_to(out)):
                tar.add(path, arcname=str(path.relative_to(out)))
    if archive.stat().st_size > PACK_TAR_BYTES:  # the logs and summaries alone
        with tarfile.open(archive, "w:gz") as tar:
            for path in sorted(out.rglob("*")):
                if path.is_file() and path.suffix in (".log", ".json", ".md", ".xml"):
                    tar.add(path, arcname=str(path.relative_to(out)))
    written.append(archive)
    return [Path(p) for p in written][:PACK_FILES]


def _packed(relative: Path) -> bool:
    parts = set(relative.parts)
    return not (parts & {"checkpoint", "tensorboard", "profile", "parity", "report"}
                or relative.suffix in (".pt", ".keras", ".npz", ".pb")
                or relative.name.startswith(".cnncompare"))


# --------------------------------------------------------------------------- calibration

def calibrate() -> dict:
    """The fixed cost of a training process on this CPU, per framework and model: a tiny
    run's wall time less its training and evaluation; written to CALIBRATION."""
    import tempfile
    found = {}
    for framework in FRAMEWORKS:
        for model in ("lenet", "resnet9"):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                subprocess.run([*CLI, "run", "--framework", framework, "--model", model,
                                "--dataset", "synthetic", "--synthetic-size", "64",
                                "--batch-size", "32", "--epochs", "1", "--profile", "0",
                                "--precision", "fp32", "--device", "cpu", "--quiet", "--out",
                                tmp], check=True, cwd=REPO, capture_output=True,
                               env=_environment())
                wall = time.perf_counter() - start
                s = json.loads((Path(tmp) / "result.json").read_text())["summary"]
                found[f"{framework}/{model}"] = round(
                    wall - s["train_time_s"] - s["eval_time_s"], 2)
    calibration = {"cpu": _cpu_name(), "measured_at": time.strftime("%Y-%m-%d"),
                   "method": "benchmarks/gpu_battery.py --calibrate: wall time of `cnncompare "
                             "run` on 64 synthetic images, 1 epoch, less its training and "
                             "evaluation time", "fixed_s": found}
    CALIBRATION.write_text(json.dumps(calibration, indent=2) + "\n")
    return calibration


def _cpu_name() -> str:
    from compare.machine.cpu import cpu_name
    return f"{cpu_name()}, {os.cpu_count()} cores"


# --------------------------------------------------------------------------- main

def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path,
                        help="with --plan: TensorFlow's bundle in the checkout (c00/, c01/, "
                             "..., SHA256SUMS), one part carried per device call")
    parser.add_argument("--carry-data", type=Path,
                        help="with --plan: the data in the checkout (the official "
                             "cifar-10-python.tar.gz, or an image folder's tar.gz), carried "
                             "by the first device call")
    parser.add_argument("--plan", action="store_true",
                        help="print the stages as JSON and run nothing")
    parser.add_argument("--stage", action="append", choices=[s.name for s in STAGES],
                        help="run this stage (repeatable) [default: all]")
    parser.add_argument("--framework", choices=FRAMEWORKS, action="append",
                        help="only this framework's part of each stage [default: both]")
    parser.add_argument("--out", type=Path, default=Path("runs/battery"),
                        help="all results, logs and the summary [default: runs/battery]")
    parser.add_argument("--pack", type=Path, help="after every stage, at most 8 files here")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                        help="gpu, or cpu with --tiny to prove the plumbing [default: gpu]")
    parser.add_argument("--tiny", action="store_true",
                        help=f"every stage on {TINY.images} synthetic images, {TINY.epochs} "
                             f"epoch, {TINY.seeds} seed (float32 on a CPU)")
    parser.add_argument("--dataset", default="cifar10", choices=("cifar10", "folder"),
                        help="cnncompare --dataset of every run: real CIFAR-10, as the official "
                             "archive or an image folder (synthetic data only with --tiny) "
                             "[default: cifar10]")
    parser.add_argument("--data-dir", help="cnncompare --data-dir: the official archive (tar.gz "
                                           "or extracted), or the image folder")
    parser.add_argument("--time-left", type=float,
                        help="seconds this command may take, counted from its start; "
                             f"{SPARE_S} s of them are kept for packing: a stage whose estimate "
                             "no longer fits is skipped and said so, and none runs past them")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure the fixed cost per training process on this CPU into "
                             f"{CALIBRATION.name}, then exit")
    return parser.parse_args(argv)


def _cached_cifar10() -> bool:
    """The official archive in cnncompare's cache ($CNNCOMPARE_HOME), where --data-dir is
    not needed."""
    from compare.experiment.datasets import cache
    from compare.experiment.datasets.cifar10 import CIFAR10_ARCHIVE
    return any(cache.home().rglob(CIFAR10_ARCHIVE))


def context(args: argparse.Namespace) -> Context:
    calibration = _read_json(CALIBRATION)
    if args.tiny:
        data = TINY.data()
        sizes = (TINY.images, TINY.images // 5)  # the synthetic source's test split: a fifth
    else:  # real CIFAR-10: a time to 94% on synthetic data would mean nothing
        data = ["--dataset", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir
                                              else [])
        sizes = CIFAR10
    return Context(args.out.resolve(), args.device, args.tiny, data, *sizes, calibration)


def main(argv: list[str] | None = None) -> int:
    # --time-left counts from the process's start as a script, from this call otherwise
    started = STARTED if argv is None else time.perf_counter()
    args = arguments(argv)
    if args.calibrate:
        print(json.dumps(calibrate(), indent=2))
        return 0
    if not (args.tiny or args.plan or args.data_dir or _cached_cifar10()):
        sys.exit("gpu_battery.py: the battery trains on real CIFAR-10: pass --data-dir (the "
                 "official archive or its folder; an image folder with --dataset folder), or "
                 "--tiny for synthetic plumbing")
    ctx = context(args)
    frameworks = tuple(args.framework or FRAMEWORKS)
    stages = [s for s in STAGES if not args.stage or s.name in args.stage]
    rows = plan(stages, frameworks, ctx)
    if args.plan:
        options = ["--tiny"] if args.tiny else ctx.data
        calls = device_calls(rows, options)
        if args.bundle or args.carry_data:
            calls = rental_calls(calls, REPO, args.bundle and args.bundle.resolve(),
                                 args.carry_data and args.carry_data.resolve())
        print(json.dumps({"stages": rows, "calls": calls, "assumptions": {
            "utilisation": ASSUMED_UTILISATION,
            "host_step_ms": {f"{fw}/{m}": v for (fw, m), v in ASSUMED_HOST_STEP_MS.items()},
            "cuda_start_s": CUDA_START_S, "calibration": ctx.calibration},
            "core_estimate_s": sum(r["estimate_s"] for r in rows if r["core"]),
            "core_budget_s": RENTAL_CORE_S}, indent=2))
        return 0
    ctx.out.mkdir(parents=True, exist_ok=True)
    previous = _read_json(ctx.out / "battery.json")
    battery = {"started_at": previous.get("started_at") or time.strftime("%Y-%m-%d %H:%M:%S %z"),
               "machine": platform.node(), "python": platform.python_version(),
               "device": ctx.device, "tiny": TINY.described(ctx.device) if ctx.tiny else False,
               "data": ctx.data,
               "stages": list(previous.get("stages") or [])}
    by_name = {s.name: s for s in STAGES}
    failed = False
    for row in rows:
        stage = by_name[row["stage"]]
        left = (None if args.time_left is None
                else args.time_left - SPARE_S - (time.perf_counter() - started))
        print(f"{row['stage']} ({row['framework']}): estimate {row['estimate_s']} s, "
              f"limit {row['limit_s']} s", flush=True)
        if left is not None and row["estimate_s"] > left:
            done = {"stage": row["stage"], "framework": row["framework"], "core": row["core"],
                    "status": "skipped", "limit_s": row["limit_s"],
                    "estimate_s": row["estimate_s"],
                    "note": f"its estimate ({row['estimate_s']} s) exceeds the {left:.0f} s left"}
        else:
            done = run_stage(stage, row["framework"], {**row, "limit_s": min(
                row["limit_s"], left if left is not None else row["limit_s"])}, ctx)
        failed |= done["status"] not in ("ok", "skipped")
        print(f"  {done['status']}" + (f" in {done['seconds']:.0f} s" if "seconds" in done
                                       else f": {done.get('note')}"), flush=True)
        battery["stages"] = [s for s in battery["stages"]
                             if (s["stage"], s["framework"]) != (row["stage"], row["framework"])]
        battery["stages"].append(done)
        battery["updated_at"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
        write_summary(battery, ctx.out)
        if args.pack:
            pack(ctx.out, args.pack)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
