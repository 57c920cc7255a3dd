"""compare's own loops in their run's process: a second Trainer of the same run trains its
framework's own loop a timing window at a time (Keras' fit on a thread of its own), beside
each of the shared loop's windows and outside their clocks (compare.run.own_loop.Twin, trained
as compare.run.schedule.Schedule says)."""

from __future__ import annotations

import time

import pytest
from conftest import patience, tiny_config, trainer_for

from compare import files, schema
from compare.experiment import datasets
from compare.run import own_loop, worker
from compare.run.schedule import Schedule
from compare.run.recorder import Recorder


AWAY_S = 0.15  # s: slept after each of the run's windows, in neither loop's clock


def _train_beside(tmp_path, module, seed: int, events: list, monkeypatch, handover=None):
    """A run with its twin beside it, 3 epochs of 2 windows of 2 steps, each window of
    either loop logged in `events` as it closes: (loop, epoch, ms per step)."""
    config = tiny_config(tmp_path, epochs=3, seed=seed, out=str(tmp_path / "run"),
                         own_loop_beside=str(tmp_path / "own"), timing_window=2,
                         synthetic_train_size=128)
    shared_window, own_window = Recorder.add_window, own_loop.WindowClock._close

    def shared(self, epoch, first_step, steps, seconds, waited):
        events.append(("shared", epoch, 1000.0 * seconds / steps))
        return shared_window(self, epoch, first_step, steps, seconds, waited)

    def own(self):
        own_window(self)
        last = self.windows[-1]
        events.append(("own", last["epoch"], 1000.0 * last["seconds"] / last["steps"]))
    between = Schedule.between_windows

    def away(self, *window, **goes_on):  # between two windows: in neither loop's clock
        time.sleep(AWAY_S)
        between(self, *window, **goes_on)
    monkeypatch.setattr(Recorder, "add_window", shared)
    monkeypatch.setattr(own_loop.WindowClock, "_close", own)
    monkeypatch.setattr(Schedule, "between_windows", away)
    code = worker.train_process(module, config, datasets.config_dataset(config),
                                module.select_device(config), handover, resume=False)
    return code, schema.read_own_loop(files.RunDir(tmp_path / "own").own_loop)


