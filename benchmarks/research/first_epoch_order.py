"""`compare` with each own loop beside its run, from this checkout (the run's first epoch always
before its own loop's) against a checkout from before that rule (on odd seeds the own loop's
first epoch went first): how wide each 3-seed interval comes out, and how much shorter the
odd seed's first epoch was.

Each round runs the comparison once from each checkout, the order turned every round, alone
on the host (on a CPU the frameworks take turns, each run with its own loop beside it); each
comparison goes to DIR/batch<B>-<arm>-r<round> (arm: `first` from this checkout, `odd` from
the other). The table adds, per framework, seed 1's first epoch over the mean of seeds 0's
and 2's: an own loop's first epoch before it warms the process it shares.

    git worktree add /tmp/before ec68cf0
    python -m benchmarks.research.first_epoch_order --baseline /tmp/before --batch 32:10000 \\
        --batch 4:2000 --rounds 4 --out DIR
    python -m benchmarks.research.first_epoch_order --summarise DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(REPO))

from benchmarks.common import machine_label, ratio_cell, run_and_say  # noqa: E402
from benchmarks.research.turns_ab import summarise  # noqa: E402

ARMS = ("first", "odd")  # this checkout's rule; the own loop's first epoch first on odd seeds
KEYS = ("tf_over_torch_train_time", "tf_shared_over_own", "torch_shared_over_own")


def comparison_command(batch: int, images: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "compare.cli", "compare", "--model", "lenet", "--dataset",
            "synthetic", "--synthetic-size", str(images), "--batch-size", str(batch),
            "--epochs", "3", "--precision", "fp32", "--seeds", "3", "--own-loops",
            "--out", str(out), "--quiet"]


def odd_first_epoch(comparison: Path, framework: str) -> float | None:
    """Seed 1's first epoch over the mean of seeds 0's and 2's."""
    first = {}
    for seed in (0, 1, 2):
        path = comparison / "runs" / f"{framework}-seed{seed}" / "result.json"
        try:
            first[seed] = json.loads(path.read_text())["summary"]["warmup_time_s"]
        except (OSError, ValueError, KeyError):
            return None
    return first[1] / ((first[0] + first[2]) / 2) if all(first.values()) else None


def table(directory: Path) -> str:
    rows = summarise(directory)
    for row in rows:
        row["arm"] = row["comparison"].split("-")[1]
        row["odd"] = {fw: odd_first_epoch(directory / row["comparison"], fw)
                      for fw in ("tf", "torch")}
    lines = ["| comparison | TF / PyTorch training time | TensorFlow/Keras: shared / `fit` | "
             "PyTorch: shared / plain loop | seed 1's first epoch / seeds 0 and 2's, TF; "
             "PyTorch |", "|---|---|---|---|---|"]
    lines += [f"| {r['comparison']} | " + " | ".join(ratio_cell(r[k]) for k in KEYS) + " | "
              + "; ".join("-" if r["odd"][fw] is None else f"{r['odd'][fw]:.3f}"
                          for fw in ("tf", "torch")) + " |" for r in rows]
    for arm in ARMS:
        chosen = [r for r in rows if r["arm"] == arm]
        widths = [[r[k]["width"] for r in chosen if r[k]] for k in KEYS]
        odd = [[r["odd"][fw] for r in chosen if r["odd"][fw]] for fw in ("tf", "torch")]
        lines.append(f"| median, {len(chosen)} comparisons `{arm}` | " + " | ".join(
            f"{statistics.median(w):.2f}x wide" if w else "-" for w in widths) + " | "
            + "; ".join(f"{statistics.median(o):.3f}" if o else "-" for o in odd) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="the checkout from before the rule")
    parser.add_argument("--batch", action="append", default=[], metavar="B:IMAGES",
                        help="a batch size and the synthetic images it trains on")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, help="where the comparisons go")
    parser.add_argument("--summarise", type=Path, metavar="DIR",
                        help="only write the table of the comparisons already in DIR")
    args = parser.parse_args()
    directory = args.summarise or args.out
    if directory is None or (args.summarise is None and args.baseline is None):
        parser.error("--out with --baseline, or --summarise, is needed")
    if args.summarise is None:
        checkouts = {"first": REPO, "odd": args.baseline.resolve()}
        for round_ in range(1, args.rounds + 1):
            for batch_images in args.batch:
                batch, images = (int(x) for x in batch_images.split(":"))
                for arm in ARMS if round_ % 2 else ARMS[::-1]:
                    out = directory / f"batch{batch}-{arm}-r{round_}"
                    run_and_say(  # the checkout's code in every process it starts
                        out.name, comparison_command(batch, images, out.resolve()),
                        checkouts[arm], {**os.environ, "PYTHONPATH": str(checkouts[arm])})
    command = "python -m benchmarks.research.first_epoch_order " + " ".join(sys.argv[1:])
    (directory / "first_epoch_order.md").write_text(
        f"# The run's first epoch before its own loop's, against the own loop's first on odd "
        f"seeds\n\n{machine_label()}\n\n    {command}\n\n{table(directory)}\n")
    print(table(directory))


if __name__ == "__main__":
    main()
