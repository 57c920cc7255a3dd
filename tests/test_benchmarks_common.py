"""benchmarks/common.py's run_and_say: one A/B arm run in its checkout, its exit status said."""
from __future__ import annotations

import os
import sys

from benchmarks.common import run_and_say


def test_an_arm_runs_in_its_folder_with_its_environment_and_says_how_it_ended(tmp_path, capsys):
    command = [sys.executable, "-c", "import os, pathlib, sys; pathlib.Path('arm.txt')"
               ".write_text(os.environ['ARM']); sys.exit(3)"]
    status = run_and_say("batch4-new-r0", command, tmp_path, {**os.environ, "ARM": "new"})
    assert status == 3
    assert (tmp_path / "arm.txt").read_text() == "new"  # ran in cwd, with the env given
    said = capsys.readouterr().out
    assert said.startswith("batch4-new-r0: exit 3, ") and said.rstrip().endswith(" s")
