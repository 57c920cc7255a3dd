"""A run's timing schedule (compare.run.schedule.Schedule) on its own, with a stand-in trainer,
handover and twin: when the turn passes, which window of a pair comes first, what the twin
trains between the run's windows and what pairs it is given at the end. The processes and real
loops behind these rules are tested in test_turns.py and test_own_loop_beside.py."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from compare.experiment.config import RunConfig
from compare.run.schedule import MAX_EPOCH_SHARE, TURN_S, Schedule, TimingWindows


class Handover:
    """The run's end of the turns: counts its turns, as the parent would give them."""

    def __init__(self, gone: bool = False) -> None:
        self.passes: list[float | None] = []
        self.gone = gone

    def taken(self) -> int | None:
        return None if self.gone else 1 + len(self.passes)

    def pass_turn(self, done: float | None = None) -> None:
        self.passes.append(done)


class Twin:
    """The own-loop twin: each window it trains takes the next of `ms` ms per step."""

    def __init__(self, ms: list[float | None]) -> None:
        self.ms = list(ms)
        self.log: list[str] = []
        self.finished: tuple[list[list[float]], list[bool]] | None = None

    def window(self) -> float | None:
        self.log.append("own")
        return self.ms.pop(0)

    def first_epoch(self) -> None:
        self.log.append("own epoch")

    def finish(self, pairs: list[list[float]], own_first: list[bool]) -> None:
        self.finished = (pairs, own_first)

    def stop(self, exc: BaseException) -> None:
        self.log.append(f"stop {exc}")

    def close(self) -> None:
        self.log.append("close")


def _trainer(steps_per_epoch: int = 64, processes: int = 1,
             gathered: list[list[float]] | None = None) -> SimpleNamespace:
    return SimpleNamespace(steps_per_call=1, steps_per_epoch=steps_per_epoch,
                           choice=SimpleNamespace(processes=processes),
                           gather_figures=lambda own: gathered or [own])


def _schedule(config: RunConfig, trainer: SimpleNamespace | None = None,
              handover: Handover | None = None, twin: Twin | None = None) -> Schedule:
    """The schedule of a run of `config` with these stand-ins (typed as duck types)."""
    return Schedule(config, trainer or _trainer(), handover, twin)  # type: ignore[arg-type]


def _epoch(schedule: Schedule, windows: int, done_before: float, share: float,
           log: list[str], seconds: float = 0.5, steps: int = 4) -> float:
    """One epoch of `windows` windows of the run, each `share` of its steps and `steps`
    steps in `seconds`, as the loop drives the schedule; the share done after it."""
    schedule.open_epoch()
    done = done_before
    for window in range(windows):
        log.append("shared")
        done += share
        schedule.between_windows(seconds, 1, steps, done, epoch_goes_on=window < windows - 1)
    schedule.end_epoch_training()
    schedule.after_epoch()
    return done


def test_the_turn_passes_after_turn_s_of_windows_and_never_after_the_runs_last():
    """Windows of 0.125 s: four to a turn (TURN_S), each pass saying the share done; the
    run's last window keeps the turn. A handover whose parent is gone is not offered it."""
    handover = Handover()
    config = RunConfig(epochs=1, timing_window_s=0.125)
    schedule = _schedule(config, handover=handover)
    assert schedule.windows_per_turn == round(TURN_S / 0.125) == 4
    log: list[str] = []
    _epoch(schedule, 8, 0.0, 1 / 8 / 100, log)  # 8 windows of 1/800 of the steps each
    assert handover.passes == pytest.approx([4 / 800, 8 / 800])
    last = Handover()
    schedule = _schedule(RunConfig(epochs=1, timing_window=4), handover=last)
    _epoch(schedule, 4, 0.0, 0.25, log)
    assert last.passes == pytest.approx([0.25, 0.5, 0.75])  # not after the fourth: done
    gone = Handover(gone=True)
    schedule = _schedule(RunConfig(epochs=1), handover=gone)
    _epoch(schedule, 3, 0.0, 0.1, log)
    assert gone.passes == []


def test_an_eighth_of_an_epoch_ends_a_turn_before_turn_s():
    """Windows of 0.1 s would make five to a turn; at a twelfth of an epoch each, the turn
    passes after the second, which brings it to an eighth; over 2 epochs the share counts
    each epoch's, not the run's."""
    handover = Handover()
    schedule = _schedule(RunConfig(epochs=2, timing_window_s=0.1), handover=handover)
    assert schedule.windows_per_turn == 5
    share = 1 / 24  # of the run's steps: a twelfth of an epoch
    _epoch(schedule, 6, 0.0, share, [])
    assert MAX_EPOCH_SHARE == 1 / 8
    assert handover.passes == pytest.approx([2 * share, 4 * share, 6 * share])


