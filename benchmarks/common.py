"""Shared plumbing for the benchmarks: run the tool and a bare baseline, alternating, in fresh
processes."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RECIPE = ["--model", "lenet", "--epochs", "2", "--batch-size", "32", "--lr", "0.01", "--precision",
          "fp32", "--seed", "0"]


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dataset", default="folder",
                        help="cnncompare --dataset (default: folder)")
    parser.add_argument("--data-dir", help="cnncompare --data-dir, e.g. the extracted JPEG archive")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each; medians when > 1")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)  # the child process
    return parser.parse_args()


def tool_run(framework: str, args: argparse.Namespace) -> dict:
    """`cnncompare run` of the recipe; its own train time (epochs, evaluation excluded) and
    accuracy."""
    with tempfile.TemporaryDirectory() as out:
        data = ["--dataset", args.dataset] + (["--data-dir", args.data_dir]
                                              if args.data_dir else [])
        subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", "run",
                        "--framework", framework, *RECIPE, *data, "--quiet", "--out", out],
                       check=True, stdout=subprocess.DEVNULL)
        result = json.loads((Path(out) / "result.json").read_text())
    return {"train_time_s": result["summary"]["train_time_s"],
            "test_accuracy": result["summary"]["final_test_accuracy"]}


def bare_run(script: str, args: argparse.Namespace) -> dict:
    data = ["--dataset", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir else [])
    proc = subprocess.run([sys.executable, script, "--bare", *data], check=True,
                          capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(framework: str, script: str, args: argparse.Namespace, label: str) -> None:
    """Alternate bare and tool runs (drift hits both), then print medians and the ratio."""
    bare, tool = [], []
    for i in range(args.repeats):
        order = [("bare", lambda: bare_run(script, args)),
                 ("tool", lambda: tool_run(framework, args))]
        for name, run in (order if i % 2 == 0 else order[::-1]):
            result = run()
            (bare if name == "bare" else tool).append(result)
            print(f"run {i + 1} {name}: train {result['train_time_s']:.2f} s, "
                  f"test accuracy {result['test_accuracy']:.4f}", flush=True)
    med = lambda runs, key: statistics.median(r[key] for r in runs)  # noqa: E731
    print(f"{label}: median train {med(bare, 'train_time_s'):.2f} s, "
          f"accuracy {med(bare, 'test_accuracy'):.4f}")
    print(f"cnncompare run --framework {framework}: "
          f"median train {med(tool, 'train_time_s'):.2f} s, "
          f"accuracy {med(tool, 'test_accuracy'):.4f}")
    print("ratio tool / bare train time: "
          f"{med(tool, 'train_time_s') / med(bare, 'train_time_s'):.3f} "
          f"(medians of {args.repeats} run(s) each)")


def arrays(args: argparse.Namespace):
    """The same decoded arrays and normalisation statistics the tool uses."""
    from compare.experiment import datasets
    ds = datasets.load(args.dataset, args.data_dir)
    return ds.train_x, ds.train_y, ds.test_x, ds.test_y, ds.mean, ds.std
