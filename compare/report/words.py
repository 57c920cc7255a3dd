"""Comparative words that follow the intervals. A ratio of times is called faster, slower or
within only when its 95% interval (3 or more seeds) or its range (2 seeds) supports the word;
otherwise the sentence says the difference is not resolved at this n and what would resolve
it. One seed supports no comparative word at all."""

from __future__ import annotations

import math

from compare.experiment.config import FRAMEWORK_NAMES
from compare.report import stats

TF, TORCH = FRAMEWORK_NAMES["tf"], FRAMEWORK_NAMES["torch"]


def possessive(name: str) -> str:
    """"PyTorch's", "TensorFlow/Keras'"."""
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def spread(ratio: dict, invert: bool = False) -> str:
    """'95% CI 1.10x-1.35x over 5 seeds', 'range 0.95x-1.33x over 2 seeds' or 'one seed, no
    interval'; `invert` gives the interval of 1 / ratio."""
    low, high = ratio.get("low"), ratio.get("high")
    if low is None or high is None:
        return "one seed, no interval"
    if invert:
        low, high = 1 / high, 1 / low
    kind = "95% CI" if ratio.get("interval") == "ci95" else "range"
    return f"{kind} {low:.2f}x-{high:.2f}x over {ratio['n']} seeds"


def to_resolve(ratio: dict, threshold: float = 1.0) -> str:
    """What n would resolve a difference of this size from `threshold`."""
    if ratio["n"] < 2:
        return "run 3 or more seeds for an interval"
    needed = stats.seeds_to_resolve(ratio, threshold)
    if needed is None:
        return (f"more than {stats.MOST_SEEDS_SUGGESTED} seeds would be needed to resolve a "
                f"difference this small, if the seeds varied as these did")
    return (f"about {needed} seeds would resolve a difference of this size, if the seeds "
            f"varied as these did")


def time_ratio(ratio: dict, measure: str, mark: str = "") -> str:
    """A TF / PyTorch ratio of `measure` (a time) in the words its interval supports, e.g.
    "PyTorch trained 1.22x faster than TensorFlow/Keras (training time, range 1.18x-1.25x
    over 2 seeds)" or "training time is not resolved at n=2: TF / PyTorch 1.12 (range
    0.95x-1.33x over 2 seeds, which includes no difference); about 9 seeds would ...".
    `mark` follows the measure's name (e.g. ", too short to time")."""
    r = ratio.get("ratio")
    if r is None:
        return f"{measure} could not be compared: no seed completed in both frameworks"
    where = stats.side(ratio)
    if where is None:
        return (f"{measure}{mark}: TF / PyTorch {r:.2f} from one seed, which cannot tell a "
                f"difference from run-to-run noise; run 3 or more seeds for an interval")
    if where == 0:
        return (f"{measure}{mark} is not resolved at n={ratio['n']}: TF / PyTorch {r:.2f} "
                f"({spread(ratio)}, which includes no difference); {to_resolve(ratio)}")
    if r >= 1:
        faster, slower, factor, invert = TORCH, TF, r, False
    else:
        faster, slower, factor, invert = TF, TORCH, 1 / r, True
    return (f"{faster} trained {factor:.2f}x faster than {slower} ({measure}{mark}, "
            f"{spread(ratio, invert)})")


def _percent(share: float) -> str:
    """A share as a percentage, a decimal under 1% (a resolved 0.3% is not "0%")."""
    return f"{100 * share:.0f}%" if 100 * share >= 0.95 else f"{100 * share:.1f}%"


def loop_ratio(ratio: dict, other: str, close: float) -> str | None:
    """A loop's time over `other`'s in the words its interval supports: "12% slower than
    Keras fit", "within 3% of ...", or "1.12x the time of ..., not resolved at n=2 (...)".
    "within X%" needs the whole interval inside 1 +- X%, X at most `close` - 1."""
    r = ratio.get("ratio")
    if r is None:
        return None
    where = stats.side(ratio)
    if where == 1:
        return f"{_percent(r - 1)} slower than {other}"
    if where == -1:
        return f"{_percent(1 - r)} faster than {other}"
    if where == 0:
        widest = max(ratio["high"] - 1, 1 - ratio["low"])
        if widest <= close - 1:
            return (f"within {max(1, math.ceil(round(100 * widest, 6)))}% of {other} "
                    f"({spread(ratio)})")
        return (f"{r:.2f}x the time of {other}, not resolved at n={ratio['n']} "
                f"({spread(ratio)})")
    return f"{r:.2f}x the time of {other} (one seed, no interval)"
