"""How long an epoch's first step waits for its batch: PyTorch's loader running on from the
previous epoch (the default: its workers load the next epoch's first batches while the loop
evaluates) against a new loader iterator each epoch, alternated round by
round on one trainer, so the machine's drift hits both.

    python -m benchmarks.research.epoch_start [--rounds 5] [--epochs 5] [--workers 2] [--out DIR]

Each epoch is taken whole, then the loop's evaluation is stood for by a pause (--pause, the
seconds a ResNet-9 evaluation takes here). Prints, per form, the median wait for the first
batch of epochs 2 and later over every round; writes epoch_start.json and epoch_start.md to
--out. No step trains between batches, so only the first batch's wait is a step's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run by path (python benchmarks/research/epoch_start.py): the checkout
    # on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine_label
from compare.experiment import datasets
from compare.experiment.config import PipelineConfig, RunConfig
from compare.machine import precision_choice


def first_waits(trainer, epochs: int, pause_s: float, flowing: bool) -> list[float]:
    """The first batch's wait in each epoch after the first, in seconds. Not `flowing`: the
    iterator starts anew each epoch, as a new loader iterator did."""
    first = []
    for epoch in range(epochs):
        if not flowing:
            trainer.train_batches.flow.continues_at = None  # no iterator goes on: a new one
        batches = trainer.batches(epoch)
        started = time.perf_counter()
        next(batches)
        if epoch:
            first.append(time.perf_counter() - started)
        for _ in batches:  # the rest of the epoch
            pass
        time.sleep(pause_s)  # the evaluation
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds [default: 5]")
    parser.add_argument("--epochs", type=int, default=5, help="epochs a round [default: 5]")
    parser.add_argument("--workers", type=int, default=2, help="loader workers [default: 2]")
    parser.add_argument("--batch-size", type=int, default=512, help="[default: 512]")
    parser.add_argument("--steps", type=int, default=10, help="steps an epoch [default: 10]")
    parser.add_argument("--pause", type=float, default=0.5,
                        help="seconds between epochs, for the evaluation [default: 0.5]")
    parser.add_argument("--out", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    from torch_impl import train as torch_train
    with tempfile.TemporaryDirectory() as scratch:
        config = precision_choice.carry(RunConfig(
            framework="torch", model="resnet9", dataset="synthetic", device="cpu",
            synthetic_train_size=args.batch_size * args.steps, synthetic_test_size=64,
            batch_size=args.batch_size, epochs=args.epochs, augment=True, cutout=8,
            precision="fp32", profile_steps=0, quiet=True, out=scratch,
            pipeline=PipelineConfig(workers=args.workers)))
        trainer = torch_train.Trainer(config, datasets.config_dataset(config),
                                      torch_train.select_device(config))
        found: dict[bool, list[float]] = {True: [], False: []}
        for round_ in range(args.rounds):
            for flowing in ((True, False) if round_ % 2 == 0 else (False, True)):
                found[flowing] += first_waits(trainer, args.epochs, args.pause, flowing)
        trainer.close()
    rows = {("runs on" if flowing else "new each epoch"): {
        "first_batch_ms_median": 1e3 * statistics.median(first),
        "first_batch_ms_range": [1e3 * min(first), 1e3 * max(first)], "epochs": len(first)}
        for flowing, first in found.items()}
    record = {"machine": machine_label(),
              "command": "python -m benchmarks.research.epoch_start " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"),
        "workers": args.workers, "batch_size": args.batch_size, "pause_s": args.pause,
        "iterator": rows}
    lines = [f"# The wait for an epoch's first batch: PyTorch's loader ({machine_label()})", "",
             f"`{record['command']}`: ResNet-9's recipe (crop, flip, cutout) at batch "
             f"{args.batch_size}, {args.workers} workers, {args.rounds} alternated rounds of "
             f"{args.epochs} epochs, {args.pause} s between epochs.", "",
             "| iterator | the first batch of epochs 2 and later: median wait (range) | epochs |",
             "|---|---|---|"]
    for name, row in rows.items():
        low, high = row["first_batch_ms_range"]
        lines.append(f"| {name} | {row['first_batch_ms_median']:.1f} ms ({low:.1f}-{high:.1f}) "
                     f"| {row['epochs']} |")
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "epoch_start.json").write_text(json.dumps(record, indent=1) + "\n")
        (args.out / "epoch_start.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
