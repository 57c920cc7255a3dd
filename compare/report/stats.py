"""Statistics across seeds, each interval on the scale where its figure lives.

- Positive figures (times, throughput, memory, energy): geometric mean, 95% Student-t
  interval on the logs, mapped back; it can never go below zero.
- Proportions (accuracy, fractions of time): mean, 95% interval on the logit scale from the
  seed-to-seed variance plus, for accuracies, the test set's binomial variance; it stays in
  [0, 1].
- TF/PyTorch ratios: paired by seed, geometric mean with a t interval on the log ratios, so
  the TF/PyTorch and PyTorch/TF intervals are reciprocals of each other.
- Accuracy differences: paired by seed, mean with a t interval; equivalence by TOST.

A t interval from two values uses t(0.975, 1) = 12.7 and says nothing useful, so with two
seeds every figure shows the min-max range instead, and with one seed no interval at all.
Each result carries `method`, the words the report prints under "how measured".
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import numpy as np

CONFIDENCE = 0.95
MIN_SEEDS_FOR_T = 3  # below this, a range (two seeds) or a single value
EQUIVALENCE_MARGIN = 0.005  # accuracy, fraction: +-0.5 percentage points
EQUIVALENCE_ALPHA = 0.05  # each one-sided test of TOST; i.e. a 90% interval inside the margin

POSITIVE_METHOD = "geometric mean over seeds; 95% t interval on the log values"
PROPORTION_METHOD = ("mean over seeds; 95% interval on the logit scale from the seed-to-seed "
                     "variance")
ACCURACY_METHOD = (PROPORTION_METHOD + " plus the test set's binomial variance p(1-p)/N "
                   "(delta method, Welch-Satterthwaite degrees of freedom)")
RATIO_METHOD = ("geometric mean of the per-seed {} ratios; 95% t interval on the log ratios")
TF_PYTORCH = "TF/PyTorch"  # what paired_ratio divides unless told
DIFFERENCE_METHOD = "mean of the per-seed differences; 95% t interval"
RANGE_METHOD = "n=2: range (min-max over the seeds; too few seeds for a t interval)"
SINGLE_METHOD = "n=1: a single seed, no interval"


def _clean(values: Iterable[float | None]) -> np.ndarray:
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def _scipy() -> tuple[Any, Any]:
    """(scipy.special, scipy.stats), imported at first use: scipy.stats takes about a second
    to import, which commands that compute no statistic (run, doctor, --help) need not pay."""
    from scipy import special, stats
    return special, stats


def _t_quantile(df: float) -> float:
    return float(_scipy()[1].t.ppf(0.5 + CONFIDENCE / 2, df))


def _empty() -> dict:
    return {"centre": None, "mean": None, "std": None, "low": None, "high": None,
            "interval": None, "n": 0, "method": "no completed seed"}


def _small_sample(x: np.ndarray, centre: float) -> dict:
    """One value: itself, no interval; two or more: the min-max range."""
    entry = {"centre": centre, "mean": float(x.mean()),
             "std": float(x.std(ddof=1)) if len(x) > 1 else None, "n": int(len(x))}
    if len(x) == 1:
        return {**entry, "low": None, "high": None, "interval": None, "method": SINGLE_METHOD}
    return {**entry, "low": float(x.min()), "high": float(x.max()), "interval": "range",
            "method": RANGE_METHOD}


def positive_interval(values: Iterable[float | None]) -> dict:
    """Geometric mean and a log-scale 95% interval of strictly positive values (times, sizes).

    Returns {centre, mean, std, low, high, interval, n, method}; `centre` is the figure to
    show (here the geometric mean), `interval` is "ci95", "range" or None.
    """
    x = _clean(values)
    if len(x) == 0:
        return _empty()
    if (x <= 0).any():  # a zero or negative time is a broken record: no log scale for it
        entry = _small_sample(x, float(x.mean()))  # the value, or the range of 2 or more
        return {**entry, "method": "mean and min-max range (a value <= 0 rules out the log scale)"}
    logs = np.log(x)
    centre = float(math.exp(logs.mean()))
    if len(x) < MIN_SEEDS_FOR_T:
        return _small_sample(x, centre)
    half = _t_quantile(len(x) - 1) * logs.std(ddof=1) / math.sqrt(len(x))
    return {"centre": centre, "mean": float(x.mean()), "std": float(x.std(ddof=1)),
            "low": math.exp(logs.mean() - half), "high": math.exp(logs.mean() + half),
            "interval": "ci95", "n": int(len(x)), "method": POSITIVE_METHOD}


def proportion_interval(values: Iterable[float | None], trials: int | None = None) -> dict:
    """Mean of fractions in [0, 1] and a 95% interval that stays inside [0, 1].

    The variance of the mean is the seeds' s^2/n plus, when `trials` (the test-set size N) is
    known, the binomial p(1-p)/N of measuring on one finite test set, which all seeds share
    and which therefore does not shrink with more seeds. The interval is built on the logit
    scale (delta method) and mapped back; its degrees of freedom follow Welch-Satterthwaite.
    """
    x = _clean(values)
    if len(x) == 0:
        return _empty()
    mean = float(x.mean())
    if len(x) < MIN_SEEDS_FOR_T:
        return _small_sample(x, mean)
    n = len(x)
    seed_variance = float(x.var(ddof=1)) / n
    binomial_variance = mean * (1 - mean) / trials if trials else 0.0
    variance = seed_variance + binomial_variance
    method = ACCURACY_METHOD if trials else PROPORTION_METHOD
    entry = {"centre": mean, "mean": mean, "std": float(x.std(ddof=1)), "n": n, "method": method,
             "interval": "ci95"}
    if variance == 0:  # every seed identical and no test-set size to say otherwise
        return {**entry, "low": mean, "high": mean}
    # Keep the logit finite at 0 or 1: half a trial in (the empirical logit), else a tiny step.
    step = 0.5 / trials if trials else 1e-6
    p = min(max(mean, step), 1 - step)
    se_logit = math.sqrt(variance) / (p * (1 - p))
    df = (variance ** 2 / (seed_variance ** 2 / (n - 1))) if seed_variance > 0 else math.inf
    special = _scipy()[0]
    half = _t_quantile(df) * se_logit  # infinite df: the normal quantile
    centre_logit = float(special.logit(p))
    return {**entry, "low": float(special.expit(centre_logit - half)),
            "high": float(special.expit(centre_logit + half))}


def paired_ratio(numerator: Mapping[int, float | None],
                 denominator: Mapping[int, float | None], what: str = TF_PYTORCH) -> dict:
    """Geometric-mean ratio over seeds present in both, with a t interval on log ratios;
    `what` names the ratio in its method ("TF/PyTorch", "shared/own loop")."""
    pairs = _paired(numerator, denominator, _positive)
    return seed_ratios({s: x / y for s, x, y in pairs}, what)


def seed_ratios(per_seed: Mapping[int, float], what: str = TF_PYTORCH) -> dict:
    """paired_ratio's figures from one ratio per seed, measured in whatever way pairs each
    seed's two sides (compare.report.own_loops: the median over adjacent timing windows)."""
    seeds = sorted(s for s, r in per_seed.items() if _positive(r))
    ratios = np.array([per_seed[s] for s in seeds])
    if len(ratios) == 0:
        return {"ratio": None, "low": None, "high": None, "interval": None, "n": 0, "seeds": [],
                "method": "no seed completed in both frameworks"}
    entry = positive_interval(ratios)
    method = entry["method"] if entry["interval"] != "ci95" else RATIO_METHOD.format(what)
    log_std = float(np.log(ratios).std(ddof=1)) if len(ratios) > 1 else None
    return {"ratio": entry["centre"], "low": entry["low"], "high": entry["high"],
            "interval": entry["interval"], "n": entry["n"], "seeds": seeds, "method": method,
            "log_std": log_std}


