"""The verdict names whose seeds leave a training-time ratio unresolved
(compare.report.verdict._spread_sentence): on a noisy host one framework's times may spread
from seed to seed far more than the other's."""

from __future__ import annotations

from test_verdict import _summary

from compare.report import stats, verdict


def _with_times(summary: dict, tf_times: dict, torch_times: dict) -> dict:
    """The summary with these per-seed training times: the ratio and each framework's
    figure as the report writes them (a mean and a standard deviation over the seeds)."""
    for fw, times in (("tf", tf_times), ("torch", torch_times)):
        summary["frameworks"][fw]["train_time_s"] = stats.positive_interval(times.values())
    summary["ratios"]["train_time_s"] = stats.paired_ratio(tf_times, torch_times)
    return summary


def test_an_unresolved_ratio_names_whose_seeds_spread():
    """The framework whose training time varies most from seed to seed is named, with both
    spreads, where the ratio stays unresolved; alike spreads are said to be no one
    framework's; a resolved ratio, or seeds that hardly vary, add no sentence."""
    summary = _with_times(_summary(), {0: 10.0, 1: 10.1, 2: 9.9}, {0: 8.5, 1: 12.0, 2: 10.0})
    sentences = verdict.verdict_sentences(summary)
    assert sentences[0].startswith("Training time is not resolved at n=3")
    assert sentences[1] == (
        "The spread that leaves the ratio unresolved is mostly PyTorch's: its training time "
        "varied 17.3% from seed to seed (standard deviation over the mean), "
        "TensorFlow/Keras' 1.0%.")
    summary = _with_times(_summary(), {0: 8.5, 1: 12.0, 2: 10.0}, {0: 10.0, 1: 10.1, 2: 9.9})
    assert verdict._spread_sentence(summary).startswith(
        "The spread that leaves the ratio unresolved is mostly TensorFlow/Keras': its")
    summary = _with_times(_summary(), {0: 9.0, 1: 11.5, 2: 10.0}, {0: 10.0, 1: 9.0, 2: 11.2})
    assert verdict._spread_sentence(summary) == (
        "Both frameworks' training times varied alike from seed to seed (TensorFlow/Keras "
        "12.4%, PyTorch 10.9%; standard deviation over the mean), so the spread that leaves "
        "the ratio unresolved is not one framework's.")
    # 1.6x as much as the other's: that framework's, named (1.5x is the line)
    summary = _with_times(_summary(), {0: 9.2, 1: 10.8, 2: 10.0}, {0: 9.5, 1: 10.5, 2: 10.0})
    spread = verdict.seed_spread(summary)
    assert 1.5 < spread["tf"] / spread["torch"] < 1.7
    assert verdict._spread_sentence(summary).startswith(
        "The spread that leaves the ratio unresolved is mostly TensorFlow/Keras'")
    assert verdict._spread_sentence(_summary()) == ""  # resolved: 1.26x faster
    faster = _with_times(_summary(), {0: 8.0, 1: 10.5, 2: 9.0}, {0: 10.0, 1: 12.0, 2: 11.0})
    assert stats.side(faster["ratios"]["train_time_s"]) == -1  # resolved the other way
    assert verdict._spread_sentence(faster) == ""
    quiet = _with_times(_summary(), {0: 10.0, 1: 10.2, 2: 9.9}, {0: 10.1, 1: 9.9, 2: 10.0})
    assert stats.side(quiet["ratios"]["train_time_s"]) == 0  # unresolved, but no one's spread
    assert verdict._spread_sentence(quiet) == ""