@pytest.mark.parametrize("framework", ["tf", "torch"], indirect=True)
def test_the_own_loop_trains_in_the_runs_process_a_window_of_each_in_turn(
        tmp_path, framework, monkeypatch):
    """The shared loop's first epoch first, whole (its start-up as a run alone meets it),
    then the own loop's first epoch, whole; from the second epoch a window of each in turn,
    in pairs whose order turns pair by pair (the shared loop's first in the first pair on
    even seeds, the own loop's on odd ones). Each pair is in own-loop.json's window_pairs
    as [shared, own] ms per step, its order in own_first. Both finish: the run's
    result and the twin's record, which says where it trained and times every epoch."""
    name, module = framework
    for seed in (0, 1):
        events: list = []
        code, record = _train_beside(tmp_path / str(seed), module, seed, events, monkeypatch)
        assert code == 0
        order = [(loop, epoch) for loop, epoch, _ in events]
        first = [("shared", 1)] * 2 + [("own", 1)] * 2
        own_first = [(slot + seed) % 2 == 1 for slot in range(4)]
        steady = [(loop, 2 + slot // 2) for slot in range(4)
                  for loop in (("own", "shared") if own_first[slot] else ("shared", "own"))]
        assert order == first + steady
        later = events[4:]
        expected = [[a[2], b[2]] if a[0] == "shared" else [b[2], a[2]]
                    for a, b in zip(later[::2], later[1::2])]
        assert len(record.window_pairs) == len(expected) == 4
        assert sum(record.window_pairs, []) == pytest.approx(sum(expected, []))
        assert record.own_first == own_first
        result = schema.read_result(files.RunDir(tmp_path / str(seed) / "run").result)
        assert result["summary"].status == "completed" and result["config"]["seed"] == seed
        assert (record.status, record.framework, record.seed) == ("completed", name, seed)
        assert record.trained == own_loop.BESIDE and len(record.epoch_times_s) == 3
        # each epoch's time is its own windows' and no more: what runs between two windows
        # (the other loop's window, AWAY_S after each of the run's: 2 * AWAY_S an epoch) is
        # in neither clock
        for epoch, seconds in enumerate(record.epoch_times_s, 1):
            own_s = sum(ms * 2 / 1000 for loop, e, ms in events if (loop, e) == ("own", epoch))
            assert own_s <= seconds < own_s + 1.5 * AWAY_S
        for epoch in result["epochs"]:
            shared_s = sum(ms * 2 / 1000 for loop, e, ms in events
                           if (loop, e) == ("shared", epoch["epoch"]))
            assert shared_s <= epoch["train_time_s"] < shared_s + 1.5 * AWAY_S
        assert 0 <= record.final_test_accuracy <= 1 and record.config["own_loop_beside"] is None


def test_taking_turns_the_pairs_order_turns_turn_by_turn(tmp_path, monkeypatch):
    """Where the run takes turns with the other framework's, each turn several pairs long, every
    pair of a turn has the same order and the next turn the other, so the first window after a
    handover is the shared loop's in one turn and the twin's in the next (here a turn passes
    after every second window: Handover.taken() as the shared loop's offers advance it)."""
    from torch_impl import train as torch_train
    offers: list[float] = []

    class EveryOtherOffer:  # the run's end of the handover, its turns passing as said above
        def taken(self) -> int:
            return 1 + len(offers) // 2

        def pass_turn(self, done: float) -> None:
            offers.append(done)
    for seed in (0, 1):
        offers.clear()
        events: list = []
        code, record = _train_beside(tmp_path / str(seed), torch_train, seed, events,
                                     monkeypatch, EveryOtherOffer())
        assert code == 0
        # slot k opens after the run's 2 + k windows, each followed by an offer
        own_first = [(1 + (2 + slot) // 2 + seed) % 2 == 1 for slot in range(4)]
        assert own_first == [seed == 1, seed == 1, seed == 0, seed == 0]
        assert record.own_first == own_first
        steady = [loop for slot in range(4)
                  for loop in (("own", "shared") if own_first[slot] else ("shared", "own"))]
        assert [loop for loop, _, _ in events[4:]] == steady


def _torch_run_beside(tmp_path, epochs: int):
    """A PyTorch run with its twin beside it, which must exit 0: (its result, the twin's
    record)."""
    from torch_impl import train as torch_train
    config = tiny_config(tmp_path, epochs=epochs, own_loop_beside=str(tmp_path / "own"))
    code = worker.train_process(torch_train, config, datasets.config_dataset(config),
                                torch_train.select_device(config), None, resume=False)
    assert code == 0
    return (schema.read_result(files.RunDir(tmp_path / "run").result),
            schema.read_own_loop(files.RunDir(tmp_path / "own").own_loop))


def test_a_twin_that_fails_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    """The own loop is extra: its failure is written in own-loop.json (failed, the error) and
    the run trains its epochs to the end."""
    def failing(self):  # its first window after its first epoch
        raise RuntimeError("the twin broke")
    monkeypatch.setattr(own_loop.OwnLoopRun, "window", failing)
    result, record = _torch_run_beside(tmp_path, epochs=3)
    assert result["summary"].status == "completed" and len(result["epochs"]) == 3
    assert (record.status, record.error, len(record.epoch_times_s)) == (
        "failed", "the twin broke", 1)


def test_a_twin_that_cannot_be_built_is_recorded_and_the_run_trains(tmp_path, monkeypatch):
    """The twin's Trainer fails as it is built (the run's own was built first): own-loop.json
    says failed, with the error, and the run completes."""
    from torch_impl import train as torch_train
    built = torch_train.Trainer

    def second_fails(*args, **kwargs):
        if (tmp_path / "built").exists():
            raise RuntimeError("no room for a second model")
        (tmp_path / "built").touch()
        return built(*args, **kwargs)
    monkeypatch.setattr(torch_train, "Trainer", second_fails)
    result, record = _torch_run_beside(tmp_path, epochs=2)
    assert result["summary"].status == "completed" and len(result["epochs"]) == 2
    assert (record.status, record.error, record.epoch_times_s) == (
        "failed", "no room for a second model", [])


def test_keras_own_loop_closed_between_windows_ends_its_fit_thread(tmp_path, tf_two_cpus):
    """Keras' fit runs on a thread of its own that works only while the caller waits: the
    generator pauses after each window (None) with fit's thread waiting, and closing it there
    (a run that ends early) ends that thread, so nothing of the own loop outlives it."""
    import threading

    from compare.experiment.recipe import learning_rate
    from compare.run.own_loop import WindowClock
    from tf_impl import own_loop
    config = tiny_config(tmp_path, epochs=2, timing_window=2)
    trainer = trainer_for(tf_two_cpus, config)
    steps = trainer.steps_per_epoch * config.epochs
    lrs = [learning_rate(config, step, steps) for step in range(steps)]
    clock = WindowClock(config, trainer.steps_per_call, trainer.sync)
    loop = own_loop.own_loop(trainer, config, datasets.config_dataset(config), lrs, clock, [])
    assert next(loop) is None and len(clock.windows) == 1  # one window, then a pause
    fitting = [t for t in threading.enumerate() if t.name == "keras-fit"]
    assert len(fitting) == 1 and fitting[0].is_alive()
    time.sleep(0.2)  # the pause is the caller's: fit trains nothing meanwhile
    assert len(clock.windows) == 1 and clock.steps == 0
    loop.close()
    fitting[0].join(patience(10))
    assert not fitting[0].is_alive()