@pytest.mark.parametrize("seed", [0, 1])
def test_pairs_turn_pair_by_pair_and_the_twin_gets_them_with_their_order(seed):
    """The run's first epoch alone, then the twin's first epoch whole, then a window of each
    in pairs whose order turns pair by pair (the run's first on even seeds); the twin's
    record gets each pair [shared, own] ms per step and its order."""
    twin = Twin([10.0, 11.0, 12.0, 13.0])
    config = RunConfig(epochs=2, seed=seed, timing_window=4)
    schedule = _schedule(config, twin=twin)
    log = twin.log
    _epoch(schedule, 2, 0.0, 0.25, log, seconds=0.02)
    assert log == ["shared", "shared", "own epoch"]
    _epoch(schedule, 4, 0.5, 0.125, log, seconds=0.02)
    own_first = [(slot + seed) % 2 == 1 for slot in range(4)]
    assert log[3:] == [loop for first in own_first
                       for loop in (("own", "shared") if first else ("shared", "own"))]
    schedule.finish()
    assert twin.finished == ([[5.0, 10.0], [5.0, 11.0], [5.0, 12.0], [5.0, 13.0]], own_first)


def test_taking_turns_the_pairs_order_turns_turn_by_turn():
    """With a handover the order follows the turns taken, not the pairs: every pair of one
    turn alike, the next turn the other way round."""
    handover = Handover()
    twin = Twin([1.0] * 8)
    config = RunConfig(epochs=2, seed=0, timing_window_s=0.25)  # 2 windows a turn
    schedule = _schedule(config, _trainer(steps_per_epoch=10_000), handover, twin)
    _epoch(schedule, 2, 0.0, 0.01, [])  # the first epoch: the turn passes after its second
    twin.log.clear()
    _epoch(schedule, 4, 0.02, 0.01, twin.log)
    # the turns taken at the four pairs: 2, 2, 3, 3; odd turns put the twin first (seed 0)
    assert twin.log == ["shared", "own", "shared", "own", "own", "shared", "own", "shared"]
    schedule.finish()
    assert twin.finished is not None and twin.finished[1] == [False, False, True, True]


def test_a_twin_window_that_trained_nothing_leaves_its_pair_out():
    """A twin that stopped (None) gives no pair: the pairs sent at the end are the complete
    ones only."""
    twin = Twin([2.0, None])
    schedule = _schedule(RunConfig(epochs=2, timing_window=4), twin=twin)
    _epoch(schedule, 1, 0.0, 0.5, [])
    _epoch(schedule, 2, 0.5, 0.25, [], seconds=0.04)
    schedule.finish()
    assert twin.finished == ([[10.0, 2.0]], [False])
    schedule.stop(KeyboardInterrupt("stopped"))
    schedule.close()
    assert twin.log[-2:] == ["stop stopped", "close"]


def test_several_processes_agree_on_the_slowest_ones_window_after_the_first_epoch():
    """The size holds at FIRST_WINDOW_STEPS through the first epoch, then all take the
    slowest process's time per call (the gathered figures; nan where one measured none)."""
    gathered = [[0.001], [math.nan], [0.002]]
    schedule = _schedule(RunConfig(epochs=2, timing_window_s=0.5),
                         _trainer(steps_per_epoch=100_000, processes=3, gathered=gathered))
    assert schedule.calls == 10
    for seconds in (1.0, 0.01, 0.01):
        schedule.between_windows(seconds, 10, 10, 0.0, epoch_goes_on=True)
    assert schedule.calls == 10  # held while measured
    schedule.end_epoch_training()
    assert schedule.calls == 250  # 0.5 s at the slowest's 2 ms a call


