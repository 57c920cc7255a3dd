"""How long a synchronised timing window lasts (compare.run.schedule.TimingWindows): about
--timing-window-s, and never more than an eighth of an epoch, so that a short epoch still
gives several samples and compare several pairs of windows."""

from __future__ import annotations

import pytest

from compare.experiment.config import RunConfig
from compare.run.schedule import MAX_EPOCH_SHARE, TimingWindows


def _sized(steps_per_epoch: int | None, steps_per_call: int = 1) -> int:
    """The calls per window after a first epoch of calls of 1 ms each (a 0.5 s target
    asks for 500 of them)."""
    windows = TimingWindows(RunConfig(timing_window_s=0.5), steps_per_call,
                            steps_per_epoch=steps_per_epoch)
    for seconds in (0.2, 0.001, 0.001, 0.001):  # the first carries tracing: not counted
        windows.observe(seconds, 1)
    windows.end_epoch()
    return windows.calls


def test_a_window_lasts_the_target_where_an_epoch_holds_eight_of_them():
    assert _sized(None) == 500
    assert _sized(100_000) == 500


@pytest.mark.parametrize("steps_per_epoch, steps_per_call, calls", [
    (500, 1, 63),  # the seed's batch 4 on 2,000 images: 8 windows, the last of 59 steps
    (157, 1, 20),  # the quickstart's batch 32 on 5,000 images: 8 windows
    (500, 16, 4),  # 32 calls, the last of 4 steps: windows of 4 calls
    (5, 1, 1)])    # fewer steps than eight: a window a step
def test_a_short_epoch_is_cut_into_eight_windows_or_so(steps_per_epoch, steps_per_call, calls):
    assert MAX_EPOCH_SHARE == 1 / 8
    assert _sized(steps_per_epoch, steps_per_call) == calls
    windows = -(-steps_per_epoch // (calls * steps_per_call))  # ceil
    assert windows == min(8, steps_per_epoch)


def test_a_fixed_window_is_not_bounded():
    """--timing-window fixes the steps; the bound is only on the sizing."""
    windows = TimingWindows(RunConfig(timing_window=400), steps_per_call=1, steps_per_epoch=500)
    windows.observe(0.001, 400)
    windows.end_epoch()
    assert windows.calls == 400
