"""The verdict's accuracy sentence (compare.report.verdict): each outcome of the paired
difference and the equivalence test, word for word, from accuracies chosen here."""

from __future__ import annotations

import pytest

from compare.report import stats, verdict


@pytest.mark.parametrize("tf_acc, torch_acc, expected", [
    ({0: 0.60, 1: 0.60, 2: 0.60}, {0: 0.60, 1: 0.60, 2: 0.60},
     "Final test accuracy is equivalent within +-0.5 points: TF - PyTorch = +0.00 points (the "
     "same difference on each of 3 seeds)."),
    ({0: 0.625, 1: 0.6875, 2: 0.625}, {0: 0.5, 1: 0.5, 2: 0.5},
     "Final test accuracy is not shown equivalent within +-0.5 points: TensorFlow/Keras scored "
     "14.58 points higher on average (TF - PyTorch 90% CI +8.50 to +20.67 points, TOST "
     "p=0.989, n=3)."),
    ({0: 0.5, 1: 0.5}, {0: 0.5625, 1: 0.5625},
     "Final test accuracy is not shown equivalent within +-0.5 points: PyTorch scored 6.25 "
     "points higher on average (the same difference on each of 2 seeds)."),
    ({0: 0.6, 1: 0.7, 2: 0.8}, {0: 0.6001, 1: 0.7, 2: 0.7999},
     "Final test accuracy is equivalent within +-0.5 points: TF - PyTorch = +0.00 points (TF - "
     "PyTorch 90% CI -0.02 to +0.02 points, TOST p<0.001, n=3)."),
    ({0: 0.60, 1: 0.64, 2: 0.62}, {0: 0.62, 1: 0.62, 2: 0.62},
     "Final test accuracy is not shown equivalent within +-0.5 points: neither framework "
     "scored higher on average (TF - PyTorch 90% CI -3.37 to +3.37 points, TOST p=0.354, n=3)."),
    ({0: 0.6}, {0: 0.59},
     "Not enough seeds to test equivalence of the final test accuracy (n=1; TF - PyTorch = "
     "+1.00 points); run 2 or more seeds, 3+ for an interval."),
    ({0: 0.6}, {1: 0.59},
     "Final test accuracy could not be compared: no seed completed in both frameworks."),
])
def test_the_accuracy_sentence_for_each_outcome_of_the_equivalence_test(tf_acc, torch_acc,
                                                                        expected):
    summary = {"accuracy_difference": stats.paired_difference(tf_acc, torch_acc),
               "accuracy_equivalence": stats.equivalence_test(tf_acc, torch_acc)}
    assert verdict._accuracy_sentence(summary) == expected


def test_the_accuracy_sentence_of_an_older_summary_and_a_wider_margin():
    tf_acc, torch_acc = {0: 0.61, 1: 0.62, 2: 0.63}, {0: 0.6, 1: 0.6, 2: 0.6}
    older = {"accuracy_difference": stats.paired_difference(tf_acc, torch_acc)}
    assert verdict._accuracy_sentence(older) == (
        "Final test accuracy: TF - PyTorch = +2.00 points (n=3); this summary predates the "
        "equivalence test.")
    wide = {**older, "accuracy_equivalence": stats.equivalence_test(tf_acc, torch_acc, 0.05)}
    assert verdict._accuracy_sentence(wide) == (
        "Final test accuracy is equivalent within +-5 points: TF - PyTorch = +2.00 points (TF - "
        "PyTorch 90% CI +0.31 to +3.69 points, TOST p=0.018, n=3).")


def test_a_small_accuracy_lead_names_the_framework_that_scored_higher():
    tf_acc, torch_acc = {0: 0.606, 1: 0.616, 2: 0.596}, {0: 0.6, 1: 0.6, 2: 0.6}
    summary = {"accuracy_difference": stats.paired_difference(tf_acc, torch_acc),
               "accuracy_equivalence": stats.equivalence_test(tf_acc, torch_acc)}
    assert verdict._accuracy_sentence(summary).startswith(
        "Final test accuracy is not shown equivalent within +-0.5 points: TensorFlow/Keras "
        "scored 0.60 points higher on average (")