def side(ratio: dict, threshold: float = 1.0) -> int | None:
    """Where a paired ratio lies against `threshold`: +1 wholly above, -1 wholly below (its
    95% interval from 3 or more seeds, its range from 2), 0 when the interval or range holds
    the threshold; None from a single seed, which cannot tell a difference from noise."""
    if ratio.get("ratio") is None or ratio.get("low") is None or ratio.get("high") is None:
        return None
    if ratio["low"] > threshold:
        return 1
    if ratio["high"] < threshold:
        return -1
    return 0


MOST_SEEDS_SUGGESTED = 50


def seeds_to_resolve(ratio: dict, threshold: float = 1.0) -> int | None:
    """The seeds a paired 95% t interval would need to lie wholly on one side of `threshold`,
    if the per-seed log ratios kept the spread seen here: the smallest n of at least 3 with
    t(n-1) sd / sqrt(n) < |log(ratio / threshold)|. None when the spread is unknown (one
    seed), the ratio sits on the threshold, or it would take more than MOST_SEEDS_SUGGESTED."""
    if ratio.get("ratio") is None or ratio.get("log_std") is None:
        return None
    distance = abs(math.log(ratio["ratio"] / threshold))  # 0 on the threshold: no n does
    for n in range(MIN_SEEDS_FOR_T, MOST_SEEDS_SUGGESTED + 1):
        if _t_quantile(n - 1) * ratio["log_std"] / math.sqrt(n) < distance:
            return n
    return None


