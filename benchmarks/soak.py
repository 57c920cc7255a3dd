"""Soak: many epochs of a small run in each framework; does the trainer's host memory grow?

Runs `cnncompare run` (lenet on synthetic data) once per framework in a fresh process, reads
the resident memory recorded after every epoch (result.json epochs[].host_rss_bytes: the
trainer process, DataLoader workers not included) and prints its growth as a least-squares
slope in MiB per epoch over the epochs after the first few (which hold the warm-up: tracing
caches, allocator pools, the first evaluation). Run it alone: other processes' memory
pressure does not change RSS, but their CPU load stretches the run.

    python -m benchmarks.soak                       # 100 epochs, 2000 images, both frameworks
    python -m benchmarks.soak --frameworks tf --epochs 50 --pipeline naive
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MIB = 2 ** 20


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", nargs="+", default=["tf", "torch"],
                        choices=["tf", "torch"], help="which to run (default: both)")
    parser.add_argument("--epochs", type=int, default=100, help="epochs per run (default: 100)")
    parser.add_argument("--synthetic-size", type=int, default=2000,
                        help="synthetic training images (default: 2000; test set: a fifth)")
    parser.add_argument("--pipeline", default="tuned",
                        help="cnncompare --pipeline (default: tuned)")
    parser.add_argument("--skip", type=int, default=5,
                        help="first epochs left out of the slope (default: 5)")
    return parser.parse_args()


def host_rss_per_epoch(framework: str, args: argparse.Namespace) -> tuple[np.ndarray, float]:
    """The trainer's RSS after each epoch (MiB) and the run's wall time (s)."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", "run",
                        "--framework", framework, "--model", "lenet", "--dataset", "synthetic",
                        "--synthetic-size", str(args.synthetic_size), "--epochs", str(args.epochs),
                        "--precision", "fp32", "--pipeline", args.pipeline, "--quiet",
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        epochs = json.loads((Path(out) / "result.json").read_text())["epochs"]
    return np.array([e["host_rss_bytes"] for e in epochs], dtype=float) / MIB, wall


def slope_mib_per_epoch(rss_mib: np.ndarray, skip: int) -> float:
    """Least-squares slope of RSS against the epoch number, epochs after the first `skip`."""
    epochs = np.arange(1, len(rss_mib) + 1)
    return float(np.polyfit(epochs[skip:], rss_mib[skip:], 1)[0])


def main() -> None:
    args = arguments()
    for framework in args.frameworks:
        rss, wall = host_rss_per_epoch(framework, args)
        slope = slope_mib_per_epoch(rss, args.skip)
        print(f"{framework}: {len(rss)} epochs in {wall:.0f} s; host RSS after epoch 1 "
              f"{rss[0]:.1f} MiB, after epoch {args.skip} {rss[args.skip - 1]:.1f} MiB, "
              f"at the end {rss[-1]:.1f} MiB; growth after epoch {args.skip}: "
              f"{slope:+.3f} MiB/epoch (least squares), {rss[-1] - rss[args.skip - 1]:+.1f} MiB "
              f"in all", flush=True)


if __name__ == "__main__":
    main()
