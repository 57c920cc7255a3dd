"""benchmarks/checkout_ab.py: two checkouts measured as compare measures, alternated A B B A,
and summed up per comparison and figure against the repeats' own spread."""

from __future__ import annotations

import pytest

from benchmarks import checkout_ab


def _row(side: str, repeat: int, config: str, centre: float, width: float) -> dict:
    entry = {"ratio": centre, "low": centre / width ** 0.5, "high": centre * width ** 0.5,
             "width": width}
    return {"side": side, "repeat": repeat, "config": config, "tf_shared_over_own": entry,
            "torch_shared_over_own": entry, "tf_over_torch_train_time": None}


def test_the_sides_alternate_so_each_goes_first_as_often():
    orders = [checkout_ab.order(repeat) for repeat in range(1, 5)]
    assert orders == [("before", "after"), ("after", "before")] * 2


def test_each_side_is_summed_up_with_the_range_of_its_centres():
    rows = [_row("before", 1, "batch4", 1.00, 1.10), _row("before", 2, "batch4", 0.96, 1.30),
            _row("before", 3, "batch4", 1.04, 1.20), _row("after", 1, "batch4", 0.99, 1.15),
            _row("after", 2, "batch4", 1.01, 1.25), _row("after", 3, "batch4", 1.10, 1.05)]
    summary = checkout_ab.summarise(rows)
    before, after = (summary[side]["batch4"]["tf_shared_over_own"] for side in checkout_ab.SIDES)
    assert before["centres"] == [0.96, 1.04] and before["median_centre"] == 1.00
    assert before["median_width"] == pytest.approx(1.20) and before["widest"] == 1.30
    assert after["median_centre"] == 1.01 and after["median_width"] == pytest.approx(1.15)
    assert checkout_ab.within(before, after)  # 0.01 apart, the range 0.08; 1.15 <= 1.30
    missing = summary["before"]["batch4"]["tf_over_torch_train_time"]
    assert missing["n"] == 0 and missing["centres"] is None
    assert not checkout_ab.within(missing, after)
    test = summary["tests"]["batch4"]["tf_shared_over_own"]
    assert test["centre_p"] == pytest.approx(0.7)  # scipy's exact two-sided p
    assert "tf_over_torch_train_time" not in summary["tests"]["batch4"]  # none to test
    table = checkout_ab.table({"summary": summary})
    assert ("| batch4 | TF shared / `fit` | 1.000 [0.960, 1.040]; 1.20x (1.30x) | "
            f"1.010 [0.990, 1.100]; 1.15x (1.25x) | yes | 0.70, {test['width_p']:.2f} |"
            in table)
    assert "| batch4 | TF / PyTorch training time | none | none | no | n/a |" in table


@pytest.mark.parametrize("centre, width, kept", [
    (1.09, 1.10, False),  # moved further than the centres before spread (0.08)
    (1.00, 1.40, False),  # wider than the widest before
    (0.92, 1.30, True)])  # at the edges of both
def test_within_the_spread_holds_the_centre_and_the_width(centre, width, kept):
    before = {"n": 3, "centres": [0.96, 1.04], "median_centre": 1.0, "median_width": 1.2,
              "widest": 1.30}
    after = {"n": 3, "centres": [centre, centre], "median_centre": centre,
             "median_width": width, "widest": width}
    assert checkout_ab.within(before, after) is kept
