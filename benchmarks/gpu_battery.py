"""The GPU battery: everything the product measures on a GPU, in stages sized for a short rental.

A GPU rental here is short: about 30 minutes of GPU time, commands of at most 10 minutes, a
few files copied back per command, and TensorFlow arriving in parts while PyTorch is there
from the start. So the battery is a list of stages, each run for one framework at a time
(PyTorch's core stages first, then TensorFlow's, then the sweeps), each under its own time
limit, each rewriting the summary when it ends:

    python -m benchmarks.gpu_battery --plan                  # the stages, limits, estimates
    python -m benchmarks.gpu_battery --framework torch --stage doctor --stage lenet-fp32 \\
        --dataset folder --data-dir /tmp/cifar10-jpeg --out /tmp/battery --pack "$OUT"
    python -m benchmarks.gpu_battery --device cpu --tiny --out /tmp/b --pack /tmp/p  # plumbing

Stages: `tf-smoke` (TensorFlow's first GPU op: a float16 3x3 convolution forward and
gradient); `doctor`; `gpu-tests` (pytest -m gpu); `suite` (the README's test command, the
quick tier, on the GPU host); the core comparisons `lenet-fp32`,
`lenet-mixed` (the PyTorch tutorial's recipe: batch 4, lr 0.001, 2 epochs), `resnet9-mixed`
and `resnet9-fp32` (the DAWNBench recipe, 24 epochs, --target-accuracy 0.94); then
`resnet18-mixed` and `mobilenetv2-mixed` (pytorch-cifar's networks, 10 epochs),
`cpu-vs-gpu` (sweep --vary device=cpu,gpu), `tool-overhead` (benchmarks/tool_overhead.py) and
the open GPU questions as short sweeps: `cuda-graphs` (PyTorch), `strategy` (each framework's
distribution wrapper against none on one GPU), `shared-chip` (the multi-device paths on one
GPU, --share-device) and `steps-per-call`. A comparison's
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

Timed and untimed stages: on a GPU a timed stage (a comparison, a sweep, the tool overhead)
starts only on a quiet host, with nothing else training, unpacking or copying there, and is
refused, naming what ran beside it, when the host stays busy; while it runs the host is
watched (every 3 s: other processes using CPU, copies and unpacks at work), and a stage that
shared it is marked "host not quiet" with what was seen (battery.json, battery.md, and a
comparison's host.json). Untimed stages (the smoke test, the GPU tests, `reference`:
airbench94 on the same data as the accuracy this copy of CIFAR-10 allows, `resnet9-page`:
ResNet-9 at Page's recipe for its accuracy, `prime`: one eager PyTorch epoch that decodes the
images into the data cache, warming no compile cache; `kernels`: each framework's eager
kernels, read on the GPU's clock) fill the minutes while a rental's TensorFlow bundle arrives.
The verdict, `resnet9-verdict-warm` then `resnet9-verdict-cold` (the same `compare` with
--compile-cache warm, where compare's own untimed warm-up fills both frameworks' compile
caches, and cold: matched compiled beside each framework's own loop, each also at its default
and its best, 3 seeds), `resnet9-own-best` and `resnet9-eager` (matched eager, TensorFlow also
with XLA) run both frameworks in one `compare` (framework `both`), their seeds alternated.

The battery's parts live in benchmarks/battery/, by role: each stage's commands and what
--tiny runs (commands.py), the stages (stages.py), a run's recipe, context and estimate
(estimates.py), the plan and the device calls (calls.py), running a stage (running.py), the
host beside a timed stage (host.py), the summary and the pack (pack.py), a 15-minute rental's
queue (rental.sh) and that queue laid out in the rental's device time (rental.py, `--plan
--rental`); this script parses the options and runs the plan.

Estimates (GPU seconds on one H100 SXM) are made from FLOPs and CPU runs: the fixed cost of a
training process (start-up, imports, building, the first call's tracing) measured on this
project's CPU (`--calibrate` measures it again and writes benchmarks/gpu_battery_calibration.json),
plus per epoch the larger of the compute time (analytic training FLOPs x images / the H100's
dense peak x an assumed utilisation) and the host time (steps x an assumed host cost per
step), plus the evaluation. Where a configuration ran on a GPU (benchmarks/battery/
estimates.py, MEASURED), its measured step, first epoch, evaluation and fixed cost
replace them. Each stage's `how` names what its estimate rests on.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTED = time.perf_counter()  # --time-left counts from here: imports and setup included

if not __package__:  # run by path (python benchmarks/gpu_battery.py): the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402 - after STARTED: its time counts
from benchmarks.battery import bundle, rental  # noqa: E402
from benchmarks.battery.calls import device_calls, plan, rental_calls  # noqa: E402
from benchmarks.battery.commands import (  # noqa: E402
    CLI,
    FRAMEWORKS,
    REPO,
    STAGE_FRAMEWORKS,
    TINY,
    checkout_commit,
)
from benchmarks.battery.estimates import (  # noqa: E402
    ASSUMED_HOST_STEP_MS,
    ASSUMED_UTILISATION,
    CIFAR10,
    CUDA_START_S,
    Context,
)
from benchmarks.battery.pack import pack, write_summary  # noqa: E402
from benchmarks.battery.running import (  # noqa: E402
    child_environment,
    read_json,
    run_stage,
    stop_stages_with_the_battery,
    wait_for_quiet_host,
)
from benchmarks.battery.stages import (  # noqa: E402
    CALIBRATION,
    RENTAL_CORE_S,
    SPARE_S,
    STAGES,
)

# --------------------------------------------------------------------------- calibration

def calibrate() -> dict:
    """The fixed cost of a training process on this CPU, per framework and model: a tiny
    run's wall time less its training and evaluation; written to CALIBRATION."""
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
                               env=child_environment())
                wall = time.perf_counter() - start
                s = json.loads((Path(tmp) / "result.json").read_text())["summary"]
                found[f"{framework}/{model}"] = round(
                    wall - s["train_time_s"] - s["eval_time_s"], 2)
    calibration = {"cpu": common.machine_label(), "measured_at": time.strftime("%Y-%m-%d"),
                   "method": "benchmarks/gpu_battery.py --calibrate: wall time of `cnncompare "
                             "run` on 64 synthetic images, 1 epoch, less its training and "
                             "evaluation time", "fixed_s": found}
    CALIBRATION.write_text(json.dumps(calibration, indent=2) + "\n")
    return calibration


