"""Two framework processes taking turns, a timing window each (compare.run.schedule, the
parent's arbiter compare.process.turns): strict alternation, the first named first, a process
that dies or never comes never holding up the other, the shared loop passing the turn after
each window and leaving the other's turn out of its clock; and the plan `compare` makes of
it."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from compare import files
from compare.experiment.config import ComparisonConfig, RunConfig
from compare.process.comparison import planned_runs
from compare.process.turns import Arbiter
from compare.run import schedule
from compare.run.schedule import Handover, Schedule

EPOCH_S = 0.05  # each fake epoch's work: long enough that an overlap would show in the log


def _trainer(path: str, framework: str, log: str, epochs: int, die_holding: bool = False) -> None:
    """A stand-in for a framework process: join, then `epochs` epochs, each logged at its
    start and end, the turn passed after each."""
    handover = Handover.join(path, framework)
    assert handover is not None
    if die_holding:
        os._exit(3)
    for epoch in range(1, epochs + 1):
        with open(log, "a") as f:
            f.write(f"{framework} start {epoch} {time.monotonic()}\n")
        time.sleep(EPOCH_S)
        with open(log, "a") as f:
            f.write(f"{framework} end {epoch} {time.monotonic()}\n")
        handover.pass_turn()
    os._exit(0)


def _start(arbiter: Arbiter, framework: str, log: Path, epochs: int,
           die_holding: bool = False) -> multiprocessing.process.BaseProcess:
    process = multiprocessing.get_context("fork").Process(
        target=_trainer, args=(arbiter.path, framework, str(log), epochs, die_holding))
    process.start()
    return process


def _events(log: Path) -> list[tuple[str, str, int, float]]:
    return [(fw, what, int(epoch), float(at)) for fw, what, epoch, at
            in (line.split() for line in log.read_text().splitlines())]


def test_two_processes_take_turns_an_epoch_each_the_first_named_first(tmp_path):
    log = tmp_path / "log"
    with Arbiter(("torch", "tf")) as arbiter:
        tf = _start(arbiter, "tf", log, 3)  # started first, still second in turn
        time.sleep(0.2)
        torch = _start(arbiter, "torch", log, 3)
        for process in (tf, torch):
            process.join(30)
            arbiter.ended("tf" if process is tf else "torch")
    assert tf.exitcode == 0 and torch.exitcode == 0
    events = _events(log)
    assert [(fw, what, epoch) for fw, what, epoch, _ in events] == [
        (fw, what, epoch) for epoch in (1, 2, 3) for fw in ("torch", "tf")
        for what in ("start", "end")]
    times = [at for *_, at in events]
    assert times == sorted(times)  # no epoch began before the other's ended
    assert arbiter.turns[:6] == ["torch", "tf"] * 3


def test_a_process_that_dies_holding_the_turn_does_not_hold_up_the_other(tmp_path):
    log = tmp_path / "log"
    started = time.monotonic()
    with Arbiter(("tf", "torch")) as arbiter:
        tf = _start(arbiter, "tf", log, 2, die_holding=True)
        torch = _start(arbiter, "torch", log, 2)
        torch.join(30)
        tf.join(30)
    assert tf.exitcode == 3 and torch.exitcode == 0
    events = _events(log)
    assert [(fw, what) for fw, what, *_ in events] == [("torch", "start"), ("torch", "end")] * 2
    assert events[-1][3] - started < 10
    assert arbiter.turns[0] == "tf"


def test_a_process_that_never_connects_holds_up_the_other_only_until_it_has_ended(tmp_path):
    log = tmp_path / "log"
    with Arbiter(("tf", "torch")) as arbiter:
        torch = _start(arbiter, "torch", log, 2)
        time.sleep(0.3)
        assert not log.exists()  # TensorFlow's turn first: PyTorch waits for it
        ended = time.monotonic()
        arbiter.ended("tf")
        torch.join(30)
    assert torch.exitcode == 0
    events = _events(log)
    assert len(events) == 4 and events[0][3] >= ended


def test_no_arbiter_or_none_reachable_leaves_the_process_working_alone(tmp_path):
    assert Handover.join(None, "tf") is None
    started = time.monotonic()
    assert Handover.join(str(tmp_path / "nobody.sock"), "tf") is None  # nothing listens there
    assert time.monotonic() - started < 1


def test_compare_plans_each_seeds_two_runs_side_by_side_on_a_cpu_only(tmp_path):
    directory = files.ComparisonDir(tmp_path)

    def plan(**settings) -> list[tuple[str, int, str, int | None]]:
        device_kind = settings.pop("device_kind", "cpu")
        resume = settings.pop("resume", False)
        queue = planned_runs(RunConfig(), ComparisonConfig(seeds=2, **settings), directory,
                             resume, device_kind)
        return [(q.config.framework, q.config.seed, q.config.variant, q.turns_group)
                for q in queue]

    assert plan() == [("tf", 0, "matched", 0), ("torch", 0, "matched", 0),
                      ("torch", 1, "matched", 1), ("tf", 1, "matched", 1)]
    # the best runs after each seed's pair, alone
    assert plan(best=True) == [
        ("tf", 0, "matched", 0), ("torch", 0, "matched", 0), ("tf", 0, "best", None),
        ("torch", 0, "best", None), ("torch", 1, "matched", 1), ("tf", 1, "matched", 1),
        ("torch", 1, "best", None), ("tf", 1, "best", None)]
    alone = [("tf", 0, "matched", None), ("torch", 0, "matched", None),
             ("torch", 1, "matched", None), ("tf", 1, "matched", None)]
    assert plan(turns=False) == alone
    assert plan(device_kind="gpu", defaults=False) == alone  # both frameworks' memory at once
    assert plan(resume=True, own_loops=False) == alone


def _raw(arbiter: Arbiter, framework: str):
    """A connection speaking the protocol by hand, as compare.run.schedule.Handover does."""
    import socket
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(arbiter.path)
    connection.sendall(schedule.HELLO + framework.encode() + b"\n")
    connection.settimeout(5)
    return connection


def test_a_process_seen_to_end_frees_its_turn_though_its_socket_stays_open():
    """A loader worker forked from a trainer keeps the trainer's socket open after the trainer
    has ended: the runner's word that it ended frees the turn all the same; and a PASS from the
    process not holding the turn takes nothing from the one that holds it."""
    import socket
    with Arbiter(("tf", "torch")) as arbiter:
        tf, torch = _raw(arbiter, "tf"), _raw(arbiter, "torch")
        torch.sendall(schedule.PASS + b"\n")  # out of turn, maybe before its HELLO is read: ignored
        assert tf.recv(1) == schedule.GO
        torch.settimeout(0.5)
        try:
            early = torch.recv(1)
        except socket.timeout:
            early = b""
        assert early == b""
        arbiter.ended("tf")  # its socket still open
        torch.settimeout(5)
        assert torch.recv(1) == schedule.GO
        tf.close()
        torch.close()
    assert arbiter.turns == ["tf", "torch"]


def test_a_process_whose_arbiter_goes_works_on_alone(tmp_path):
    """The arbiter's end (its parent gone) releases a waiting process, which then never asks
    again."""
    log = tmp_path / "log"
    arbiter = Arbiter(("tf", "torch"))
    with arbiter:
        torch = _start(arbiter, "torch", log, 2)  # waits: TensorFlow goes first
        time.sleep(0.3)
    torch.join(30)  # the arbiter closed every connection on its way out
    assert torch.exitcode == 0 and len(_events(log)) == 4


def test_the_shared_loop_offers_the_turn_after_each_window_and_leaves_it_out_of_its_clock(
        tmp_path, monkeypatch):
    """A real run (PyTorch, 2 epochs of 4 windows of 2 steps) whose every offer of the turn
    takes 0.1 s, as the other framework's turn would: the turn is offered after each window,
    the first epoch's too, with the share of the steps trained, but not after the run's last
    (the run holds it to its exit, so the other's windows never meet its evaluation); and
    each epoch's training time is its windows' time, without the other's turns."""
    from conftest import tiny_config

    from compare.experiment import datasets
    from compare.run import worker
    from torch_impl import train as torch_train
    passes = []

    def pass_turn(self, done):
        assert self.windows_per_turn == 1  # timing_window: windows of fixed steps
        passes.append(done)
        time.sleep(0.1)
    monkeypatch.setattr(Schedule, "_offer_turn", pass_turn)
    config = tiny_config(tmp_path, epochs=2, timing_window=2)
    assert worker.train_process(torch_train, config, datasets.config_dataset(config),
                                torch_train.select_device(config), None, resume=False) == 0
    run = files.RunDir(tmp_path / "run")
    windows = files.read_csv(run.windows)
    result = files.read_json(run.result)
    # after each window but the last, with the share of the run's 16 steps trained
    assert passes == [steps / 16 for steps in range(2, 16, 2)]
    assert len(windows["epoch"]) == 8
    for epoch in result["epochs"]:
        timed = float(windows["seconds"][windows["epoch"] == epoch["epoch"]].sum())
        assert timed <= epoch["train_time_s"] < timed + 0.05


def _windows(path: str, framework: str, log: str, windows: int, window_s: float | None,
             epoch_share: float) -> None:
    """A stand-in for a run's process of one epoch: `windows` windows of about `window_s`
    seconds, each `epoch_share` of the epoch and logged with the turn it fell in
    (Handover.taken()), the turn offered after each as the shared loop's schedule does."""
    from types import SimpleNamespace
    handover = Handover.join(path, framework)
    assert handover is not None
    config = RunConfig(epochs=1, timing_window_s=window_s or 0.5,
                       timing_window=None if window_s else 1)
    trainer = SimpleNamespace(steps_per_call=1, steps_per_epoch=1000,
                              choice=SimpleNamespace(processes=1))
    plan = Schedule(config, trainer, handover)  # type: ignore[arg-type]
    for window in range(1, windows + 1):
        with open(log, "a") as f:
            f.write(f"{framework} {handover.taken()}\n")
        plan.between_windows(window_s or 0.1, 1, 1, window * epoch_share, epoch_goes_on=True)
    os._exit(0)


@pytest.mark.parametrize("window_s, epoch_share, per_turn", [
    (0.5, 0.01, 1),  # the default windows: a turn each
    (None, 0.01, 1),  # windows of fixed steps: a turn each
    (0.125, 0.01, 4),  # windows of 0.125 s: 4 to a turn (TURN_S, 0.5 s)
    (0.125, 1 / 24, 3),  # an eighth of an epoch ends the turn first: 3 windows of 1/24
    (0.1, 0.01, 5),
])
def test_a_turn_holds_turn_s_of_windows_or_an_eighth_of_an_epoch(
        tmp_path, window_s, epoch_share, per_turn):
    """Each process works as many windows a turn as make TURN_S seconds, or fewer where they
    bring its steps in the turn to an eighth of an epoch first, and passes the turn only
    between two windows; taken() counts the turns a process has been given."""
    log = tmp_path / "log"
    context = multiprocessing.get_context("fork")
    with Arbiter(("tf", "torch")) as arbiter:
        runs = {fw: context.Process(target=_windows, args=(
            arbiter.path, fw, str(log), 2 * per_turn, window_s, epoch_share))
            for fw in ("tf", "torch")}
        for process in runs.values():
            process.start()
        for fw, process in runs.items():
            process.join(30)
            arbiter.ended(fw)
    assert all(process.exitcode == 0 for process in runs.values())
    lines = [tuple(line.split()) for line in log.read_text().splitlines()]
    assert lines == [(fw, str(turn)) for turn in (1, 2) for fw in ("tf", "torch")
                     for _ in range(per_turn)]
    assert arbiter.turns[:4] == ["tf", "torch"] * 2


def test_the_turn_goes_to_the_run_that_has_trained_the_smaller_share_of_its_steps():
    """One run trains a tenth of its steps a turn, the other a quarter (the other framework's
    step twice as fast): the arbiter gives the turn to whichever is behind, so the two go
    through their steps together; a tie, or a share not said, gives it to the other."""
    with Arbiter(("tf", "torch")) as arbiter:
        sockets = {"tf": _raw(arbiter, "tf"), "torch": _raw(arbiter, "torch")}
        per_turn = {"tf": 0.1, "torch": 0.25}
        done = {"tf": 0.0, "torch": 0.0}
        holders = []
        holder = "tf"
        assert sockets["tf"].recv(1) == schedule.GO
        for _ in range(9):
            holders.append(holder)
            done[holder] = round(done[holder] + per_turn[holder], 6)
            sockets[holder].sendall(schedule.PASS + f"{done[holder]:.6f}\n".encode())
            holder = next(fw for fw, s in sockets.items() if _ready(s))
            assert sockets[holder].recv(1) == schedule.GO
        # torch has said no share yet: its turn; then the one behind; at 0.5 each, a tie
        assert holders == ["tf", "torch", "tf", "tf", "torch", "tf", "tf", "torch", "tf"]
        sockets[holder].sendall(schedule.PASS + b"\n")  # no share said: the other's turn
        other = "tf" if holder == "torch" else "torch"
        assert sockets[other].recv(1) == schedule.GO
        for connection in sockets.values():
            connection.close()


def _ready(connection, wait_s: float = 5.0) -> bool:
    import select
    return bool(select.select([connection], [], [], wait_s / 10)[0])
