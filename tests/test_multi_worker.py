"""Several processes on one box, started as on several machines (issue 16): TensorFlow's
workers from a localhost TF_CONFIG, PyTorch's processes from two `torchrun` invocations
that meet at a localhost rendezvous, each running the real `cnncompare run`. They must run
the same experiment as one process with two replicas, and a dead worker must stop the
others with its name in the chief's result."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import patience
from processes import REPO, wait_for, wait_until_gone

pytestmark = pytest.mark.slow

CLI = "from compare.cli import main; main()"
# 96 images in batches of 16: 6 steps an epoch, 2 epochs; fp32 so the sums are exact.
SMALL = ("--dataset", "synthetic", "--synthetic-size", "96", "--batch-size", "16", "--epochs",
         "2", "--precision", "fp32", "--device", "cpu", "--quiet")
# Long enough to kill a worker in the middle: 20 steps an epoch, 200 epochs.
LONG = ("--dataset", "synthetic", "--synthetic-size", "640", "--batch-size", "32", "--epochs",
        "200", "--precision", "fp32", "--device", "cpu", "--quiet")
TIMEOUT_S = "20"  # --collective-timeout for the failure tests


def _ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _tf_config(ports: list[int], index: int) -> str:
    return json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "RANK", "WORLD_SIZE")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI, *args]


def _torchrun(node: int, master_port: int, *args: str) -> list[str]:
    """Node `node` of a two-node torchrun with one process each, meeting on localhost (node
    0's process is rank 0)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--nproc-per-node", "1", "--node-rank", str(node), "--master-addr", "127.0.0.1",
            "--master-port", str(master_port), "--max-restarts", "0", "-m", "compare.cli",
            *args]