# --------------------------------------------------------------------------- main

def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path,
                        help="with --plan: TensorFlow's bundle in the checkout (c00/, c01/, "
                             "..., SHA256SUMS), one part carried per device call")
    parser.add_argument("--split-parts", type=int, metavar="MIB",
                        help="with --bundle: cut the bundle's parts again into parts of MIB "
                             "MiB (SHA256SUMS rewritten), so each fits a device call beside "
                             "the checkout, then exit")
    parser.add_argument("--carry-data", type=Path,
                        help="with --plan: the data in the checkout (the official "
                             "cifar-10-python.tar.gz, or an image folder's tar.gz), carried "
                             "by the first device call")
    parser.add_argument("--plan", action="store_true",
                        help="print the stages as JSON and run nothing")
    parser.add_argument("--rental", action="store_true",
                        help="with --plan: print instead the next rental's queue "
                             "(benchmarks/battery/rental.sh's) laid out in its 15 minutes of "
                             "device time, the machine's start and the bundle's parts (one a "
                             "call; counted from --bundle's SHA256SUMS where given) included, "
                             "and what it leaves for the rental after")
    parser.add_argument("--stage", action="append", choices=[s.name for s in STAGES],
                        help="run this stage (repeatable) [default: all]")
    parser.add_argument("--framework", choices=STAGE_FRAMEWORKS, action="append",
                        help="only this framework's part of each stage (both: the stages "
                             "that run both frameworks in one command) [default: all]")
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
    parser.add_argument("--seeds", type=int,
                        help="every comparison's seeds, for a rental too short for each "
                             "stage's own [default: each stage's own]")
    parser.add_argument("--limit-factor", type=float, default=2.0,
                        help="each stage's time limit as a multiple of its estimate, at least "
                             "120 s and at most the command's 570 s [default: 2]")
    parser.add_argument("--tests", type=lambda names: tuple(filter(None, names.split(","))),
                        default=(), help="the GPU-test stage runs only the tests whose names "
                                         "hold one of these comma-separated parts [default: "
                                         "every GPU test of the framework]")
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
    calibration = read_json(CALIBRATION)
    if args.tiny:
        data = TINY.data()
        sizes = (TINY.images, TINY.images // 5)  # the synthetic source's test split: a fifth
    else:  # real CIFAR-10: a time to 94% on synthetic data would mean nothing
        data = ["--dataset", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir
                                              else [])
        sizes = CIFAR10
    return Context(args.out.resolve(), args.device, args.tiny, data, *sizes, calibration,
                   args.seeds, args.limit_factor, args.tests)


def main(argv: list[str] | None = None) -> int:
    # --time-left counts from the process's start as a script, from this call otherwise
    started = STARTED if argv is None else time.perf_counter()
    args = arguments(argv)
    if argv is None:  # as a script
        stop_stages_with_the_battery()
    if args.split_parts is not None:
        if args.bundle is None or args.split_parts < 1:
            sys.exit("gpu_battery.py: --split-parts takes a size of at least 1 MiB and --bundle")
        count = bundle.split(args.bundle, args.split_parts * 2**20)
        print(f"{args.bundle}: {count} parts of at most {args.split_parts} MiB")
        return 0
    if args.calibrate:
        print(json.dumps(calibrate(), indent=2))
        return 0
    if not (args.tiny or args.plan or args.data_dir or _cached_cifar10()):
        sys.exit("gpu_battery.py: the battery trains on real CIFAR-10: pass --data-dir (the "
                 "official archive or its folder; an image folder with --dataset folder), or "
                 "--tiny for synthetic plumbing")
    ctx = context(args)
    frameworks = tuple(args.framework or STAGE_FRAMEWORKS)
    stages = [s for s in STAGES if not args.stage or s.name in args.stage]
    rows = plan(stages, frameworks, ctx)
    if args.plan:
        laid = rental.lay(ctx, rental.part_counts(args.bundle and args.bundle.resolve()))
        if args.rental:
            print(rental.render(laid), end="")
            return 0
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
            "core_budget_s": RENTAL_CORE_S, "rental": laid}, indent=2))
        return 0
    ctx.out.mkdir(parents=True, exist_ok=True)
    previous = read_json(ctx.out / "battery.json")
    battery = {"started_at": previous.get("started_at") or time.strftime("%Y-%m-%d %H:%M:%S %z"),
               "machine": platform.node(), "python": platform.python_version(),
               # what ran: the GPU tests' reports name it too (docs/gpu.md's record)
               "commit": checkout_commit(),
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
        least = row["least_s"]  # what leaves a usable result
        skipped = stage.tiny_skip(ctx) or (
            f"its estimate ({row['estimate_s']} s) exceeds the {left:.0f} s left"
            if left is not None and least > left else None)
        waited, beside = 0.0, []
        if not skipped and stage.timed and ctx.device == "gpu":
            # a timed stage starts on a quiet host or not at all
            waited, beside = wait_for_quiet_host(
                (left - least) if left is not None else row["limit_s"])
            if left is not None:
                left -= waited
        if skipped:
            done = {"stage": row["stage"], "framework": row["framework"], "core": row["core"],
                    "status": "skipped", "limit_s": row["limit_s"],
                    "estimate_s": row["estimate_s"], "note": skipped}
        elif beside:
            done = {"stage": row["stage"], "framework": row["framework"], "core": row["core"],
                    "status": "refused", "limit_s": row["limit_s"],
                    "estimate_s": row["estimate_s"], "quiet_wait_s": round(waited, 1),
                    "note": f"not timed beside other work on this host, after waiting "
                            f"{waited:.0f} s: " + "; ".join(beside)[:240]}
        else:
            # a timed stage's host watched while it runs: what else ran there is recorded
            done = run_stage(stage, row["framework"], {**row, "limit_s": round(min(
                row["limit_s"], left if left is not None else row["limit_s"]))}, ctx,
                watch_host=stage.timed and ctx.device == "gpu")
            if stage.timed and ctx.device == "gpu":
                done["quiet_wait_s"] = round(waited, 1)
        done["timed"] = stage.timed
        if ctx.seeds is not None and stage.comparison:
            done["seeds"] = ctx.seeds  # --seeds, in place of the stage's own
        failed |= done["status"] not in ("ok", "skipped")
        print(f"  {done['status']}" + (f" in {done['seconds']:.0f} s" if "seconds" in done
                                       else f": {done.get('note')}")
              + (f"; {done['host_note']}" if done.get("host_note") else ""), flush=True)
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
