"""compare's own loops in their run's process: a second Trainer of the same run trains its
framework's own loop an epoch at a time, beside each of the shared loop's epochs and outside
their clocks (compare.run.own_loop.Beside)."""

from __future__ import annotations

import pytest
from conftest import tiny_config

from compare import files, schema
from compare.experiment import datasets
from compare.run import loop, own_loop, worker


def _train_beside(tmp_path, module, seed: int, events: list, monkeypatch):
    """A run with its twin beside it, each shared epoch and own epoch logged in `events`."""
    config = tiny_config(tmp_path, epochs=2, seed=seed, out=str(tmp_path / "run"),
                         own_loop_beside=str(tmp_path / "own"))
    shared_epoch, own_epoch = loop._train_epoch, own_loop.OwnLoopRun.epoch

    def shared(*args, **kwargs):
        events.append(("shared", args[6]))  # the epoch, 1-based
        return shared_epoch(*args, **kwargs)

    def own(self):
        trained = own_epoch(self)
        if trained:
            events.append(("own", len(self.record.epoch_times_s)))
        return trained
    monkeypatch.setattr(loop, "_train_epoch", shared)
    monkeypatch.setattr(own_loop.OwnLoopRun, "epoch", own)
    code = worker.train_process(module, config, datasets.config_dataset(config),
                                module.select_device(config), resume=False)
    return code, schema.read_own_loop(files.RunDir(tmp_path / "own").own_loop)


@pytest.mark.parametrize("framework", ["tf", "torch"], indirect=True)
def test_the_own_loop_trains_in_the_runs_process_an_epoch_of_each_in_turn(
        tmp_path, framework, monkeypatch):
    """Even seeds: the shared loop's epoch first, then the own loop's; odd seeds the other
    way round after the first epoch, which the shared loop always trains first (its
    start-up as a run alone meets it). Both finish: the run's result and the twin's
    own-loop.json, which says where it trained and times every epoch in whole windows."""
    name, module = framework
    for seed, expected in ((0, [("shared", 1), ("own", 1), ("shared", 2), ("own", 2)]),
                           (1, [("shared", 1), ("own", 1), ("own", 2), ("shared", 2)])):
        events: list = []
        code, record = _train_beside(tmp_path / str(seed), module, seed, events, monkeypatch)
        assert code == 0 and events == expected
        result = schema.read_result(files.RunDir(tmp_path / str(seed) / "run").result)
        assert result["summary"].status == "completed" and result["config"]["seed"] == seed
        assert (record.status, record.framework, record.seed) == ("completed", name, seed)
        assert record.trained == own_loop.BESIDE and len(record.epoch_times_s) == 2
        assert all(seconds > 0 for seconds in record.epoch_times_s)
        assert {w["epoch"] for w in record.windows} == {1, 2}
        assert sum(w["steps"] for w in record.windows) == 2 * record.steps_per_epoch
        assert 0 <= record.final_test_accuracy <= 1 and record.config["own_loop_beside"] is None


def _torch_run_beside(tmp_path, epochs: int):
    """A PyTorch run with its twin beside it, which must exit 0: (its result, the twin's
    record)."""
    from torch_impl import train as torch_train
    config = tiny_config(tmp_path, epochs=epochs, own_loop_beside=str(tmp_path / "own"))
    code = worker.train_process(torch_train, config, datasets.config_dataset(config),
                                torch_train.select_device(config), resume=False)
    assert code == 0
    return (schema.read_result(files.RunDir(tmp_path / "run").result),
            schema.read_own_loop(files.RunDir(tmp_path / "own").own_loop))


def test_a_twin_that_fails_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    """The own loop is extra: its failure is written in own-loop.json (failed, the error) and
    the run trains its epochs to the end."""
    own_epoch = own_loop.OwnLoopRun.epoch

    def failing(self):
        if self.record.epoch_times_s:
            raise RuntimeError("the twin broke")
        return own_epoch(self)
    monkeypatch.setattr(own_loop.OwnLoopRun, "epoch", failing)
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
