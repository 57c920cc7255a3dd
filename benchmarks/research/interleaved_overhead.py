"""What the shared loop costs each framework, both loops in one process, epoch by epoch.

benchmarks/tool_overhead.py pairs a shared-loop run with an own-loop run a minute apart, each
in its own process; on a 2-core host whole processes run slow from start to end (one in five
at a quarter over the others), so its paired ratios are 1.1x to 1.9x wide. Here one process
builds two trainers of the same run (same model, initial weights, batches and recipe) and
trains them in turn, an epoch each: the framework's own loop (Keras compile + fit; the plain
PyTorch loop, compare.run.own_loop's, driving) and the shared loop's epoch
(compare.run.loop), run after each of the own loop's epochs. Half the processes run the
own loop's epoch first in each pair, half the shared loop's, so neither always runs on a
machine the other has warmed. Each epoch after the first of each loop gives one paired ratio
of median window step times (both loops cut their epochs into the same synchronised windows,
compare.run.schedule); the figure is their geometric mean over every pair of every process,
with its 95% t interval and width (high / low), per framework and configuration. The first
epoch of each loop (tracing, autotuning) is left out.

    python -m benchmarks.research.interleaved_overhead --processes 4 --epochs 6 \\
        --out benchmarks/results/cpu-epyc-2core
    python -m benchmarks.research.interleaved_overhead --configs lenet:32 --synthetic-size 512 \\
        --processes 2 --epochs 3 --out /tmp/interleaved-smoke    # does it work?

Writes DIR/interleaved.json and DIR/interleaved.md. A worker is this script with --worker.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import common
from benchmarks.tool_overhead import LEARNING_RATES
from compare.machine import allocator

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the worker

def worker(framework: str, model: str, batch: int, epochs: int, images: int,
           shared_first: bool, out: Path) -> None:
    """One process: both loops of one run, an epoch each in turn; writes each loop's median
    window step time (ms) per epoch to `out`."""
    impl = importlib.import_module(f"{framework}_impl.train")  # one framework a process
    # the process as cnncompare's framework processes settle in (compare.run.worker): the
    # import heap out of the collector's reach, freed buffers kept in malloc's heap
    gc.freeze()
    allocator.keep_freed_memory()
    from compare.experiment import datasets
    from compare.experiment.config import recipe_config
    from compare.experiment.recipe import learning_rate
    from compare.machine import gpu_metrics, precision_choice
    from compare.run import loop, validate
    from compare.run.progress import ProgressDisplay
    from compare.run.own_loop import WindowClock
    from compare.run.schedule import Schedule

    with tempfile.TemporaryDirectory() as scratch:
        lr = LEARNING_RATES.get((model, batch))
        config = precision_choice.carry(validate.check_config(recipe_config(
            model, framework=framework, out=scratch, dataset="synthetic",
            synthetic_train_size=images, batch_size=batch, epochs=epochs, precision="fp32",
            device="cpu", profile_steps=0, quiet=True, **({"lr": float(lr)} if lr else {}))))
        dataset = datasets.config_dataset(config)
        choice = impl.select_device(config)
        own, shared = impl.Trainer(config, dataset, choice), impl.Trainer(config, dataset, choice)
        total = own.steps_per_epoch * epochs
        lrs = [learning_rate(config, step, total) for step in range(total)]
        display = ProgressDisplay(config, framework, shared.steps_per_epoch, enabled=False)
        schedule = Schedule(config, shared)  # the shared loop's windows, alone in the process
        sampler = gpu_metrics.NoSampler("a CPU benchmark")
        shared_ms: list[float] = []

        class Windows:  # what the shared loop's epoch records, kept: its windows' step times
            def __init__(self) -> None:
                self.ms: list[float] = []

            def add_window(self, epoch: int, first: int, steps: int, seconds: float,
                           waited: float) -> None:
                self.ms.append(1000.0 * seconds / steps)

            def add_steps(self, *args: object) -> None:
                pass

        global_step = 0  # the shared loop's, across its epochs

        def shared_epoch() -> None:
            nonlocal global_step
            seen = Windows()
            epoch = len(shared_ms) + 1
            outputs = loop.Outputs(seen, display, config.batch_size)  # type: ignore[arg-type]
            _, global_step = loop._train_epoch(shared, config, outputs, schedule, sampler,
                                               epoch, global_step, total)
            shared_ms.append(statistics.median(seen.ms))

        if shared_first:
            shared_epoch()
        clock = WindowClock(config, own.steps_per_call, own.sync)

        epoch_ends = (seconds for seconds in impl.own_loop.own_loop(own, config, dataset, lrs,
                                                                    clock, [])
                      if seconds is not None)
        for epoch, _ in enumerate(epoch_ends):
            if not shared_first or epoch + 1 < epochs:
                shared_epoch()
        own_ms = [statistics.median(1000.0 * w["seconds"] / w["steps"] for w in clock.windows
                                    if w["epoch"] == e + 1) for e in range(epochs)]
        own.close()
        shared.close()
    out.write_text(json.dumps({"own_ms": own_ms, "shared_ms": shared_ms,
                               "shared_first": shared_first}))


# --------------------------------------------------------------------------- the parent

def row(framework: str, config: str, processes: list[dict]) -> dict:
    """One framework's figures on one configuration: a ratio per pair of epochs after the
    first of each loop (shared / own median window step), every process's pooled, their
    geometric mean, 95% interval and width (None below 3 pairs)."""
    ratios = [shared / own for process in processes
              for shared, own in zip(process["shared_ms"][1:], process["own_ms"][1:])]
    found = common.ratio_interval(ratios) or dict.fromkeys(("ratio", "low", "high", "width"))
    return {"framework": framework, "config": config, "ratios": ratios,
            "ratio": found["ratio"], "low": found["low"], "high": found["high"],
            "width": found["width"], "pairs": len(ratios), "processes": processes}


def measure(framework: str, config: str, process: int, args: argparse.Namespace) -> dict:
    model, batch = config.split(":")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pairs.json"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "benchmarks.research.interleaved_overhead",
                        "--worker", framework, model, batch, str(args.epochs),
                        str(args.synthetic_size), "shared" if process % 2 else "own", str(out)],
                       check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        found = json.loads(out.read_text())
    found["seconds"] = time.perf_counter() - started
    return found


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        framework, model, batch, epochs, images, first, out = sys.argv[2:9]
        worker(framework, model, int(batch), int(epochs), int(images), first == "shared",
               Path(out))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="lenet:4,lenet:32", help="MODEL:BATCH,...")
    parser.add_argument("--frameworks", default="tf,torch")
    parser.add_argument("--processes", type=int, default=4,
                        help="processes per framework and configuration, half of them with "
                             "the shared loop's epoch first in each pair [default: 4]")
    parser.add_argument("--epochs", type=int, default=6,
                        help="epochs of each loop per process; the first is left out "
                             "[default: 6]")
    parser.add_argument("--synthetic-size", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path("runs/interleaved"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for config in args.configs.split(","):
        for framework in args.frameworks.split(","):
            processes = [measure(framework, config, p, args) for p in range(args.processes)]
            rows.append(row(framework, config, processes))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "processes"}),
                  flush=True)
    result = {"machine": common.machine_label(), "measured_at": time.strftime("%Y-%m-%d"),
              "epochs": args.epochs, "images": args.synthetic_size,
              "processes": args.processes, "rows": rows,
              "command": ("python -m benchmarks.research.interleaved_overhead "
                          + " ".join(sys.argv[1:]))}
    (args.out / "interleaved.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# The shared loop against each framework's own, interleaved epoch by epoch",
             "", f"{result['machine']}, {result['measured_at']}: LeNet, synthetic "
             f"{args.synthetic_size:,} images, float32, {args.processes} processes of "
             f"{args.epochs} epochs per loop; shared / own median window step, geometric "
             f"mean of the paired epochs after the first, 95% interval (width).", "",
             "| configuration | framework | shared / own | pairs |", "|---|---|---|---|"]
    for r in rows:
        figure = common.ratio_cell(r) if r["ratio"] else "fewer than 3 pairs"
        lines.append(f"| {r['config']} | {r['framework']} | {figure} | "
                     f"{r['pairs']} |")
    lines += ["", "    " + result["command"]]
    (args.out / "interleaved.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