def start(argv: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(processes: list[subprocess.Popen], timeout: float | None = None
            ) -> list[tuple[int, str]]:
    done = []
    for p in processes:
        try:
            output, _ = p.communicate(timeout=patience(100) if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            output, _ = p.communicate()
            output += "\n[killed by the test: it ran past its time]"
        done.append((p.returncode, output))
    return done


def _losses(out: Path) -> list[float]:
    with open(out / "steps.csv") as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def _result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def _check_same_experiment(single: Path, multi: Path) -> None:
    """Same per-step losses and test figures as one process with two replicas, within the
    parity tolerance (the fp32 sums of two replicas' gradients are the same in any order)."""
    reference, losses = _losses(single), _losses(multi)
    assert len(losses) == len(reference) == 12
    assert losses == pytest.approx(reference, rel=1e-5, abs=1e-6)
    a, b = _result(single), _result(multi)
    assert b["summary"]["status"] == "completed"
    assert b["summary"]["replicas"] == a["summary"]["replicas"] == 2
    assert b["fairness"]["per_replica_batch"] == 8
    for ea, eb in zip(a["epochs"], b["epochs"]):
        assert eb["test_accuracy"] == pytest.approx(ea["test_accuracy"], abs=1e-9)
        assert eb["test_loss"] == pytest.approx(ea["test_loss"], rel=1e-5)
        ranks = eb["processes"]  # every worker's own clock, gathered into the chief's result
        assert [r["rank"] for r in ranks] == [0, 1]
        assert all(r["train_time_s"] > 0 and r["median_step_ms"] > 0 for r in ranks)
    assert not (multi / "workers" / "rank-1" / "result.json").exists()  # rank 0 alone writes
    assert (multi / "workers" / "rank-1" / "log.txt").exists()


@pytest.fixture(scope="module")
def multi_runs(tmp_path_factory) -> Path:
    """Both frameworks as two processes meeting over localhost, and as one process with two
    replicas, under ROOT/{tf,torch}/{multi,single}; each set runs alone (2 cores here)."""
    root = tmp_path_factory.mktemp("multi")
    ports = _ports(2)
    tf_workers = [start(_cli("run", "--framework", "tf", *SMALL, "--out",
                              str(root / "tf" / "multi")), _env(TF_CONFIG=_tf_config(ports, i)))
                  for i in range(2)]
    tf_single = start(_cli("run", "--framework", "tf", *SMALL, "--devices", "2", "--out",
                            str(root / "tf" / "single")), _env())
    for code, output in _finish(tf_workers + [tf_single]):
        assert code == 0, output[-3000:]
    (port,) = _ports(1)
    torch_nodes = [start(_torchrun(node, port, "run", "--framework", "torch", *SMALL, "--out",
                                    str(root / "torch" / "multi")), _env()) for node in range(2)]
    torch_single = start(_cli("run", "--framework", "torch", *SMALL, "--devices", "2", "--out",
                               str(root / "torch" / "single")), _env())
    for code, output in _finish(torch_nodes + [torch_single]):
        assert code == 0, output[-3000:]
    return root


def test_multi_worker_tf_matches_one_process_with_two_replicas(multi_runs):
    _check_same_experiment(multi_runs / "tf" / "single", multi_runs / "tf" / "multi")
    manifest = _result(multi_runs / "tf" / "multi")["fairness"]
    assert "MultiWorkerMirroredStrategy" in manifest["distribution"]
    assert manifest["processes"] == 2 and manifest["launcher"] == "TF_CONFIG"


@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_multi_worker_phase_profile_shows_the_all_reduce(multi_runs, framework):
    """The default --profile runs its steps on every process (their collectives pair up);
    the chief's split shows gradients averaged over the two replicas, in one process or two."""
    for layout in ("single", "multi"):
        profile = _result(multi_runs / framework / layout)["profile"]
        assert profile["phases_ms"]["all_reduce"] > 0, (layout, profile)
        assert profile["phases_ms"]["backward"] > 0


def test_multi_worker_torch_matches_one_process_with_two_replicas(multi_runs):
    _check_same_experiment(multi_runs / "torch" / "single", multi_runs / "torch" / "multi")
    manifest = _result(multi_runs / "torch" / "multi")["fairness"]
    assert manifest["processes"] == 2 and manifest["launcher"] == "torchrun"
    assert manifest["nodes"] == 2


def test_multi_worker_runs_report_side_by_side_with_each_process(multi_runs, tmp_path):
    done = subprocess.run(_cli("report", str(multi_runs / "tf" / "multi"),
                               str(multi_runs / "torch" / "multi"), "--out", str(tmp_path)),
                          cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=patience(300))
    assert done.returncode == 0, done.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert "TensorFlow/Keras" in report and "PyTorch" in report
    processes = report.split("Each process's own clock")[1].split("\n\n")[1]
    rows = [line for line in processes.splitlines() if line.startswith("| ") and "Rank" not in line]
    assert len(rows) == 4  # two ranks in each framework
    assert "2 machine(s), torchrun" in processes and "TF_CONFIG" in processes


def _signal_machine(out: Path, marker: bytes, signum: int) -> None:
    """Send `signum` to every process of the run whose environment holds `marker`: SIGKILL
    as if its machine were lost, SIGSTOP as if it hung or its network were cut (torchrun
    starts its workers in their own sessions: signalling the launcher's group alone would
    miss them)."""
    for proc in Path("/proc").iterdir():
        try:
            if str(out).encode() in (proc / "cmdline").read_bytes() and \
                    marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signum)
        except (OSError, ValueError):  # ended meanwhile, or not a process
            continue


def _lose_worker_mid_run(tmp_path, starts: list[list[str]], envs: list[dict], lost: int,
                         signum: int) -> tuple[list[tuple[int, str]], float, dict]:
    """Start the processes, send `signum` to process `lost` and everything it started (their
    environment carries CNNCOMPARE_TEST_NODE=`lost`) after the chief's first epoch, and
    wait for the others; their outputs, the seconds the chief took to stop after the
    signal, and the chief's result."""
    out = tmp_path / "run"
    processes = [start(argv, {**env, "CNNCOMPARE_TEST_NODE": str(i)})
                 for i, (argv, env) in enumerate(zip(starts, envs))]
    try:
        wait_for(lambda: (out / "result.json").exists() and _result(out)["epochs"],
                  processes[0], timeout=300)
        marker = f"CNNCOMPARE_TEST_NODE={lost}".encode()
        _signal_machine(out, marker, signum)
        lost_at = time.monotonic()
        done = _finish([p for i, p in enumerate(processes) if i != lost], timeout=patience(240))
        stopped_after = time.monotonic() - lost_at
    finally:
        _signal_machine(out, marker, signal.SIGKILL)
        for p in processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        _finish(processes, timeout=patience(30))
    assert wait_until_gone(out) == []
    return done, stopped_after, _result(out)


def _check_the_chief_stopped(done: list[tuple[int, str]], stopped_after: float,
                             result: dict) -> None:
    (code, output), = done
    assert code != 0, output[-3000:]
    # bounded: the collective timeout, then the wait for peers' answers and writing the
    # result, under a safety net (conftest.patience); a chief that waited for its lost peer
    # without the timeout would never stop
    limit = float(TIMEOUT_S) + patience(70)
    assert stopped_after < limit, f"the chief took {stopped_after:.0f} s to stop (> {limit:.0f})"
    assert result["summary"]["status"] == "failed"
    assert result["epochs"], "the finished epochs are kept"


LOST = pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSTOP],
                               ids=["killed", "hung"])


