"""Intervals across seeds on known numbers: each stays in its figure's domain."""

from __future__ import annotations

import math

import pytest

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
