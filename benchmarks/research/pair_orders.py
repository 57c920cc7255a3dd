"""What the order of the two windows in a pair does to its ratio: from the own loops that
comparisons trained beside their runs (own-loop.json's `window_pairs` and `own_first`), per
batch and framework, the seeds' mean difference between the pairs with the shared loop's
window first and those with the own loop's first (log of the ratio, median per order), and
how far each pair's ratio spreads (log standard deviation, median over the seeds), and the
window's length (the own loop's median step time by its steps a window, median over the
seeds). Half the difference is what the window that comes first pays for coming back to the
processor after something else ran (in log, and in milliseconds of that window): after the
other framework's turn where a turn holds one pair (compare.run.schedule, at the default
windows), else after the other framework's turn in a turn's first pair and after the other
loop's window in its later pairs (with `--timing-window-s 0.125`, four pairs a turn), so the
cost is then a mix of the two.

Records without `own_first` kept one order a seed: the shared loop's window first on even
seeds, the own loop's on odd ones, so there the difference is between the seeds of each
order (the mean of their medians).

    python -m benchmarks.research.pair_orders --out FILE.md FOLDER... (comparison folders, or
        folders holding them)
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

if not __package__:  # run by path: the checkout on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import machine_label, own_loop_records, tabulate_folders  # noqa: E402
from compare.records import OwnLoopRecord  # noqa: E402


def orders(records: list[OwnLoopRecord]) -> list[dict]:
    """A row per batch and framework: seeds, pairs a seed, the order's difference and the
    pairs' spread."""
    groups: dict[tuple[int, str], list[OwnLoopRecord]] = defaultdict(list)
    for record in records:
        groups[(record.config["batch_size"], record.framework)].append(record)
    rows = []
    for (batch, framework), chosen in sorted(groups.items(), reverse=True):
        by_seed, shared_first, own_first, spread = [], [], [], []
        windows_s = [steps.median * steps.steps_per_window / 1000 for record in chosen
                     if (steps := record.steady_step_time_ms) is not None
                     and steps.median and steps.steps_per_window]
        for record in chosen:
            logs = [math.log(shared / own) for shared, own in record.window_pairs]
            spread.append(statistics.pstdev(logs))
            flags = record.own_first or [record.seed % 2 == 1] * len(logs)
            first = [x for x, flag in zip(logs, flags) if not flag]
            second = [x for x, flag in zip(logs, flags) if flag]
            if first and second:
                by_seed.append(statistics.median(first) - statistics.median(second))
            elif first:
                shared_first.append(statistics.median(first))
            else:
                own_first.append(statistics.median(second))
        difference = (statistics.mean(by_seed) if by_seed else
                      statistics.mean(shared_first) - statistics.mean(own_first)
                      if shared_first and own_first else None)
        rows.append({"batch": batch, "framework": framework, "seeds": len(chosen),
                     "pairs": sorted({len(r.window_pairs) for r in chosen}),
                     "within_seeds": bool(by_seed), "difference": difference,
                     "pair_spread": statistics.median(spread),
                     "window_s": statistics.median(windows_s) if windows_s else None})
    return rows


def markdown(rows: list[dict], command: str) -> str:
    lines = ["# The order of a pair's windows and its ratio", "",
             f"Tabulated on {machine_label()}; the comparisons ran where their folder says.", "",
             f"    {command}", "",
             "| batch | framework | seeds | pairs a seed | shared first - own first (log) "
             "| pairs' spread (log sd) | window | the first window's cost |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        how = "within each seed" if row["within_seeds"] else "between the seeds of each order"
        difference = "-" if row["difference"] is None else f"{row['difference']:.3f} ({how})"
        window = "-" if row["window_s"] is None else f"{row['window_s']:.3f} s"
        cost = "-"
        if row["difference"] is not None and row["window_s"] is not None:
            half = row["difference"] / 2
            cost = f"{half:.3f} (log), {half * row['window_s'] * 1000:.1f} ms"
        lines.append(f"| {row['batch']} | {row['framework']} | {row['seeds']} | "
                     f"{', '.join(map(str, row['pairs']))} | {difference} | "
                     f"{row['pair_spread']:.3f} | {window} | {cost} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    def tabulate(folders: list[Path]) -> list[dict]:
        return orders([record for _, record in own_loop_records(folders)])
    tabulate_folders(__doc__.split("\n\n")[0], "benchmarks.research.pair_orders", tabulate,
                     markdown)


if __name__ == "__main__":
    main()
