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
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import patience
from processes import (
    REPO,
    SMALL_RUN,
    cli_command,
    free_ports,
    launcher_env,
    tf_config,
    wait_for,
    wait_until_gone,
)

pytestmark = pytest.mark.slow

# Long enough to kill a worker in the middle: 20 steps an epoch, 200 epochs.
LONG = ("--dataset", "synthetic", "--synthetic-size", "640", "--batch-size", "32", "--epochs",
        "200", "--precision", "fp32", "--device", "cpu", "--quiet")
TIMEOUT_S = "20"  # --collective-timeout for the failure tests


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
    # Set up before the function-scoped autouse fixtures (tests/conftest.py), so it isolates
    # its processes itself as they do: no GPU (as every non-gpu test), a cache of its own
    isolated = {"CUDA_VISIBLE_DEVICES": "",
                "CNNCOMPARE_HOME": str(tmp_path_factory.mktemp("home"))}
    ports = free_ports(2)
    tf_workers = [start(cli_command("run", "--framework", "tf", *SMALL_RUN, "--out",
                                    str(root / "tf" / "multi")),
                        launcher_env(TF_CONFIG=tf_config(ports, i), **isolated)) for i in range(2)]
    tf_single = start(cli_command("run", "--framework", "tf", *SMALL_RUN, "--devices", "2", "--out",
                                  str(root / "tf" / "single")), launcher_env(**isolated))
    for code, output in _finish(tf_workers + [tf_single]):
        assert code == 0, output[-3000:]
    (port,) = free_ports(1)
    torch_nodes = [start(_torchrun(node, port, "run", "--framework", "torch", *SMALL_RUN, "--out",
                                    str(root / "torch" / "multi")), launcher_env(**isolated))
                   for node in range(2)]
    torch_single = start(cli_command("run", "--framework", "torch", *SMALL_RUN, "--devices", "2",
                                     "--out", str(root / "torch" / "single")),
                         launcher_env(**isolated))
    for code, output in _finish(torch_nodes + [torch_single]):
        assert code == 0, output[-3000:]
    return root


@pytest.mark.machine_sensitive  # collectives sum in another order
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


@pytest.mark.machine_sensitive  # collectives sum in another order
def test_multi_worker_torch_matches_one_process_with_two_replicas(multi_runs):
    _check_same_experiment(multi_runs / "torch" / "single", multi_runs / "torch" / "multi")
    manifest = _result(multi_runs / "torch" / "multi")["fairness"]
    assert manifest["processes"] == 2 and manifest["launcher"] == "torchrun"
    assert manifest["nodes"] == 2


def test_multi_worker_runs_report_side_by_side_with_each_process(multi_runs, tmp_path):
    done = subprocess.run(cli_command("report", str(multi_runs / "tf" / "multi"),
                                      str(multi_runs / "torch" / "multi"), "--out", str(tmp_path)),
                          cwd=REPO, env=launcher_env(), capture_output=True, text=True,
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
    ports = free_ports(2)
    argv = cli_command("run", "--framework", "tf", *LONG, "--collective-timeout", TIMEOUT_S,
                       "--out", str(tmp_path / "run"))
    done, stopped_after, result = _lose_worker_mid_run(
        tmp_path, [argv, argv], [launcher_env(TF_CONFIG=tf_config(ports, i)) for i in range(2)], 1,
        signum)
    _check_the_chief_stopped(done, stopped_after, result)
    assert "1" in result.get("peer_failures", {}), result.get("error")


@pytest.mark.machine_sensitive  # a limit
@LOST
def test_multi_worker_torch_lost_worker_stops_the_chief_naming_it(tmp_path, signum):
    (port,) = free_ports(1)
    starts = [_torchrun(node, port, "run", "--framework", "torch", *LONG, "--collective-timeout",
                        TIMEOUT_S, "--out", str(tmp_path / "run")) for node in range(2)]
    done, stopped_after, result = _lose_worker_mid_run(
        tmp_path, starts, [launcher_env(), launcher_env()], 1, signum)
    _check_the_chief_stopped(done, stopped_after, result)
    assert result["peer_failures"]["1"].startswith("no answer"), result.get("error")


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
    env = launcher_env(PATH=path, SLURM_JOB_NODELIST="node[1-2]", SLURM_NNODES="2",
               SLURM_JOB_ID="42", SLURM_GPUS_ON_NODE="1")
    done = subprocess.run(["bash", str(script), *SMALL_RUN], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=patience(600))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = _result(tmp_path / "runs" / f"{framework}-42")
    assert result["summary"]["status"] == "completed"
    assert result["fairness"]["processes"] == 2 and result["fairness"]["replicas"] == 2
    assert (tmp_path / "runs" / f"{framework}-42" / "workers" / "rank-1" / "log.txt").exists()
