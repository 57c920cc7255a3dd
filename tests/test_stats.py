"""Intervals across seeds on known numbers: each stays in its figure's domain."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special as scipy_special
from scipy import stats as scipy_stats

from compare.report import stats

T_975_DF2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)


def test_positive_interval_is_a_geometric_mean_with_a_log_scale_t_interval():
    agg = stats.positive_interval([1.0, 2.0, 4.0, None])
    assert agg["centre"] == pytest.approx(2.0) and agg["n"] == 3 and agg["interval"] == "ci95"
    half = T_975_DF2 * math.log(2) / math.sqrt(3)  # the logs are 0, ln2, 2 ln2: sd = ln 2
    assert agg["low"] == pytest.approx(2 * math.exp(-half))
    assert agg["high"] == pytest.approx(2 * math.exp(half))
    assert 0 < agg["low"] < 1 and agg["low"] * agg["high"] == pytest.approx(4)  # symmetric in logs
    assert "log" in agg["method"]


def test_a_wide_spread_of_times_still_gives_a_positive_interval():
    # The quickstart's evaluation times: a linear t interval went down to -4.74 s.
    agg = stats.positive_interval([0.2, 1.0, 3.5])
    assert agg["low"] > 0 and agg["low"] < agg["centre"] < agg["high"]


def test_two_seeds_give_the_range_and_one_seed_no_interval():
    two = stats.positive_interval([0.5, 2.0])
    assert (two["low"], two["high"], two["interval"]) == (0.5, 2.0, "range")
    assert two["centre"] == pytest.approx(1.0) and two["method"].startswith("n=2: range")
    one = stats.positive_interval([3.0])
    assert one["centre"] == pytest.approx(3.0) and one["low"] is None and one["interval"] is None
    assert stats.positive_interval([None])["n"] == 0
    accuracy = stats.proportion_interval([0.97, 0.99], trials=1000)
    assert (accuracy["low"], accuracy["high"], accuracy["interval"]) == (0.97, 0.99, "range")
    assert accuracy["centre"] == pytest.approx(0.98) == accuracy["mean"]


def test_accuracy_interval_stays_inside_zero_one():
    accuracies = [0.97, 0.99, 0.999]
    agg = stats.proportion_interval(accuracies, trials=1000)
    assert agg["centre"] == pytest.approx(0.98633, abs=1e-5)
    assert "binomial" in agg["method"] and "logit" in agg["method"]
    # Worked by hand from the method: variance of the mean 7.344e-5 (seeds, s^2/3) + 1.348e-5
    # (binomial, p(1-p)/1000); on the logit scale se = sqrt(8.692e-5) / (p(1-p)) = 0.6906;
    # Welch-Satterthwaite df 2.80, t(0.975) 3.314; logit(0.98633) +- 2.289, mapped back. The
    # plain t interval of the same accuracies (mean +- 4.30 sd / sqrt 3) reaches 1.023.
    assert agg["low"] == pytest.approx(0.87943, abs=1e-5)
    assert agg["high"] == pytest.approx(0.99860, abs=1e-5)


def test_accuracy_interval_counts_the_test_set_when_seeds_agree():
    exact = stats.proportion_interval([0.9, 0.9, 0.9], trials=100)
    assert exact["low"] < 0.9 < exact["high"] < 1  # 100 test images: about +-6 points
    assert 0.80 < exact["low"] < 0.85 and 0.94 < exact["high"] < 0.96
    bigger = stats.proportion_interval([0.9, 0.9, 0.9], trials=10_000)
    assert bigger["high"] - bigger["low"] < (exact["high"] - exact["low"]) / 5
    fraction = stats.proportion_interval([0.0, 0.0, 0.0])  # e.g. no input wait at all
    assert fraction["low"] == fraction["high"] == 0.0
    perfect = stats.proportion_interval([1.0, 1.0, 0.99], trials=500)
    assert 0.9 < perfect["low"] < perfect["high"] <= 1.0


def test_paired_ratio_is_a_geometric_mean_with_a_log_scale_interval():
    r = stats.paired_ratio({0: 2.0, 1: 8.0, 2: 3.0, 3: None}, {0: 1.0, 1: 2.0, 2: 3.0, 3: 1.0})
    assert r["ratio"] == pytest.approx((2 * 4 * 1) ** (1 / 3)) and r["seeds"] == [0, 1, 2]
    logs = [math.log(2), math.log(4), 0.0]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    assert r["low"] == pytest.approx(math.exp(mean - T_975_DF2 * sd / math.sqrt(3)))
    inverse = stats.paired_ratio({0: 1.0, 1: 2.0, 2: 3.0}, {0: 2.0, 1: 8.0, 2: 3.0})
    assert inverse["ratio"] == pytest.approx(1 / r["ratio"])
    assert inverse["high"] == pytest.approx(1 / r["low"])
    pair = stats.paired_ratio({0: 2.0, 1: 8.0}, {0: 1.0, 1: 2.0})
    assert (pair["low"], pair["high"], pair["interval"]) == (2.0, 4.0, "range")


def test_paired_difference_mean_and_interval():
    d = stats.paired_difference({0: 0.60, 1: 0.62, 2: 0.61}, {0: 0.58, 1: 0.58, 2: 0.58})
    assert d["mean"] == pytest.approx(0.03) and d["n"] == 3
    assert d["low"] == pytest.approx(0.03 - T_975_DF2 * 0.01 / math.sqrt(3))
    assert stats.paired_difference({0: 0.6, 1: 0.62}, {0: 0.58, 1: 0.58})["interval"] == "range"


def test_tost_declares_identical_accuracies_equivalent_and_a_three_point_gap_not():
    same = stats.equivalence_test({0: 0.91, 1: 0.93, 2: 0.92}, {0: 0.91, 1: 0.93, 2: 0.92})
    assert same["equivalent"] is True and same["p_value"] == 0.0 and same["margin"] == 0.005
    gap = stats.equivalence_test({0: 0.94, 1: 0.96, 2: 0.95}, {0: 0.91, 1: 0.93, 2: 0.92})
    assert gap["equivalent"] is False and gap["mean"] == pytest.approx(0.03)
    noisy = stats.equivalence_test({0: 0.912, 1: 0.929, 2: 0.921, 3: 0.918},
                                   {0: 0.910, 1: 0.931, 2: 0.920, 3: 0.917})
    # differences +0.2, -0.2, +0.1, +0.1 points: the 90% interval is well inside +-0.5
    assert noisy["equivalent"] is True and noisy["p_value"] < 0.05
    assert -0.005 < noisy["ci90_low"] < noisy["ci90_high"] < 0.005
    wide = stats.equivalence_test({0: 0.90, 1: 0.95}, {0: 0.93, 1: 0.92})
    assert wide["equivalent"] is False and wide["p_value"] > 0.05


def test_tost_needs_two_seeds():
    one = stats.equivalence_test({0: 0.9}, {0: 0.9})
    assert one["equivalent"] is None and one["p_value"] is None and one["n"] == 1


# Whole records, each figure worked independently of compare.report.stats (numpy, scipy), so a
# renamed key, a dropped method or a moved boundary fails here rather than in a report.

def _t(df: float) -> float:
    return float(scipy_stats.t.ppf(0.975, df))


def test_no_value_one_value_and_two_values_give_their_whole_records():
    empty = {"centre": None, "mean": None, "std": None, "low": None, "high": None,
             "interval": None, "n": 0, "method": "no completed seed"}
    assert stats.positive_interval([None, math.nan, math.inf]) == empty
    assert stats.proportion_interval([]) == empty
    assert stats.positive_interval([3.0, None, -math.inf]) == {
        "centre": pytest.approx(3.0), "mean": 3.0, "std": None, "n": 1, "low": None,
        "high": None, "interval": None, "method": "n=1: a single seed, no interval"}
    assert stats.positive_interval([0.5, 2.0]) == {
        "centre": pytest.approx(1.0), "mean": 1.25, "std": pytest.approx(1.5 / math.sqrt(2)),
        "n": 2, "low": 0.5, "high": 2.0, "interval": "range",
        "method": "n=2: range (min-max over the seeds; too few seeds for a t interval)"}


def test_a_time_of_zero_or_below_falls_back_to_the_mean_and_range():
    method = "mean and min-max range (a value <= 0 rules out the log scale)"
    assert stats.positive_interval([0.0, 2.0]) == {
        "centre": 1.0, "mean": 1.0, "std": pytest.approx(math.sqrt(2)), "n": 2, "low": 0.0,
        "high": 2.0, "interval": "range", "method": method}
    assert stats.positive_interval([-1.0, 2.0, 5.0]) == {
        "centre": 2.0, "mean": 2.0, "std": 3.0, "low": -1.0, "high": 5.0, "interval": "range",
        "n": 3, "method": method}


def test_three_times_give_the_whole_log_scale_record():
    values = [1.0, 2.0, 4.0, 8.0]
    logs = np.log(values)
    half = _t(3) * logs.std(ddof=1) / 2
    assert stats.positive_interval(values) == {
        "centre": pytest.approx(math.exp(logs.mean())), "mean": 3.75,
        "std": pytest.approx(np.std(values, ddof=1)),
        "low": pytest.approx(math.exp(logs.mean() - half)),
        "high": pytest.approx(math.exp(logs.mean() + half)), "interval": "ci95", "n": 4,
        "method": "geometric mean over seeds; 95% t interval on the log values"}


@pytest.mark.parametrize("trials", [None, 400])
def test_a_proportion_record_adds_the_test_sets_variance_when_it_is_known(trials):
    x = np.array([0.80, 0.84, 0.83, 0.85])
    p, n = x.mean(), len(x)
    seeds = x.var(ddof=1) / n
    binomial = p * (1 - p) / trials if trials else 0.0
    df = (seeds + binomial) ** 2 / (seeds ** 2 / (n - 1))
    half = _t(df) * math.sqrt(seeds + binomial) / (p * (1 - p))
    logit = math.log(p / (1 - p))
    method = ("mean over seeds; 95% interval on the logit scale from the seed-to-seed variance"
              + (" plus the test set's binomial variance p(1-p)/N (delta method, "
                 "Welch-Satterthwaite degrees of freedom)" if trials else ""))
    assert stats.proportion_interval(x, trials) == {
        "centre": pytest.approx(p), "mean": pytest.approx(p),
        "std": pytest.approx(x.std(ddof=1)), "n": 4, "method": method, "interval": "ci95",
        "low": pytest.approx(scipy_special.expit(logit - half)),
        "high": pytest.approx(scipy_special.expit(logit + half))}


def test_identical_proportions_on_a_known_test_set_use_the_normal_quantile():
    half = float(scipy_stats.norm.ppf(0.975)) * math.sqrt(0.9 * 0.1 / 100) / (0.9 * 0.1)
    logit = math.log(0.9 / 0.1)
    same = stats.proportion_interval([0.9, 0.9, 0.9], trials=100)
    assert same["low"] == pytest.approx(scipy_special.expit(logit - half))
    assert same["high"] == pytest.approx(scipy_special.expit(logit + half))
    perfect = stats.proportion_interval([1.0, 1.0, 1.0], trials=50)
    assert perfect["low"] == 1.0 == perfect["high"]  # p(1-p) is 0 at p = 1: no variance
    assert stats.proportion_interval([0.0, 0.001, 0.0], trials=1000)["low"] >= 0.0
    # a mean within half a trial of 1: the logit is taken there, kept finite
    x = np.array([1.0, 0.999, 1.0])
    mean, top = x.mean(), 1 - 0.5 / 1000
    seeds, binomial = x.var(ddof=1) / 3, mean * (1 - mean) / 1000
    df = (seeds + binomial) ** 2 / (seeds ** 2 / 2)
    half = _t(df) * math.sqrt(seeds + binomial) / (top * (1 - top))
    near_one = stats.proportion_interval(x, trials=1000)
    assert near_one["centre"] == pytest.approx(mean) and mean > top
    assert near_one["low"] == pytest.approx(scipy_special.expit(math.log(top / (1 - top)) - half))
    assert near_one["high"] == pytest.approx(scipy_special.expit(math.log(top / (1 - top)) + half))


def test_a_paired_ratio_record_pairs_by_seed_and_names_what_it_divides():
    times_a = {0: 2.0, 1: 3.0, 2: 5.0, 3: 0.0, 4: math.inf, 5: 1.0, 7: 2.0}
    times_b = {0: 1.0, 1: 2.0, 2: 4.0, 3: 1.0, 4: 1.0, 5: -1.0, 6: 1.0}
    ratios = np.array([2.0, 1.5, 1.25])
    logs = np.log(ratios)
    half = _t(2) * logs.std(ddof=1) / math.sqrt(3)
    expected = {"ratio": pytest.approx(math.exp(logs.mean())),
                "low": pytest.approx(math.exp(logs.mean() - half)),
                "high": pytest.approx(math.exp(logs.mean() + half)), "interval": "ci95", "n": 3,
                "seeds": [0, 1, 2], "log_std": pytest.approx(logs.std(ddof=1)),
                "method": "geometric mean of the per-seed TF/PyTorch ratios; 95% t interval on "
                          "the log ratios"}
    assert stats.paired_ratio(times_a, times_b) == expected
    loops = stats.paired_ratio(times_a, times_b, what="shared/own loop")
    assert loops["method"] == ("geometric mean of the per-seed shared/own loop ratios; 95% t "
                               "interval on the log ratios")
    two = stats.paired_ratio({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0})
    assert two["method"].startswith("n=2: range") and two["log_std"] == pytest.approx(
        abs(math.log(2.0) - math.log(1.5)) / math.sqrt(2))
    assert stats.paired_ratio({0: 2.0}, {0: 1.0})["log_std"] is None
    assert stats.paired_ratio({0: 2.0}, {1: 1.0}) == {
        "ratio": None, "low": None, "high": None, "interval": None, "n": 0, "seeds": [],
        "method": "no seed completed in both frameworks"}


def test_side_puts_an_interval_touching_the_threshold_on_it():
    assert stats.side({"ratio": 1.2, "low": 1.1, "high": 1.3}) == 1
    assert stats.side({"ratio": 0.8, "low": 0.7, "high": 0.9}) == -1
    assert stats.side({"ratio": 1.1, "low": 1.0, "high": 1.3}) == 0
    assert stats.side({"ratio": 0.9, "low": 0.8, "high": 1.0}) == 0
    assert stats.side({"ratio": 1.2, "low": 1.1, "high": 1.3}, threshold=1.1) == 0
    assert stats.side({"ratio": 1.2, "low": 1.1, "high": 1.3}, threshold=1.05) == 1
    assert stats.side({"ratio": 1.2, "low": 1.1, "high": 1.3}, threshold=1.35) == -1
    assert stats.side({"ratio": 1.2, "low": None, "high": None}) is None
    assert stats.side({"ratio": 1.2, "low": 1.1, "high": None}) is None
    assert stats.side({"ratio": 1.2, "low": None, "high": 1.3}) is None
    assert stats.side({"ratio": None, "low": 1.1, "high": 1.3}) is None


def test_paired_difference_records_for_three_two_and_no_seeds():
    d = np.array([0.02, 0.04, 0.03, 0.05])
    half = _t(3) * d.std(ddof=1) / 2
    a = {0: 0.62, 1: 0.64, 2: 0.63, 3: 0.65, 9: 0.9}
    b = {0: 0.60, 1: 0.60, 2: 0.60, 3: 0.60, 8: 0.1, 4: None}
    assert stats.paired_difference(a, b) == {
        "centre": pytest.approx(0.035), "mean": pytest.approx(0.035),
        "std": pytest.approx(d.std(ddof=1)), "low": pytest.approx(0.035 - half),
        "high": pytest.approx(0.035 + half), "interval": "ci95", "n": 4, "seeds": [0, 1, 2, 3],
        "method": "mean of the per-seed differences; 95% t interval"}
    two = stats.paired_difference({0: 0.6, 1: 0.65}, {0: 0.5, 1: 0.5})
    assert two == {"centre": pytest.approx(0.125), "mean": pytest.approx(0.125),
                   "std": pytest.approx(0.05 / math.sqrt(2)), "n": 2,
                   "low": pytest.approx(0.1), "high": pytest.approx(0.15), "interval": "range",
                   "method": "n=2: range (min-max over the seeds; too few seeds for a t "
                             "interval)", "seeds": [0, 1]}
    assert stats.paired_difference({}, {0: 1.0}) == {
        "centre": None, "mean": None, "std": None, "low": None, "high": None,
        "interval": None, "n": 0, "method": "no completed seed", "seeds": []}


def test_tost_record_and_its_boundaries():
    a = {0: 0.912, 1: 0.929, 2: 0.921, 3: 0.918}
    b = {0: 0.910, 1: 0.931, 2: 0.920, 3: 0.917}
    d = np.array([0.002, -0.002, 0.001, 0.001])
    t_90 = float(scipy_stats.t.ppf(0.95, 3))
    half = t_90 * d.std(ddof=1) / 2
    p_low = scipy_stats.ttest_1samp(d, -0.005, alternative="greater").pvalue
    p_high = scipy_stats.ttest_1samp(d, 0.005, alternative="less").pvalue
    assert stats.equivalence_test(a, b) == {
        "margin": 0.005, "alpha": 0.05, "n": 4, "seeds": [0, 1, 2, 3],
        "mean": pytest.approx(d.mean()),
        "method": "TOST: two one-sided paired t tests of the per-seed differences against "
                  "+-0.5 percentage points, each at 0.05",
        "p_value": pytest.approx(max(p_low, p_high)), "equivalent": True,
        "ci90_low": pytest.approx(d.mean() - half), "ci90_high": pytest.approx(d.mean() + half)}
    wider = stats.equivalence_test(a, b, margin=0.01)
    assert wider["margin"] == 0.01 and "+-1 percentage points" in wider["method"]
    assert stats.equivalence_test({0: 0.5}, {0: 0.4}) == {
        "margin": 0.005, "alpha": 0.05, "n": 1, "seeds": [0], "mean": pytest.approx(0.1),
        "method": stats.equivalence_test(a, b)["method"], "p_value": None, "equivalent": None,
        "ci90_low": None, "ci90_high": None}
    assert stats.equivalence_test({}, {})["mean"] is None
    # no spread: the one difference either fits strictly inside the margin or it does not
    # (binary fractions, so both seeds' differences are exactly equal)
    outside = stats.equivalence_test({0: 0.5, 1: 0.75}, {0: 0.25, 1: 0.5})
    assert (outside["equivalent"], outside["p_value"]) == (False, 1.0)
    assert outside["ci90_low"] == 0.25 == outside["ci90_high"]
    at_margin = stats.equivalence_test({0: 0.5, 1: 0.75}, {0: 0.25, 1: 0.5}, margin=0.25)
    assert (at_margin["equivalent"], at_margin["p_value"]) == (False, 1.0)
    inside = stats.equivalence_test({0: 0.5 + 2 ** -9, 1: 0.25 + 2 ** -9}, {0: 0.5, 1: 0.25})
    assert (inside["equivalent"], inside["p_value"]) == (True, 0.0)
    assert inside["ci90_low"] == 2 ** -9 == inside["ci90_high"]
    # a spread whose 90% interval crosses the margin: p just above alpha
    crossing = stats.equivalence_test({0: 0.50, 1: 0.51, 2: 0.505}, {0: 0.5, 1: 0.5, 2: 0.5})
    assert crossing["equivalent"] is False and 0.05 < crossing["p_value"] < 1


@pytest.mark.parametrize("distance, needed", [(0.2857, 50), (0.2827, None)])
def test_seeds_to_resolve_counts_up_to_fifty_seeds_and_no_further(distance, needed):
    """Unit spread of the log ratios: n seeds resolve a distance over t(n-1) / sqrt(n), which
    is 0.2842 at 50 seeds, 0.2872 at 49 and 0.2813 at 51."""
    assert _t(48) / math.sqrt(49) > 0.2857 > _t(49) / math.sqrt(50) > 0.2827
    assert 0.2827 > _t(50) / math.sqrt(51)
    ratio = {"ratio": math.exp(distance), "log_std": 1.0}
    assert stats.seeds_to_resolve(ratio) == needed
    assert stats.seeds_to_resolve({"ratio": math.exp(-distance), "log_std": 1.0}) == needed
    assert stats.seeds_to_resolve({"ratio": 2.0, "log_std": 0.0}) == 3
    assert stats.seeds_to_resolve({"ratio": 1.0, "log_std": 0.1}) is None  # on the threshold


def test_a_paired_ratio_leaves_out_a_seed_whose_time_is_not_a_positive_number():
    """A time of 0, or NaN (a broken record), has no log: that seed is not paired."""
    found = stats.paired_ratio({0: 2.0, 1: 1.0, 2: 4.0, 3: math.nan},
                               {0: 1.0, 1: 0.0, 2: 2.0, 3: 1.0})
    assert found["n"] == 2 and found["seeds"] == [0, 2]
    assert found["ratio"] == pytest.approx(2.0) and found["log_std"] == pytest.approx(0.0)