@pytest.mark.machine_sensitive  # a limit
@LOST
def test_multi_worker_tf_lost_worker_stops_the_chief_naming_it(tmp_path, signum):
    ports = _ports(2)
    argv = _cli("run", "--framework", "tf", *LONG, "--collective-timeout", TIMEOUT_S,
                "--out", str(tmp_path / "run"))
    done, stopped_after, result = _lose_worker_mid_run(
        tmp_path, [argv, argv], [_env(TF_CONFIG=_tf_config(ports, i)) for i in range(2)], 1,
        signum)
    _check_the_chief_stopped(done, stopped_after, result)
    assert "1" in result.get("peer_failures", {}), result.get("error")


@pytest.mark.machine_sensitive  # a limit
@LOST
def test_multi_worker_torch_lost_worker_stops_the_chief_naming_it(tmp_path, signum):
    (port,) = _ports(1)
    starts = [_torchrun(node, port, "run", "--framework", "torch", *LONG, "--collective-timeout",
                        TIMEOUT_S, "--out", str(tmp_path / "run")) for node in range(2)]
    done, stopped_after, result = _lose_worker_mid_run(tmp_path, starts, [_env(), _env()], 1,
                                                       signum)
    _check_the_chief_stopped(done, stopped_after, result)
    assert result["peer_failures"]["1"].startswith("no answer"), result.get("error")


# ---- the launch read from the environment (compare.process.cluster), no processes started

def test_tf_config_gives_rank_processes_and_machines():
    from compare.process import cluster
    spec = {"cluster": {"chief": ["a:1"], "worker": ["a:2", "b:1", "c:1"]},
            "task": {"type": "worker", "index": 1}}
    launched = cluster.launch("tf", {"TF_CONFIG": json.dumps(spec)})
    assert (launched.launcher, launched.rank, launched.processes, launched.nodes) == \
        ("TF_CONFIG", 2, 4, 3)
    assert not launched.is_chief
    assert cluster.launch("torch", {"TF_CONFIG": json.dumps(spec)}).launcher is None
    assert cluster.replicas("tf", 2, launched) == 8  # --devices GPUs on each of 4 workers
    message = "Error ... /job:worker/replica:0/task:2 is down; /job:chief/replica:0/task:0"
    assert cluster.tf_tasks_named(message, {"TF_CONFIG": json.dumps(spec)}) == [3, 0]


def test_torchrun_variables_give_rank_processes_and_machines():
    from compare.process import cluster
    environ = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
               "TORCHELASTIC_RUN_ID": "job"}
    launched = cluster.launch("torch", environ)
    assert (launched.launcher, launched.rank, launched.processes, launched.nodes,
            launched.local_rank) == ("torchrun", 5, 8, 2, 1)
    assert cluster.replicas("torch", 1, launched) == 8
    assert cluster.launch("tf", environ).launcher is None


@pytest.mark.parametrize("environ, says", [
    ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not valid"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}'},
     "task worker 3 is not in its cluster"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, '
                   '"task": {"type": "worker", "index": 0}}'}, "names ps tasks"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "do not fit together"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "are not integers"),
])
def test_a_launch_that_makes_no_sense_is_one_clear_line(environ, says):
    from compare.errors import UserError
    from compare.process import cluster
    framework = "tf" if "TF_CONFIG" in environ else "torch"
    with pytest.raises(UserError, match=says):
        cluster.launch(framework, environ)


def _cli_says(args: list[str], env: dict) -> tuple[int, str]:
    done = subprocess.run(_cli(*args), cwd=REPO, env=_env(**env), capture_output=True,
                          text=True, timeout=patience(120))
    return done.returncode, done.stdout + done.stderr