def test_the_handover_speaks_the_parents_protocol_and_works_alone_once_it_is_gone(tmp_path):
    """join says HELLO and the framework, and returns holding the first turn; pass_turn says
    PASS with the share done (or none) and waits for GO; a parent gone leaves the process
    working alone: taken() None and no more waits. No path, or nobody there: no handover."""
    import socket
    import threading

    from compare.run.schedule import GO, HELLO, PASS, Handover
    path = str(tmp_path / "turns.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    heard: list[bytes] = []

    def parent() -> None:
        connection, _ = listener.accept()
        reader = connection.makefile("rb")
        heard.append(reader.readline())  # the HELLO line
        connection.sendall(GO)
        for _ in range(2):
            heard.append(reader.readline())  # a PASS line
            connection.sendall(GO)
        heard.append(reader.readline())
        reader.close()
        connection.close()  # gone, holding the turn

    thread = threading.Thread(target=parent)
    thread.start()
    handover = Handover.join(path, "torch")
    assert handover is not None and handover.taken() == 1
    handover.pass_turn(0.25)
    handover.pass_turn()
    assert handover.taken() == 3
    handover.pass_turn(0.5)  # the parent reads it and leaves
    thread.join(10)
    assert heard == [HELLO + b"torch\n", PASS + b"0.250000\n", PASS + b"\n", PASS + b"0.500000\n"]
    assert handover.taken() is None
    handover.pass_turn(0.75)  # alone: returns at once
    listener.close()
    assert Handover.join(None, "tf") is None
    assert Handover.join(str(tmp_path / "nobody.sock"), "tf") is None


def _windows(steps_per_call: int = 1, steps_per_epoch: int | None = None,
             agree=None, **config) -> TimingWindows:
    return TimingWindows(RunConfig(**config), steps_per_call, agree, steps_per_epoch)


def test_a_fixed_window_holds_whole_calls_and_a_sized_one_starts_at_one_call():
    assert _windows(4, timing_window=10).calls == 3  # 10 steps in calls of 4
    assert _windows(4).calls == 1  # one process: sized from its first epoch
    assert _windows(4, agree=lambda own: own).calls == 3  # FIRST_WINDOW_STEPS in calls of 4


def test_the_size_is_measured_after_each_epochs_first_window_and_then_held():
    """The first window carries tracing: not counted. Each later one sizes the window from the
    median time per call so far; the epoch's end holds the size. An epoch of one window
    measures nothing, and the next epoch's first window is again not counted."""
    windows = _windows(timing_window_s=0.5)
    windows.observe(0.2, 1)  # tracing
    assert windows.calls == 1
    windows.end_epoch()  # nothing measured: still sizing
    windows.observe(0.2, 1)  # the next epoch's first window
    assert windows.calls == 1
    windows.observe(0.004, 4)  # 1 ms a call
    assert windows.calls == 500
    windows.observe(0.008, 4)  # the median of 1 and 2 ms
    assert windows.calls == round(0.5 / 0.0015)
    windows.end_epoch()
    windows.observe(1.0, 1)
    windows.observe(1.0, 1)
    assert windows.calls == round(0.5 / 0.0015)  # held
    slow = _windows(timing_window_s=0.5)
    for seconds in (1.0, 10.0):
        slow.observe(seconds, 1)
    assert slow.calls == 1  # never less than one call


def test_several_processes_say_their_own_median_or_nan_and_agree_once():
    said: list[float] = []

    def agree(own: float) -> float:
        said.append(own)
        return 0.001 * len(said)
    windows = _windows(agree=agree, timing_window_s=0.5)
    windows.end_epoch()  # an epoch of no measured window
    assert math.isnan(said[0]) and windows.calls == 500
    windows.end_epoch()  # agreed once: held
    assert len(said) == 1 and windows.calls == 500
    measured = _windows(agree=agree, timing_window_s=0.5)
    for seconds in (0.5, 0.003, 0.005):
        measured.observe(seconds, 1)
    measured.end_epoch()
    assert said[1] == pytest.approx(0.004)


def test_the_schedule_sizes_windows_as_its_trainer_runs():
    """One process sizes its own window (one call at first); several agree (on the slowest
    measured; nan from all holds the size); the window is held to an eighth of the epoch;
    a fixed window makes each window a turn, and a turn holds at least one window."""
    alone = _schedule(RunConfig(timing_window_s=0.5), _trainer(steps_per_epoch=80))
    assert alone.calls == 1
    for seconds in (1.0, 0.001):
        alone.between_windows(seconds, 1, 1, 0.0, epoch_goes_on=True)
    assert alone.calls == 10  # 500 wanted, an eighth of 80 steps allowed
    said: list[list[float]] = []
    two = _trainer(processes=2, gathered=[[math.nan], [math.nan]])
    two.gather_figures = lambda own: said.append(own) or [[math.nan], [math.nan]]
    pair = _schedule(RunConfig(timing_window_s=0.5), two)
    assert pair.calls == 10
    pair.between_windows(1.0, 10, 10, 0.0, epoch_goes_on=True)
    pair.between_windows(0.01, 10, 10, 0.0, epoch_goes_on=True)
    pair.end_epoch_training()
    assert said == [[pytest.approx(0.001)]] and pair.calls == 10
    assert _schedule(RunConfig(timing_window=4, timing_window_s=0.125)).windows_per_turn == 1
    assert _schedule(RunConfig(timing_window_s=1.0)).windows_per_turn == 1


def test_an_eighth_of_an_epoch_reached_through_rounding_still_ends_the_turn():
    """Three windows of a 24th of an epoch add up to an eighth but for the floats' rounding."""
    handover = Handover()
    schedule = _schedule(RunConfig(epochs=1, timing_window_s=0.01), handover=handover)
    _epoch(schedule, 3, 0.0, 1 / 24, [])
    assert handover.passes == pytest.approx([3 / 24])


def test_a_handover_whose_parent_closes_closes_its_own_end():
    import socket

    from compare.run.schedule import GO, Handover as RealHandover
    ours, theirs = socket.socketpair()
    theirs.sendall(GO)
    handover = RealHandover(ours)
    handover.pass_turn(0.5)  # reads the GO sent before
    assert handover.taken() == 1
    theirs.close()
    handover.pass_turn(0.75)  # the parent is gone
    assert handover.taken() is None and ours.fileno() == -1
