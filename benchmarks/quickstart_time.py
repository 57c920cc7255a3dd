"""How long the README's first command takes: `cnncompare compare --dataset synthetic
--epochs 2 --seeds 2`, the whole command from outside, this checkout against a baseline,
alternated run by run so that the machine's drift hits both (A B A B ...).

The baseline is another commit of this repository (`--baseline REF`, checked out into a
temporary git worktree and run from there) or this checkout with every framework process
started afresh (`--baseline fresh-processes`: CNNCOMPARE_FORK_SERVER=0). Both use the same
dataset cache, written before the first counted run. Every run has `--debug`, whose table
says where its wall time went: each stage's seconds are kept per run (STAGES) and compared
pair by pair, so that a change of one stage shows even where the whole command's drift hides
it; the last run's table of this checkout is printed after the figures.

    python -m benchmarks.quickstart_time [--runs 3] [--baseline REF|fresh-processes]
        [--json FILE]
    python -m benchmarks.quickstart_time --fresh-clone [--runs 3] [--json FILE]

Prints each run's wall seconds, the medians and the pairwise ratios this / baseline, then
each stage's medians and its median pairwise difference.

`--fresh-clone` times the command as the README states it instead, with no baseline: each run
in a new clone of this checkout's HEAD (no bytecode of the project's own modules yet) with an
empty cnncompare home (the synthetic dataset generated afresh), after the install.
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

if not __package__:  # run by path (python benchmarks/quickstart_time.py): the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import REPO, machine_label

COMMAND = ["compare", "--dataset", "synthetic", "--epochs", "2", "--seeds", "2"]
FRESH = "fresh-processes"  # the baseline that forks nothing
# The stages of a run, in seconds, from its --debug table (compare.process.timing): what the
# command's own clock does not see (the interpreter's start and the CLI's imports before it,
# the servers' exit after it), its parity check and report, and the framework processes'
# training (their first epochs, with each framework's start-up, and their later epochs: a
# change that leaves them alone shows the machine's drift) and everything else they did.
STAGES = ("outside the command's clock", "checks and parity", "first epochs", "later epochs",
          "rest of the processes", "report", "command")


def timed(checkout: Path, out: Path, env: dict[str, str]) -> tuple[float, str]:
    """The wall seconds of the README's command (with --debug) run from `checkout`, and its
    output."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from compare.cli import main; main()",
                           *COMMAND, "--quiet", "--out", str(out), "--debug"],
                          cwd=checkout, env={**env, "PYTHONPATH": str(checkout)},
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: exit {done.returncode}: {done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def stages(output: str, wall_s: float) -> dict[str, float]:
    """STAGES' seconds of one run, read from its --debug table's rows."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) > 2:
            rows[cells[0]] = cells[1:]

    def number(text: str) -> float:
        return float(text) if text else 0.0
    total = rows["all processes"]  # start, import, ..., first epoch, later epochs, ..., process
    first, later = number(total[4]), number(total[5])
    return {"outside the command's clock": wall_s - number(rows["command"][-1]),
            "checks and parity": number(rows["checks and parity"][-1]),
            "first epochs": first, "later epochs": later,
            "rest of the processes": number(total[-1]) - first - later,
            "report": number(rows["report"][-1]), "command": number(rows["command"][-1])}


def fresh_clone_runs(runs: int) -> list[tuple[float, str]]:
    """Each run's wall seconds and output, from a new clone with an empty cnncompare home."""
    done = []
    with tempfile.TemporaryDirectory(prefix="cnncompare-fresh-") as tmp:
        for index in range(runs):
            clone, home = Path(tmp) / f"clone-{index}", Path(tmp) / f"home-{index}"
            subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
            env = {**os.environ, "CNNCOMPARE_HOME": str(home)}
            done.append(timed(clone, clone / "runs" / "quickstart", env))
            print(f"run {index + 1}: {done[-1][0]:.1f} s", file=sys.stderr, flush=True)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="counted runs of each [default: 3]")
    parser.add_argument("--baseline", default=FRESH,
                        help=f"a git ref, or {FRESH} [default: {FRESH}]")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--fresh-clone", action="store_true",
                        help="each run in a new clone with an empty cache, no baseline")
    args = parser.parse_args()
    if args.fresh_clone:
        runs = fresh_clone_runs(args.runs)
        this = [seconds for seconds, _ in runs]
        figures = {"measured_by": "python -m benchmarks.quickstart_time " + " ".join(sys.argv[1:]),
                   "machine": machine_label(), "command": "cnncompare " + " ".join(COMMAND),
                   "form": "a new clone each run, an empty cnncompare home, after the install",
                   "this_s": this, "this_median_s": statistics.median(this),
                   "this_stages_s": [stages(output, seconds) for seconds, output in runs]}
        print(f"{figures['command']} on {figures['machine']}, fresh clones: "
              f"{', '.join(f'{s:.1f}' for s in this)} s, median {figures['this_median_s']:.1f} s")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        return
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
            this_stages, baseline_stages = [], []
            for index in range(args.runs):
                seconds, output = timed(baseline_checkout, scratch / f"baseline-{index}",
                                        baseline_env)
                baseline.append(seconds)
                baseline_stages.append(stages(output, seconds))
                seconds, debug_output = timed(REPO, scratch / f"this-{index}", env)
                this.append(seconds)
                this_stages.append(stages(debug_output, seconds))
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
               "ratio_median": statistics.median(ratios),
               "this_stages_s": this_stages, "baseline_stages_s": baseline_stages}
    print(f"{figures['command']} on {figures['machine']}, {args.runs} alternated runs each")
    print("| form | wall time per run | median |\n|---|---|---|")
    print(f"| this checkout | {', '.join(f'{s:.1f}' for s in this)} s | "
          f"{figures['this_median_s']:.1f} s |")
    print(f"| baseline ({args.baseline}) | {', '.join(f'{s:.1f}' for s in baseline)} s | "
          f"{figures['baseline_median_s']:.1f} s |")
    print(f"this / baseline, pair by pair: {', '.join(f'{r:.2f}' for r in ratios)} "
          f"(median {figures['ratio_median']:.2f})")
    print("\n| stage | this, median | baseline, median | this - baseline, median of the pairs |"
          "\n|---|---|---|---|")
    for stage in STAGES:
        mine = [run[stage] for run in this_stages]
        theirs = [run[stage] for run in baseline_stages]
        print(f"| {stage} | {statistics.median(mine):.2f} s | {statistics.median(theirs):.2f} s | "
              f"{statistics.median(a - b for a, b in zip(mine, theirs)):+.2f} s |")
    table = debug_output[debug_output.find("where the command"):]
    print("\nThe last run of this checkout, with --debug:\n" + table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**figures, "debug_table": table}, indent=2) + "\n")


if __name__ == "__main__":
    main()
