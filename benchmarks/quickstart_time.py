"""How long the README's first command takes: `cnncompare compare --dataset synthetic
--epochs 2 --seeds 2`, the whole command from outside, this checkout against a baseline,
alternated run by run so that the machine's drift hits both (A B A B ...).

The baseline is another commit of this repository (`--baseline REF`, checked out into a
temporary git worktree and run from there) or this checkout with every framework process
started afresh (`--baseline fresh-processes`: CNNCOMPARE_FORK_SERVER=0). Both use the same
dataset cache, written before the first counted run. The last run of this checkout runs with
`--debug`, whose table says where its wall time went; it is printed after the figures.

    python -m benchmarks.quickstart_time [--runs 3] [--baseline REF|fresh-processes]
        [--json FILE]

Prints each run's wall seconds, the medians and the pairwise ratios this / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, machine_label

COMMAND = ["compare", "--dataset", "synthetic", "--epochs", "2", "--seeds", "2"]
FRESH = "fresh-processes"  # the baseline that forks nothing


def timed(checkout: Path, out: Path, env: dict[str, str], debug: bool = False) -> tuple[float,
                                                                                       str]:
    """The wall seconds of the README's command run from `checkout`, and its output."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from compare.cli import main; main()",
                           *COMMAND, "--quiet", "--out", str(out), *(["--debug"] * debug)],
                          cwd=checkout, env={**env, "PYTHONPATH": str(checkout)},
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: exit {done.returncode}: {done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="counted runs of each [default: 3]")
    parser.add_argument("--baseline", default=FRESH,
                        help=f"a git ref, or {FRESH} [default: {FRESH}]")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="cnncompare-quickstart-") as tmp:
        scratch = Path(tmp)
        baseline_env = {**env, "CNNCOMPARE_FORK_SERVER": "0"} if args.baseline == FRESH else env
        baseline_checkout = REPO
        if args.baseline != FRESH:
            baseline_checkout = scratch / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(baseline_checkout),
                            args.baseline], cwd=REPO, check=True, capture_output=True)
        try:
            timed(REPO, scratch / "warm-up", env)  # the dataset cache, disk caches
            this, baseline, debug_output = [], [], ""
            for index in range(args.runs):
                seconds, _ = timed(baseline_checkout, scratch / f"baseline-{index}",
                                   baseline_env)
                baseline.append(seconds)
                last = index == args.runs - 1
                seconds, output = timed(REPO, scratch / f"this-{index}", env, debug=last)
                this.append(seconds)
                debug_output = output if last else debug_output
                print(f"pair {index + 1}: this {this[-1]:.1f} s, baseline {baseline[-1]:.1f} s",
                      file=sys.stderr, flush=True)
        finally:
            if args.baseline != FRESH:
                subprocess.run(["git", "worktree", "remove", "--force",
                                str(baseline_checkout)], cwd=REPO, capture_output=True)
    ratios = [a / b for a, b in zip(this, baseline)]
    figures = {"measured_by": "python -m benchmarks.quickstart_time " + " ".join(sys.argv[1:]),
               "machine": machine_label(), "command": "cnncompare " + " ".join(COMMAND),
               "baseline": args.baseline, "this_s": this, "baseline_s": baseline,
               "this_median_s": statistics.median(this),
               "baseline_median_s": statistics.median(baseline),
               "ratio_this_over_baseline": ratios,
               "ratio_median": statistics.median(ratios)}
    print(f"{figures['command']} on {figures['machine']}, {args.runs} alternated runs each")
    print("| form | wall time per run | median |\n|---|---|---|")
    print(f"| this checkout | {', '.join(f'{s:.1f}' for s in this)} s | "
          f"{figures['this_median_s']:.1f} s |")
    print(f"| baseline ({args.baseline}) | {', '.join(f'{s:.1f}' for s in baseline)} s | "
          f"{figures['baseline_median_s']:.1f} s |")
    print(f"this / baseline, pair by pair: {', '.join(f'{r:.2f}' for r in ratios)} "
          f"(median {figures['ratio_median']:.2f})")
    table = debug_output[debug_output.find("where the command"):]
    print("\nThe last run of this checkout, with --debug:\n" + table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**figures, "debug_table": table}, indent=2) + "\n")


if __name__ == "__main__":
    main()
