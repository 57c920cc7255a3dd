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