def paired_difference(a: Mapping[int, float | None], b: Mapping[int, float | None]) -> dict:
    """Mean of a - b over seeds present in both, with a t interval (range for two seeds)."""
    pairs = _paired(a, b)
    seeds = [s for s, _, _ in pairs]
    d = np.array([x - y for _, x, y in pairs], dtype=float)
    if len(d) == 0:
        return {**_empty(), "seeds": []}
    if len(d) < MIN_SEEDS_FOR_T:
        return {**_small_sample(d, float(d.mean())), "seeds": seeds}
    half = _t_quantile(len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return {"centre": float(d.mean()), "mean": float(d.mean()), "std": float(d.std(ddof=1)),
            "low": float(d.mean() - half), "high": float(d.mean() + half), "interval": "ci95",
            "n": int(len(d)), "seeds": seeds, "method": DIFFERENCE_METHOD}


def equivalence_test(a: Mapping[int, float | None], b: Mapping[int, float | None],
                     margin: float = EQUIVALENCE_MARGIN) -> dict:
    """TOST on the paired per-seed differences a - b: are they within +-margin?

    Two one-sided t tests (scipy's ttest_1samp against -margin and +margin); equivalent when
    both reject at EQUIVALENCE_ALPHA, i.e. when the 90% interval lies inside the margin.
    `equivalent` is None when fewer than two seeds were paired (no variance to test with).
    """
    pairs = _paired(a, b)
    seeds = [s for s, _, _ in pairs]
    d = np.array([x - y for _, x, y in pairs], dtype=float)
    entry = {"margin": margin, "alpha": EQUIVALENCE_ALPHA, "n": int(len(d)), "seeds": seeds,
             "mean": float(d.mean()) if len(d) else None,
             "method": f"TOST: two one-sided paired t tests of the per-seed differences against "
                       f"+-{100 * margin:g} percentage points, each at {EQUIVALENCE_ALPHA}"}
    if len(d) < 2:
        return {**entry, "p_value": None, "equivalent": None, "ci90_low": None, "ci90_high": None}
    if d.std(ddof=1) == 0:  # no spread: t is infinite, the answer is whether the one value fits
        inside = bool(abs(d.mean()) < margin)
        return {**entry, "p_value": 0.0 if inside else 1.0, "equivalent": inside,
                "ci90_low": float(d.mean()), "ci90_high": float(d.mean())}
    scipy_stats = _scipy()[1]
    above_lower = scipy_stats.ttest_1samp(d, -margin, alternative="greater").pvalue
    below_upper = scipy_stats.ttest_1samp(d, margin, alternative="less").pvalue
    p_value = float(max(above_lower, below_upper))
    t_90 = float(scipy_stats.t.ppf(1 - EQUIVALENCE_ALPHA, len(d) - 1))
    half = t_90 * d.std(ddof=1) / math.sqrt(len(d))
    return {**entry, "p_value": p_value, "equivalent": p_value < EQUIVALENCE_ALPHA,
            "ci90_low": float(d.mean() - half), "ci90_high": float(d.mean() + half)}


def _paired(a: Mapping[int, float | None], b: Mapping[int, float | None],
            usable: Callable[[float | None], bool] = lambda v: v is not None,
            ) -> list[tuple[int, float, float]]:
    """(seed, a's value, b's value) for each seed where both values are usable, by seed."""
    return sorted((s, x, y) for s, x in a.items() if s in b and usable(x) and usable(y := b[s])
                  and x is not None and y is not None)


def _positive(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0
