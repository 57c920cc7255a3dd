"""How the GPU battery runs a stage's commands: in their own process group, cut at the
stage's limit with what they wrote kept, and stopped with the battery."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import patience

from benchmarks.battery import running

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.machine_sensitive  # a limit
def test_a_stage_cut_by_its_limit_keeps_what_it_wrote(tmp_path):
    said = running.run_command([sys.executable, "-c", "import time; print('half done', "
                                "flush=True); time.sleep(30)"], tmp_path / "log", 2)
    assert said["timed_out"] and said["seconds"] < 30  # cut at 2 s, not after its 30-s sleep
    assert "half done" in (tmp_path / "log").read_text()
    # stdout apart from stderr: a stray stderr line does not spoil doctor's JSON
    running.run_command([sys.executable, "-c", "import sys; print('note: x', file=sys.stderr);"
                         " print('{\"verdict\": \"ok\"}')"], tmp_path / "log2", 30,
                        stdout=tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == {"verdict": "ok"}


def test_a_stopped_battery_stops_the_stage_it_runs(tmp_path):
    """SIGTERM to the battery as a script ends the stage's process group too: a stage runs in
    its own session, which outlived the battery on an H100 and trained beside the next."""
    pid_file = tmp_path / "stage.pid"
    stage = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
             "time.sleep(120)")
    battery = subprocess.Popen(
        [sys.executable, "-c", "import sys; from benchmarks.battery import running; "
         "running.stop_stages_with_the_battery(); "
         f"running.run_command([sys.executable, '-c', {stage!r}], "
         f"__import__('pathlib').Path({str(tmp_path / 'log')!r}), 600)"],
        cwd=REPO, env=running.child_environment())
    deadline = time.monotonic() + patience(60)
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    stage_pid = int(pid_file.read_text())
    battery.send_signal(signal.SIGTERM)
    assert battery.wait(timeout=patience(60)) == 128 + signal.SIGTERM
    with pytest.raises(ProcessLookupError):  # stopped and reaped by the battery
        os.kill(stage_pid, 0)


def test_a_gpu_test_stage_says_what_ran_even_when_cut_by_its_limit():
    """pytest's closing line where it got there; else, from -v's lines, the outcomes of the
    tests that ended, the failed ones named (a TensorFlow stage on an H100 was cut after 11
    of its 19 tests, and its -q dots named none)."""
    done = ["tests/test_gpu.py::test_torch_ddp_over_every_gpu SKIPPED (one GPU here) [ 14%]",
            "SKIPPED [1] tests/test_gpu.py:116: one GPU here: DDP over several needs two or more",
            "======= 12 passed, 2 skipped, 606 deselected, 2 warnings in 44.73s ======="]
    assert running.summary_of_tests(done) == (
        "12 passed, 2 skipped, 606 deselected, 2 warnings in 44.73s")
    cut = ["$ python -m pytest -m gpu -k 'test_tf_ or test_both_' -v -rs",
           "tests/test_gpu.py::test_tf_float16_loss_scaling_skips_and_rescales PASSED [  5%]",
           "tests/test_gpu.py::test_tf_mirrored_strategy_over_every_gpu FAILED      [ 10%]",
           "tests/test_gpu.py::test_tf_model_parallel_puts_each_stage_on_its_gpu SKIPPED (one "
           "GPU here: model parallelism over GPUs needs two or more) [ 15%]",
           "tests/test_gpu_features.py::test_tf_every_pipeline_trains_on_the_gpus[naive] PASSED"
           " [ 30%]",
           "tests/test_gpu_features.py::test_tf_xla_on_the_gpu "]  # cut while it ran
    assert running.summary_of_tests(cut) == (
        "cut after 4 tests: 1 failed, 2 passed, 1 skipped "
        "(failed: test_tf_mirrored_strategy_over_every_gpu)")
    assert running.summary_of_tests(["$ python -m pytest", "collecting ..."]) is None


def test_the_gpu_test_stage_runs_only_the_tests_named_by_tests(tmp_path):
    """--tests narrows the GPU-test stage to the tests a rental did not reach: pytest
    collects exactly those of the framework whose names hold one of the parts."""
    from benchmarks import gpu_battery
    from benchmarks.battery.stages import test_commands
    ctx = gpu_battery.context(gpu_battery.arguments(
        ["--tiny", "--out", str(tmp_path), "--tests", "resume,doctor,"]))
    argv = test_commands("tf", ctx)[0]
    collected = subprocess.run([*argv[:argv.index("-v")], "--collect-only", "-q"], cwd=REPO,
                               capture_output=True, text=True, timeout=patience(120)).stdout
    names = sorted(line.split("::")[-1] for line in collected.splitlines() if "::" in line)
    assert names == ["test_both_doctor_on_a_gpu_host", "test_tf_resume_restores_the_loss_scale"]
