"""The launch read from the environment (compare.machine.cluster: TF_CONFIG, torchrun's variables),
with no process started: ranks, processes and machines, what makes no sense, what compare, sweep
and doctor do under a launcher, and one window size across processes."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import patience
from processes import REPO, SMALL_RUN, cli_command, launcher_env, tf_config


def test_tf_config_gives_rank_processes_and_machines():
    from compare.machine import cluster
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
    from compare.machine import cluster
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
    from compare.machine import cluster
    framework = "tf" if "TF_CONFIG" in environ else "torch"
    with pytest.raises(UserError, match=says):
        cluster.launch(framework, environ)


def _cli_says(args: list[str], env: dict) -> tuple[int, str]:
    done = subprocess.run(cli_command(*args), cwd=REPO, env=launcher_env(**env),
                          capture_output=True, text=True, timeout=patience(120))
    return done.returncode, done.stdout + done.stderr


def test_compare_and_sweep_refuse_a_launcher_and_say_what_to_run(tmp_path):
    code, said = _cli_says(["compare", "--dataset", "synthetic", "--out", str(tmp_path)],
                           {"TF_CONFIG": tf_config([1, 2], 0)})
    assert code == 2 and "compare cannot run under TF_CONFIG" in said and "Traceback" not in said
    code, said = _cli_says(["sweep", "--vary", "precision=fp32,mixed", "--out", str(tmp_path)],
                           {"RANK": "0", "WORLD_SIZE": "2"})
    assert code == 2 and "sweep cannot run under RANK/WORLD_SIZE" in said


def test_more_than_one_replica_per_torchrun_process_is_refused(tmp_path):
    code, said = _cli_says(["run", "--framework", "torch", *SMALL_RUN, "--devices", "2", "--out",
                            str(tmp_path)], {"RANK": "0", "WORLD_SIZE": "2"})
    assert code == 2 and "each torchrun process trains one replica" in said
    code, said = _cli_says(["run", "--framework", "tf", *SMALL_RUN, "--batch-size", "15", "--out",
                            str(tmp_path)], {"TF_CONFIG": tf_config([1, 2], 1)})
    assert code == 2 and "does not split evenly over 2 replicas" in said


def test_doctor_forgets_the_launch_so_its_framework_processes_wait_for_no_peer(monkeypatch):
    from compare.machine import cluster
    monkeypatch.setenv("TF_CONFIG", tf_config([1, 2], 1))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert sorted(cluster.forget_launch()) == ["RANK", "TF_CONFIG", "WORLD_SIZE"]
    assert cluster.launch("tf").launcher is None and cluster.launch("torch").launcher is None


def test_several_processes_keep_one_window_size_until_they_agree_on_the_slowest():
    """Each window's losses are all-reduced in PyTorch, so processes must close the same
    windows: while measuring, the size stays fixed; after the first epoch it comes from the
    slowest process's time per call (what every process's agree() returns)."""
    from compare.experiment.config import RunConfig
    from compare.run.schedule import TimingWindows
    asked = []

    def agree(own_s):
        asked.append(own_s)
        return 0.05  # the slowest process: 50 ms per call

    windows = TimingWindows(RunConfig(timing_window_s=0.5), steps_per_call=2, agree=agree)
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
