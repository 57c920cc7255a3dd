"""Statistics across seeds: means, standard deviations and 95% confidence intervals.

Intervals use Student's t with n - 1 degrees of freedom (scipy), which is right for the
handful of seeds a comparison runs. Ratios are paired by seed and taken on the log scale,
so the TF/PyTorch and PyTorch/TF intervals are reciprocals of each other.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
from scipy import stats as scipy_stats


def _clean(values: Iterable[float | None]) -> np.ndarray:
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def t_interval(values: np.ndarray) -> tuple[float | None, float | None]:
    """95% confidence interval of the mean; (None, None) below two values."""
    n = len(values)
    if n < 2:
        return None, None
    half = scipy_stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n)
    mean = values.mean()
    return float(mean - half), float(mean + half)


def aggregate(values: Iterable[float | None]) -> dict:
    """{mean, std, ci95_low, ci95_high, n} over the finite values (None where undefined)."""
    x = _clean(values)
    if len(x) == 0:
        return {"mean": None, "std": None, "ci95_low": None, "ci95_high": None, "n": 0}
    low, high = t_interval(x)
    return {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else None,
            "ci95_low": low, "ci95_high": high, "n": int(len(x))}


def paired_ratio(numerator: dict[int, float | None], denominator: dict[int, float | None]) -> dict:
    """Geometric-mean ratio over seeds present in both, with a t interval on log ratios."""
    seeds = sorted(s for s in numerator if s in denominator
                   and _positive(numerator[s]) and _positive(denominator[s]))
    logs = np.array([math.log(numerator[s] / denominator[s]) for s in seeds])
    if len(logs) == 0:
        return {"ratio": None, "ci95_low": None, "ci95_high": None, "n": 0, "seeds": []}
    low, high = t_interval(logs)
    return {"ratio": float(math.exp(logs.mean())),
            "ci95_low": math.exp(low) if low is not None else None,
            "ci95_high": math.exp(high) if high is not None else None,
            "n": int(len(logs)), "seeds": seeds}


def paired_difference(a: dict[int, float | None], b: dict[int, float | None]) -> dict:
    """Mean of a - b over seeds present in both, with a t interval."""
    seeds = sorted(s for s in a if s in b and a[s] is not None and b[s] is not None)
    d = np.array([a[s] - b[s] for s in seeds], dtype=float)
    if len(d) == 0:
        return {"mean": None, "ci95_low": None, "ci95_high": None, "n": 0, "seeds": []}
    low, high = t_interval(d)
    return {"mean": float(d.mean()), "ci95_low": low, "ci95_high": high, "n": int(len(d)), "seeds": seeds}


def _positive(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0
