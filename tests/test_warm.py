"""A command pays each framework's import once (compare.process.warm): its runs are forked
from a server that imported the framework, and each still trains exactly as a process of its
own would, bit for bit; a child that dies is reported as one would be, and the next goes on."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import patience, tiny_config

from compare import files, schema
from compare.process import runner, warm


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory):
    """One PyTorch fork server for the module's tests of what a server's children do (each
    child a new process, whatever its server forked before), its import (torch and
    torch._dynamo: 5-10 s of a 2-core machine) paid once; started as a test's would be (an
    isolated home, no GPU), with the tests' helpers on its path (dies_mid_run, gc_census).
    A server started from a thread, or none at all, is a test's own."""
    pool = warm.Pool()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CNNCOMPARE_HOME", str(tmp_path_factory.mktemp("warm-home")))
        env.setenv("CUDA_VISIBLE_DEVICES", "")
        env.setenv("PYTHONPATH", str(Path(__file__).parent))
        started = pool.start([runner.python_for("torch"), "-m", "compare.run.wall_time"],
                             "torch", runner.child_environment())
        assert started is not None and started.wait() == 0
    try:
        yield pool
    finally:
        pool.close()


@contextmanager
def forking(pool: warm.Pool):
    """Inside, runner starts PyTorch's processes from `pool`'s server, as inside a command's
    fork_servers(); yields the children each server forked since the block began."""
    [server] = pool.servers.values()
    before = server.forked
    with pytest.MonkeyPatch.context() as lent:
        lent.setattr(warm, "_active", pool)
        yield lambda: [server.forked - before]


@contextmanager
def own_servers():
    """A command's fork_servers(), started by what runs inside; yields the children each
    server forked."""
    with warm.fork_servers() as pool:
        yield lambda: [server.forked for server in pool.servers.values()]


def _losses(out: Path) -> list[str]:
    """Every step's loss as written (the text, so that equal means bit for bit)."""
    with open(files.RunDir(out).path / "steps.csv") as f:
        return [row["loss"] for row in csv.DictReader(f)]


def _weights(out: Path, framework: str) -> dict[str, np.ndarray]:
    """The trained weights the run saved, read without building the network."""
    if framework == "torch":
        import torch
        state = torch.load(out / "model.pt", weights_only=False)["state_dict"]
        return {name: value.numpy() for name, value in state.items()}
    import io

    import h5py
    found = {}
    with zipfile.ZipFile(out / "model.keras") as archive, \
            h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as weights:
        weights.visititems(lambda name, item: found.__setitem__(name, item[()])
                           if isinstance(item, h5py.Dataset) else None)
    return found


# TensorFlow's pair (21-26 s under pytest -n 2) in the heavy tier; PyTorch's in both
@pytest.mark.parametrize("framework", [pytest.param("tf", marks=pytest.mark.slow), "torch"])
def test_runs_forked_from_one_server_match_fresh_processes_bit_for_bit(tmp_path, framework,
                                                                      request):
    """Two seeds in turn from one fork server, the second in a child of a server that has
    already forked one run, against that seed in a process of its own: every step's loss,
    the epochs' figures and every trained weight are identical."""
    configs = {(how, seed): tiny_config(tmp_path, framework=framework, seed=seed, epochs=2,
                                        out=str(tmp_path / f"{how}-{seed}"))
               for how, seed in (("forked", 0), ("forked", 1), ("fresh", 1))}
    # PyTorch's: the module's server, which may have forked other tests' children already
    with (forking(request.getfixturevalue("torch_server")) if framework == "torch"
          else own_servers()) as forks:
        forked = [runner.run_framework(configs["forked", seed], on_line=lambda line: None)
                  for seed in (0, 1)]
        assert forks() == [2]  # one import, two runs
    fresh = [runner.run_framework(configs["fresh", 1], on_line=lambda line: None)]
    assert [o.status for o in forked + fresh] == ["completed"] * 3
    tick = 2 / os.sysconf("SC_CLK_TCK")  # a process's start, from /proc, is in clock ticks
    for outcome in forked + fresh:  # where each process's wall time went, in order
        marks = ("launched", "imported", "data", "built", "ended", "exited")
        times = [outcome.timing[mark] for mark in marks]
        assert times == sorted(times), outcome.timing
        started = outcome.timing["started"]
        assert times[0] - tick <= started <= times[1], outcome.timing
    a, b = Path(configs["fresh", 1].out), Path(configs["forked", 1].out)
    assert _losses(a) == _losses(b) and len(_losses(a)) == 16
    epochs = [schema.read_result(files.RunDir(p).result)["epochs"] for p in (a, b)]
    assert ([(e["train_loss"], e["test_loss"], e["test_accuracy"]) for e in epochs[0]]
            == [(e["train_loss"], e["test_loss"], e["test_accuracy"]) for e in epochs[1]])
    fresh_weights, forked_weights = _weights(a, framework), _weights(b, framework)
    assert sorted(fresh_weights) == sorted(forked_weights) and fresh_weights
    for name, value in fresh_weights.items():
        assert np.array_equal(value, forked_weights[name]), name
    # the seeds differ, so equal figures above are not two copies of one run
    assert _losses(Path(configs["forked", 0].out)) != _losses(Path(configs["forked", 1].out))