def test_compare_and_sweep_refuse_a_launcher_and_say_what_to_run(tmp_path):
    tf_config = _tf_config([1, 2], 0)
    code, said = _cli_says(["compare", "--dataset", "synthetic", "--out", str(tmp_path)],
                           {"TF_CONFIG": tf_config})
    assert code == 2 and "compare cannot run under TF_CONFIG" in said and "Traceback" not in said
    code, said = _cli_says(["sweep", "--vary", "precision=fp32,mixed", "--out", str(tmp_path)],
                           {"RANK": "0", "WORLD_SIZE": "2"})
    assert code == 2 and "sweep cannot run under RANK/WORLD_SIZE" in said


def test_more_than_one_replica_per_torchrun_process_is_refused(tmp_path):
    code, said = _cli_says(["run", "--framework", "torch", *SMALL, "--devices", "2", "--out",
                            str(tmp_path)], {"RANK": "0", "WORLD_SIZE": "2"})
    assert code == 2 and "each torchrun process trains one replica" in said
    code, said = _cli_says(["run", "--framework", "tf", *SMALL, "--batch-size", "15", "--out",
                            str(tmp_path)], {"TF_CONFIG": _tf_config([1, 2], 1)})
    assert code == 2 and "does not split evenly over 2 replicas" in said


# ---- docs/machines.md's SLURM scripts, with stand-ins for srun and scontrol

SRUN = """#!/bin/bash
# srun's stand-in: the command once per "node" (2), with SLURM_PROCID and SLURM_NODEID
pids=()
for node in 0 1; do SLURM_PROCID=$node SLURM_NODEID=$node "$@" & pids+=($!); done
code=0
for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
exit $code
"""
SCONTROL = """#!/bin/bash
# scontrol show hostnames' stand-in: two names of this machine
printf '127.0.0.1\\nlocalhost\\n'
"""


def _docs_script(job_name: str) -> str:
    page = (Path(REPO) / "docs" / "machines.md").read_text()
    blocks = page.split("```bash\n")[1:]
    return next(b.split("```")[0] for b in blocks if f"--job-name={job_name}" in b)


@pytest.mark.parametrize("framework", ["tf", "torch"])
def test_multi_worker_docs_slurm_script_trains_on_two_nodes(tmp_path, framework):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    script = tmp_path / f"{framework}.sbatch"
    script.write_text(_docs_script(f"cnncompare-{framework}"))
    path = os.pathsep.join([str(stubs), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = _env(PATH=path, SLURM_JOB_NODELIST="node[1-2]", SLURM_NNODES="2",
               SLURM_JOB_ID="42", SLURM_GPUS_ON_NODE="1")
    done = subprocess.run(["bash", str(script), *SMALL], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=patience(600))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = _result(tmp_path / "runs" / f"{framework}-42")
    assert result["summary"]["status"] == "completed"
    assert result["fairness"]["processes"] == 2 and result["fairness"]["replicas"] == 2
    assert (tmp_path / "runs" / f"{framework}-42" / "workers" / "rank-1" / "log.txt").exists()


def test_doctor_forgets_the_launch_so_its_framework_processes_wait_for_no_peer(monkeypatch):
    from compare.process import cluster
    monkeypatch.setenv("TF_CONFIG", _tf_config([1, 2], 1))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert sorted(cluster.forget_launch()) == ["RANK", "TF_CONFIG", "WORLD_SIZE"]
    assert cluster.launch("tf").launcher is None and cluster.launch("torch").launcher is None


def test_several_processes_keep_one_window_size_until_they_agree_on_the_slowest():
    """Each window's losses are all-reduced in PyTorch, so processes must close the same
    windows: while measuring, the size stays fixed; after the first epoch it comes from the
    slowest process's time per call (what every process's agree() returns)."""
    from compare.experiment.config import RunConfig
    from compare.run import loop
    asked = []

    def agree(own_s):
        asked.append(own_s)
        return 0.05  # the slowest process: 50 ms per call

    windows = loop._Windows(RunConfig(timing_window_s=0.5), steps_per_call=2, agree=agree)
    assert windows.calls == 5  # FIRST_WINDOW_STEPS (10) in calls of 2 steps
    for seconds in (0.9, 0.01, 0.02, 0.03):  # this process alone would resize after each
        windows.observe(seconds, windows.calls)
        assert windows.calls == 5
    windows.end_epoch()
    assert asked == [pytest.approx(0.004)]  # its own median seconds per call: 0.02 / 5
    assert windows.calls == 10  # 0.5 s / 0.05 s per call
    windows.observe(1.0, 10)
    windows.end_epoch()
    assert windows.calls == 10 and len(asked) == 1  # held for the rest of the session
