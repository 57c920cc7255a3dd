"""How far a comparison's seeds spread in their shared / own ratios, against what the noise of
their pairs of windows predicts. From the own loops that comparisons trained beside their runs
(own-loop.json's `window_pairs` and `own_first`), per batch and framework:

- the seeds' spread: the log standard deviation of the comparison's per-seed ratios (each as
  the report computes it, compare.report.own_loops.pairs_ratio), root mean square over the
  comparisons;
- the pairs' prediction: each seed's ratio recomputed on its pairs drawn again with
  replacement (each order's pairs among themselves, 1,000 draws), whose standard deviation is
  how far that seed's ratio would move from its pairs' noise alone; root mean square over
  every seed;
- the intervals within RESOLVING (1.2x, high / low, as the report computes them), counted,
  and the share that the pairs' prediction expects: with 3 seeds of spread s, a 95% t
  interval is within RESOLVING when s < c = log(RESOLVING) sqrt(3) / (2 t(0.975, 2)), and
  for normal seeds with standard deviation sigma, 2 s^2 / sigma^2 follows chi-square with 2
  degrees of freedom, so the chance is 1 - exp(-c^2 / sigma^2).

Where the seeds spread no more than the pairs predict, a seed's ratio is as precise as its
pairs make it, and only more seconds of paired training a seed narrow the interval.

    python -m benchmarks.research.seed_spread --out FILE.md FOLDER... (comparison folders, or
        folders holding them)
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine_label, own_loop_records, tabulate_folders
from compare.records import OwnLoopRecord
from compare.report import stats
from compare.report.own_loops import pairs_ratio

RESOLVING = 1.2  # the interval width (high / low) that resolves a 5% harness cost
DRAWS = 1000  # bootstrap draws of each seed's pairs
SEEDS = 3  # the seeds the chance is computed for (its closed form holds for 3)


def comparisons(folders: list[Path]) -> dict[tuple[Path, str], list[OwnLoopRecord]]:
    """(comparison folder, framework): its completed own-loop records with pairs, by seed."""
    found: dict[tuple[Path, str], list[OwnLoopRecord]] = defaultdict(list)
    for comparison, record in own_loop_records(folders):
        if record.status == "completed":
            found[(comparison, record.framework)].append(record)
    return dict(found)


def seed_noise(record: OwnLoopRecord, rng: np.random.Generator, draws: int = DRAWS) -> float:
    """The standard deviation (log) of the seed's ratio over its pairs drawn again, each
    order's among themselves so that every draw keeps the seed's balance of orders."""
    pairs = record.window_pairs
    flags = record.own_first or [False] * len(pairs)
    groups = [[i for i, flag in enumerate(flags) if flag == order] for order in (False, True)]
    logs = []
    for _ in range(draws):
        chosen = [int(i) for group in groups if group
                  for i in rng.choice(group, size=len(group))]
        logs.append(math.log(pairs_ratio([pairs[i] for i in chosen], [flags[i] for i in chosen])))
    return float(np.std(logs))


def spread_limit(seeds: int = SEEDS, resolving: float = RESOLVING) -> float:
    """The seeds' sample standard deviation (log) under which their 95% t interval is no
    wider than `resolving` (high / low)."""
    t = scipy_stats.t.ppf(0.5 + stats.CONFIDENCE / 2, seeds - 1)
    return math.log(resolving) * math.sqrt(seeds) / (2 * t)


def chance_within(sigma: float) -> float:
    """The chance that SEEDS (3) normal log ratios of standard deviation `sigma` give a 95% t
    interval no wider than RESOLVING: 2 s^2 / sigma^2 follows chi-square with 2 degrees of
    freedom, whose distribution function is 1 - exp(-x / 2)."""
    return 1 - math.exp(-(spread_limit() / sigma) ** 2) if sigma > 0 else 1.0


def noise_for(chance: float) -> float:
    """The standard deviation (log) at which chance_within gives `chance`."""
    return spread_limit() / math.sqrt(-math.log(1 - chance))


def rows(found: dict[tuple[Path, str], list[dict]], seed: int = 0) -> list[dict]:
    """A row per batch and framework over the comparisons with 3 seeds or more."""
    rng = np.random.default_rng(seed)
    groups: dict[tuple[int, str], list[list[OwnLoopRecord]]] = defaultdict(list)
    for (_, framework), records in sorted(found.items(), key=lambda item: str(item[0])):
        if len(records) >= SEEDS:
            groups[(records[0].config["batch_size"], framework)].append(records)
    table = []
    for (batch, framework), chosen in sorted(groups.items(), reverse=True):
        spreads, noises, within = [], [], 0
        for records in chosen:
            ratios = {r.seed: pairs_ratio(r.window_pairs, r.own_first or None)
                      for r in records}
            spreads.append(float(np.std(np.log(list(ratios.values())), ddof=1)))
            noises += [seed_noise(r, rng) for r in records]
            found_ratio = stats.seed_ratios(ratios, "shared/own loop")
            within += found_ratio["high"] / found_ratio["low"] <= RESOLVING
        spread = math.sqrt(float(np.mean(np.square(spreads))))
        noise = math.sqrt(float(np.mean(np.square(noises))))
        table.append({"batch": batch, "framework": framework, "comparisons": len(chosen),
                      "seeds_spread": spread, "pairs_noise": noise,
                      "within": within, "chance_from_seeds": chance_within(spread),
                      "chance_from_pairs": chance_within(noise)})
    return table


def markdown(table: list[dict], command: str) -> str:
    lines = ["# The seeds' spread against their pairs' noise", "",
             f"Tabulated on {machine_label()}; the comparisons ran where their folder says.", "",
             f"    {command}", "",
             (f"The chance that {SEEDS} seeds give an interval within {RESOLVING}x is 0.95 "
              f"where a seed's noise is under {noise_for(0.95):.4f} (log sd)."), "",
             ("| batch | framework | comparisons | seeds' spread (log sd) | their pairs' noise "
              f"(log sd) | intervals within {RESOLVING}x | the chance at the seeds' spread "
              "| at the pairs' noise |"),
             "|---|---|---|---|---|---|---|---|"]
    for row in table:
        lines.append(f"| {row['batch']} | {row['framework']} | {row['comparisons']} | "
                     f"{row['seeds_spread']:.3f} | {row['pairs_noise']:.3f} | "
                     f"{row['within']} of {row['comparisons']} | "
                     f"{row['chance_from_seeds']:.2f} | {row['chance_from_pairs']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    def tabulate(folders: list[Path]) -> list[dict]:
        return rows(comparisons(folders))
    tabulate_folders(__doc__.split("\n\n")[0], "benchmarks.research.seed_spread", tabulate,
                     markdown)


if __name__ == "__main__":
    main()