def test_a_forked_run_killed_mid_run_is_reported_and_the_next_one_runs(tmp_path, monkeypatch,
                                                                       torch_server):
    """A child dies by SIGKILL after its first epoch: its outcome and result say so, as for
    a process of its own (tests/test_reliability.py), and the same server forks the next."""
    with forking(torch_server) as forks:
        monkeypatch.setitem(runner.MODULES, "torch", "dies_mid_run")
        dead = runner.run_framework(tiny_config(tmp_path, epochs=2, framework="torch"),
                                    on_line=lambda line: None)
        monkeypatch.setitem(runner.MODULES, "torch", "torch_impl.train")
        after = runner.run_framework(tiny_config(tmp_path, framework="torch",
                                                 out=str(tmp_path / "after")),
                                     on_line=lambda line: None)
        assert forks() == [2]
    assert dead.code == -signal.SIGKILL and dead.status == "failed"
    assert "killed by SIGKILL" in dead.error
    result = schema.read_result(dead.result_path)
    assert result["summary"].status == "failed" and len(result["epochs"]) == 1
    assert "dies_mid_run: SIGKILL" in result["exit"]["log_tail"]
    assert after.status == "completed"


def test_without_a_server_runs_start_afresh(tmp_path, monkeypatch):
    """CNNCOMPARE_FORK_SERVER=0 turns the servers off: no pool, every run its own process."""
    monkeypatch.setenv(warm.DISABLE_ENV, "0")
    with warm.fork_servers() as pool:
        assert pool is None
        assert warm.start(["python", "-m", "torch_impl.train"], "torch", {}) is None


def test_a_server_started_from_a_thread_that_ended_still_serves(tmp_path):
    """The parity check starts its probes from threads that end (runner.concurrently); a
    server they started must outlive them (Linux's parent-death signal follows the thread
    that started a process, so the server must not ask for it)."""
    env = runner.child_environment()
    with warm.fork_servers() as pool:
        first = runner.concurrently([lambda: pool.start(
            [runner.python_for("torch"), "-m", "compare.run.wall_time"], "torch", env).wait()])
        later = [pool.start([runner.python_for("torch"), "-m", "compare.run.wall_time"],
                            "torch", env).wait() for _ in range(2)]
        assert first == [0] and later == [0, 0]
        assert [s.forked for s in pool.servers.values()] == [3]


def test_a_framework_query_inside_a_command_is_answered_by_a_forked_child(torch_server):
    """compare and sweep ask each framework which device it would train on before any run:
    inside their fork servers a forked child answers, the same answer as a process of its
    own, and the import it paid serves the runs after it."""
    plain = runner.framework_environment("torch")
    with forking(torch_server) as forks:
        forked = runner.framework_environment("torch")
        assert forks() == [1]
    assert forked == plain and "error" not in forked


def test_a_forked_query_past_its_timeout_is_killed_and_the_server_serves_on(torch_server):
    """A query that hangs is killed at its timeout, as subprocess.run would, and the next
    one is forked from the same server."""
    with forking(torch_server) as forks:
        with pytest.raises(subprocess.TimeoutExpired):
            runner.framework_call("torch", "timeit", ["-n", "1", "-r", "1",
                                                      "import time; time.sleep(60)"], timeout=1)
        answer = runner.framework_call("torch", "timeit", ["-n", "1", "-r", "1", "pass"], 60)
        assert answer.returncode == 0 and "loop" in answer.stdout
        assert forks() == [2]


@pytest.mark.parametrize("forked", [True, False])
def test_a_framework_process_leaves_its_imports_out_of_the_collectors_full_passes(
        monkeypatch, request, forked):
    """Forked or started afresh, a framework process freezes its imported objects before its
    run: PyTorch's import heap (about 330,000 objects) is out of the cyclic collector's
    reach, so a full pass scans only what the run makes, not a pause sized by the import."""
    if forked:
        with forking(request.getfixturevalue("torch_server")) as forks:
            answer = runner.framework_call("torch", "gc_census", ["--env"],
                                           timeout=patience(120))
            assert forks() == [1]
    else:
        monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
        monkeypatch.setenv(warm.DISABLE_ENV, "0")
        with warm.fork_servers() as pool:
            answer = runner.framework_call("torch", "gc_census", ["--env"],
                                           timeout=patience(120))
            assert pool is None
    assert answer.returncode == 0, answer.stderr
    census = json.loads(answer.stdout.strip().splitlines()[-1])
    assert census["frozen"] > 100_000  # torch and torch_impl's modules, functions, classes
    assert census["tracked"] < census["frozen"] / 100
