"""The verdict names whose seeds leave a training-time ratio unresolved
(compare.report.verdict._spread_sentence): on a noisy host one framework's times may spread
from seed to seed far more than the other's."""

from __future__ import annotations

import numpy as np
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
    summary = _with_times(_summary(), {0: 7.0, 1: 12.0, 2: 10.0}, {0: 9.0, 1: 10.6, 2: 10.4})
    assert verdict._spread_sentence(summary) == (
        "The spread that leaves the ratio unresolved is mostly TensorFlow/Keras': its training "
        "time varied 26.0% from seed to seed (standard deviation over the mean), PyTorch's "
        "8.7%.")
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


def _with_phases(first: tuple[dict, dict], steady: tuple[dict, dict]) -> dict:
    """A summary whose per-seed training times are these first epochs plus these steady
    epochs (TensorFlow's, PyTorch's), with every figure and ratio the report writes of them."""
    summary = _summary()
    for key, (tf_times, torch_times) in (("warmup_time_s", first),
                                         ("steady_train_time_s", steady)):
        for fw, times in (("tf", tf_times), ("torch", torch_times)):
            summary["frameworks"][fw][key] = stats.positive_interval(times.values())
        summary["ratios"][key] = stats.paired_ratio(tf_times, torch_times)
    totals = [{seed: first[i][seed] + steady[i][seed] for seed in first[i]} for i in (0, 1)]
    return _with_times(summary, *totals)


def _log_spread(tf_times: dict, torch_times: dict) -> float:
    return float(np.log([tf_times[s] / torch_times[s] for s in tf_times]).std(ddof=1))


def test_an_unresolved_ratio_names_the_part_of_the_training_time_that_spreads():
    """Where the headline stays unresolved, the part (the first epoch or the epochs after it)
    whose TF / PyTorch ratio spreads most over the seeds, weighted by its share of the
    training time, is named with both spreads. Alike parts, or a resolved ratio, add no
    sentence."""
    noisy_first = ({0: 3.0, 1: 4.5, 2: 3.3}, {0: 4.0, 1: 3.0, 2: 3.6})
    quiet_steady = ({0: 6.0, 1: 6.1, 2: 5.9}, {0: 6.6, 1: 6.7, 2: 6.5})
    summary = _with_phases(noisy_first, quiet_steady)
    assert stats.side(summary["ratios"]["train_time_s"]) == 0
    share = sum(verdict.first_epoch_shares(summary).values()) / 2
    assert 0.3 < share < 0.4
    said = (f"Most of that spread is the first epoch's: the TF / PyTorch ratio of the first "
            f"epoch varied {100 * _log_spread(*noisy_first):.1f}% from seed to seed, of the "
            f"epochs after it {100 * _log_spread(*quiet_steady):.1f}% (standard deviation of "
            f"the log ratio), the first epoch {100 * share:.0f}% of the training time")
    assert said.startswith("Most of that spread is the first epoch's: the TF / PyTorch ratio "
                           "of the first epoch varied 35.7% from seed to seed, of the epochs "
                           "after it 0.2%")
    sentences = verdict.verdict_sentences(summary)
    assert sentences[2] == said + "."
    # the same spreads the other way round: steady training's, over two thirds of the time
    summary = _with_phases(({0: 3.0, 1: 3.05, 2: 2.95}, {0: 3.3, 1: 3.35, 2: 3.25}),
                           ({0: 6.0, 1: 9.0, 2: 6.6}, {0: 8.0, 1: 6.0, 2: 7.2}))
    assert stats.side(summary["ratios"]["train_time_s"]) == 0
    assert verdict._phase_spread_sentence(summary).startswith(
        "Most of that spread is steady training's: the TF / PyTorch ratio of the first epoch "
        "varied 0.2% from seed to seed, of the epochs after it 35.7%")
    # both parts alike, weighted by their shares: no part named
    alike = _with_phases(({0: 3.0, 1: 3.6, 2: 3.2}, {0: 3.4, 1: 3.1, 2: 3.3}),
                         ({0: 6.0, 1: 6.6, 2: 6.2}, {0: 6.4, 1: 6.1, 2: 6.3}))
    assert stats.side(alike["ratios"]["train_time_s"]) == 0
    assert verdict._phase_spread_sentence(alike) == ""
    # resolved: TensorFlow clearly faster in every part
    faster = _with_phases(({0: 2.0, 1: 2.9, 2: 2.2}, {0: 4.0, 1: 4.0, 2: 4.1}),
                          ({0: 4.0, 1: 4.1, 2: 3.9}, {0: 8.0, 1: 8.2, 2: 8.1}))
    assert stats.side(faster["ratios"]["train_time_s"]) == -1
    assert verdict._phase_spread_sentence(faster) == ""


def test_the_part_named_is_weighted_by_its_share_and_needs_both_spreads_and_shares():
    """The figures as a summary holds them: spreads of 30% (first epoch) and 2% (steady
    training) with the first epoch 31.4% of each framework's training time; without either
    spread, or without the shares, no part is named."""
    summary = {"ratios": {"train_time_s": {"ratio": 1.0, "low": 0.8, "high": 1.25},
                          "warmup_time_s": {"log_std": 0.3},
                          "steady_train_time_s": {"log_std": 0.02}},
               "frameworks": {fw: {"warmup_time_s": {"centre": 3.14},
                                   "train_time_s": {"centre": 10.0}} for fw in ("tf", "torch")}}
    assert verdict._phase_spread_sentence(summary) == (
        "Most of that spread is the first epoch's: the TF / PyTorch ratio of the first epoch "
        "varied 30.0% from seed to seed, of the epochs after it 2.0% (standard deviation of "
        "the log ratio), the first epoch 31% of the training time.")
    # 0.314 x 0.3 = 0.0942 against 0.686 x 0.092 = 0.0631: under 1.5x, no part is named
    summary["ratios"]["steady_train_time_s"]["log_std"] = 0.092
    assert verdict._phase_spread_sentence(summary) == ""
    for missing in ("warmup_time_s", "steady_train_time_s"):
        summary["ratios"][missing]["log_std"] = None
        assert verdict._phase_spread_sentence(summary) == ""
        summary["ratios"][missing]["log_std"] = 0.02 if "steady" in missing else 0.3
    assert verdict._phase_spread_sentence(summary)  # both back: named again
    summary["frameworks"] = {}
    assert verdict._phase_spread_sentence(summary) == ""
