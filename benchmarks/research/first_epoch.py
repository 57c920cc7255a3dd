"""Does a run forked from a fork server start warm? The first epoch (tracing, oneDNN's kernel
generation, allocator growth) of each seed, in the order `compare` runs them: all seeds
forked in turn from one server per framework (compare.process.warm), against the same
seeds each in a process of its own, in alternating blocks so that the machine's drift
hits both, then seed 0 again. A server that leaked a warm cache into its children would make
the later runs' first epochs shorter than the first's, seed 0 again above all (the same data
and weights); processes of their own show how much the first epoch varies anyway (the noise).

    python -m benchmarks.research.first_epoch [--seeds 3] [--rounds 3] [--synthetic-size 2000]

Prints, per framework and seed, the median first-epoch seconds of each form over the
rounds and their min-max, and the later runs' first epoch relative to the first seed's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run by path (python benchmarks/research/first_epoch.py): the checkout
    # on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine_label
from compare import schema
from compare.experiment.config import PipelineConfig, RunConfig
from compare.process import runner, warm


def first_epochs(framework: str, seeds: int, size: int, out: Path, forked: bool) -> list[float]:
    """Each seed's first-epoch training seconds, the seeds run in turn and then seed 0 again
    (`forked`: from one fork server, as compare does; else each in a process of its own).
    Seed 0 again trains the very data and weights of the first run: a warm start would show
    there without the seeds' own differences."""
    times = []
    with warm.fork_servers() if forked else _nothing():
        for index, seed in enumerate([*range(seeds), 0]):
            config = RunConfig(framework=framework, seed=seed, dataset="synthetic",
                               synthetic_train_size=size, synthetic_test_size=size // 5,
                               epochs=2, device="cpu", precision="fp32", quiet=True,
                               profile_steps=0, out=str(out / f"{framework}-{forked}-{index}"),
                               pipeline=PipelineConfig(workers=0, persistent_workers=False))
            outcome = runner.run_framework(config, on_line=lambda line: None)
            if outcome.status != "completed":
                raise SystemExit(f"{framework} seed {seed}: {outcome.status} {outcome.error}")
            times.append(schema.read_result(outcome.result_path)["epochs"][0]["train_time_s"])
    return times


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per block [default: 3]")
    parser.add_argument("--rounds", type=int, default=3,
                        help="blocks of each form, alternated [default: 3]")
    parser.add_argument("--synthetic-size", type=int, default=2000,
                        help="training images [default: 2000]")
    parser.add_argument("--framework", action="append", choices=("tf", "torch"),
                        help="[default: both]")
    args = parser.parse_args()
    print(f"# first epoch by seed, forked from one server vs a process each: "
          f"{machine_label()}, lenet, {args.synthetic_size} synthetic images, float32, "
          f"{args.rounds} rounds x {args.seeds} seeds")
    began = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for framework in args.framework or ["tf", "torch"]:
            found: dict[bool, list[list[float]]] = {True: [], False: []}
            for round_ in range(args.rounds):
                for forked in ((True, False) if round_ % 2 == 0 else (False, True)):
                    found[forked].append(first_epochs(framework, args.seeds,
                                                      args.synthetic_size, Path(tmp), forked))
            print(f"\n{framework}: first-epoch seconds, median (min-max) over "
                  f"{args.rounds} rounds; ratio = the seed's median / seed 0's")
            print("| seed | forked from one server | ratio | a process each | ratio |")
            print("|---|---|---|---|---|")
            medians = {f: [statistics.median(r[s] for r in found[f])
                           for s in range(args.seeds + 1)] for f in found}
            for seed in range(args.seeds + 1):
                cells = []
                for forked in (True, False):
                    column = [r[seed] for r in found[forked]]
                    spread = f"{min(column):.3f}-{max(column):.3f}"
                    cells += [f"{medians[forked][seed]:.3f} ({spread})",
                              f"{medians[forked][seed] / medians[forked][0]:.3f}"]
                print(f"| {seed if seed < args.seeds else '0 again'} | " + " | ".join(cells)
                      + " |")
    print(f"\n({time.time() - began:.0f} s)")


if __name__ == "__main__":
    main()
