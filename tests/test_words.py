"""The comparative words (compare.report.words): each sentence a reader sees, for every side an
interval can fall on, from ratios computed by compare.report.stats over per-seed times."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from compare.report import stats, words


def _ratio(tf_times: list[float], torch_times: list[float]) -> dict:
    """The TF/PyTorch ratio of per-seed times, as the report computes it."""
    return stats.paired_ratio(dict(enumerate(tf_times)), dict(enumerate(torch_times)))


def test_spread_names_the_interval_its_seeds_support_and_inverts_it():
    assert words.spread(_ratio([2.0], [1.0])) == "one seed, no interval"
    assert words.spread({"ratio": 2.0, "low": 1.5, "high": None}) == "one seed, no interval"
    two = _ratio([2.0, 3.0], [1.0, 1.0])
    assert words.spread(two) == "range 2.00x-3.00x over 2 seeds"
    assert words.spread(two, invert=True) == "range 0.33x-0.50x over 2 seeds"
    three = _ratio([2.0, 2.2, 1.8], [1.0, 1.0, 1.0])
    low, high = three["low"], three["high"]
    assert words.spread(three) == f"95% CI {low:.2f}x-{high:.2f}x over 3 seeds"
    assert words.spread(three, invert=True) == f"95% CI {1 / high:.2f}x-{1 / low:.2f}x over 3 seeds"


def _seeds_needed(log_std: float, distance: float) -> int | None:
    for n in range(3, 51):
        if scipy_stats.t.ppf(0.975, n - 1) * log_std / math.sqrt(n) < distance:
            return n
    return None


def test_to_resolve_says_how_many_seeds_a_difference_of_this_size_needs():
    assert words.to_resolve(_ratio([1.1], [1.0])) == "run 3 or more seeds for an interval"
    close = _ratio([1.2, 1.05], [1.0, 1.0])
    needed = _seeds_needed(close["log_std"], abs(math.log(close["ratio"])))
    assert needed is not None and needed > 3
    assert stats.seeds_to_resolve(close) == needed
    assert words.to_resolve(close) == (f"about {needed} seeds would resolve a difference of this "
                                       "size, if the seeds varied as these did")
    hopeless = _ratio([1.5, 0.7], [1.0, 1.0])
    assert stats.seeds_to_resolve(hopeless) is None
    assert words.to_resolve(hopeless) == (
        "more than 50 seeds would be needed to resolve a difference this small, if the seeds "
        "varied as these did")
    # against a threshold at the ratio itself no number of seeds resolves it
    assert stats.seeds_to_resolve(close, threshold=close["ratio"]) is None
    assert words.to_resolve(close, threshold=close["ratio"]).startswith("more than 50 seeds")


def test_seeds_to_resolve_is_the_smallest_n_and_at_least_three():
    clear = _ratio([2.0, 2.1], [1.0, 1.0])
    assert stats.seeds_to_resolve(clear) == 3  # resolved at any n a t interval allows
    assert stats.seeds_to_resolve({"ratio": 1.2}) is None  # one seed: no spread known
    for tf in ([1.2, 1.0], [1.3, 1.0], [1.1, 1.02], [1.06, 1.01]):
        ratio = _ratio(tf, [1.0, 1.0])
        assert stats.seeds_to_resolve(ratio) == _seeds_needed(ratio["log_std"],
                                                              abs(math.log(ratio["ratio"])))


def test_time_ratio_words_for_each_side_of_its_interval():
    none = {"ratio": None}
    assert words.time_ratio(none, "training time") == (
        "training time could not be compared: no seed completed in both frameworks")
    one = _ratio([1.5], [1.0])
    assert words.time_ratio(one, "training time", ", too short to time") == (
        "training time, too short to time: TF / PyTorch 1.50 from one seed, which cannot tell "
        "a difference from run-to-run noise; run 3 or more seeds for an interval")
    unresolved = _ratio([1.1, 0.95], [1.0, 1.0])
    assert words.time_ratio(unresolved, "training time") == (
        f"training time is not resolved at n=2: TF / PyTorch {unresolved['ratio']:.2f} "
        f"(range 0.95x-1.10x over 2 seeds, which includes no difference); "
        f"{words.to_resolve(unresolved)}")
    torch_faster = _ratio([2.0, 2.5], [1.0, 1.0])
    assert words.time_ratio(torch_faster, "training time", " (x)") == (
        f"PyTorch trained {torch_faster['ratio']:.2f}x faster than TensorFlow/Keras "
        f"(training time (x), range 2.00x-2.50x over 2 seeds)")
    tf_faster = _ratio([1.0, 1.0], [2.0, 4.0])
    assert words.time_ratio(tf_faster, "step time") == (
        f"TensorFlow/Keras trained {1 / tf_faster['ratio']:.2f}x faster than PyTorch "
        f"(step time, range 2.00x-4.00x over 2 seeds)")
    equal = {"ratio": 1.0, "low": 1.0 + 1e-9, "high": 1.1, "n": 2}  # wholly above, ratio 1
    assert words.time_ratio(equal, "t").startswith("PyTorch trained 1.00x faster than")


@pytest.mark.parametrize("ratio, expected", [
    ({"ratio": None}, None),
    ({"ratio": 1.6, "low": 1.1, "high": 1.9, "n": 3, "interval": "ci95"},
     "60% slower than Keras fit"),
    ({"ratio": 0.4, "low": 0.3, "high": 0.9, "n": 3, "interval": "ci95"},
     "60% faster than Keras fit"),
    ({"ratio": 0.997, "low": 0.996, "high": 0.998, "n": 2, "interval": "range"},
     "0.3% faster than Keras fit"),  # resolved, but under 1%: never "0% faster"
    ({"ratio": 1.009, "low": 1.002, "high": 1.016, "n": 3, "interval": "ci95"},
     "0.9% slower than Keras fit"),
    ({"ratio": 1.0096, "low": 1.002, "high": 1.016, "n": 3, "interval": "ci95"},
     "1% slower than Keras fit"),
    ({"ratio": 1.01, "low": 0.98, "high": 1.03, "n": 3, "interval": "ci95"},
     "within 3% of Keras fit (95% CI 0.98x-1.03x over 3 seeds)"),
    ({"ratio": 1.0, "low": 0.999, "high": 1.002, "n": 2, "interval": "range"},
     "within 1% of Keras fit (range 1.00x-1.00x over 2 seeds)"),  # never "within 0%"
    ({"ratio": 1.0, "low": 0.966, "high": 1.02, "n": 3, "interval": "ci95"},
     "within 4% of Keras fit (95% CI 0.97x-1.02x over 3 seeds)"),  # 3.4% rounds up
    ({"ratio": 1.0, "low": 0.95, "high": 1.05, "n": 3, "interval": "ci95"},
     "within 5% of Keras fit (95% CI 0.95x-1.05x over 3 seeds)"),  # exactly at `close`
    ({"ratio": 1.0, "low": 0.9499, "high": 1.02, "n": 3, "interval": "ci95"},
     "1.00x the time of Keras fit, not resolved at n=3 (95% CI 0.95x-1.02x over 3 seeds)"),
    ({"ratio": 1.07, "low": None, "high": None, "n": 1},
     "1.07x the time of Keras fit (one seed, no interval)"),
])
def test_loop_ratio_words_for_each_side_of_its_interval(ratio, expected):
    assert words.loop_ratio(ratio, "Keras fit", close=1.05) == expected


def test_a_name_takes_its_possessive_and_a_share_its_percentage():
    assert words.possessive("PyTorch") == "PyTorch's"
    assert words.possessive("TensorFlow/Keras") == "TensorFlow/Keras'"
    # whole percentages from 0.95% on; under it one decimal, so 0.3% does not read "0%"
    assert [words._percent(share) for share in (0.25, 0.0095, 0.00945, 0.00248)] == [
        "25%", "1%", "0.9%", "0.2%"]
