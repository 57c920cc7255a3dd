"""The heavy tier's set-up, for real: `cnncompare setup gpu --cpu` builds TensorFlow's own
environment with pip (TensorFlow's CPU build from the package index or pip's cache, the
project's other requirements less PyTorch's, the project editable without its dependencies),
records it, and doctor trains both frameworks; a second call changes nothing; `compare`
then runs TensorFlow in that environment with no variable set. The same code path as on a
GPU host but for TensorFlow's distribution (tensorflow[and-cuda] there), whose build has
not run on a GPU host with a package index yet (docs/gpu.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import patience

from compare.experiment.frameworks import REPOSITORY, TENSORFLOW_PIN
from compare.setup import config

CLI = [sys.executable, "-c", "from compare.cli import main; main()"]


def _cli(*args: str, minutes: float) -> subprocess.CompletedProcess:
    """The command line in a process of its own, as a user's shell runs it: neither
    interpreter variable set."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CNNCOMPARE_TF_PYTHON", "CNNCOMPARE_TORCH_PYTHON")}
    return subprocess.run([*CLI, *args], cwd=REPOSITORY, capture_output=True, text=True,
                          env=env, timeout=patience(60 * minutes))


def _unchanged(home: Path) -> tuple:
    written = home / "config.json"
    folders = sorted((home / "environments").glob("tf-*"))
    return (written.read_bytes(), written.stat().st_ino, written.stat().st_mtime_ns,
            [(p.name, p.stat().st_ino, p.stat().st_mtime_ns) for p in folders])


@pytest.fixture
def environments_removed(isolated_home):
    """The environment built (1.5 GB) goes when the test ends: pytest keeps its folders."""
    yield
    shutil.rmtree(isolated_home / "environments", ignore_errors=True)


@pytest.mark.slow  # pip installs TensorFlow's CPU build (about 90 s), doctor, one comparison
def test_the_set_up_builds_tensorflows_environment_and_compare_finds_it(
        isolated_home, tmp_path, environments_removed):
    began = time.monotonic()
    built = _cli("setup", "gpu", "--cpu", minutes=5)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    recorded = config.read().environments["tf"]
    assert recorded.kind == "cpu" and recorded.project == f"editable {REPOSITORY}"
    assert Path(recorded.root).parent == isolated_home / "environments"
    assert recorded.python == str(Path(recorded.root) / "bin" / "python")
    said = " ".join(built.stdout.split())
    assert f"TensorFlow now runs in {recorded.python}" in said
    assert "ready to compare on CPU" in said  # doctor trained both, TensorFlow in the new one
    version = subprocess.run([recorded.python, "-c", "import tensorflow as tf, torch"],
                             capture_output=True, text=True, timeout=patience(60))
    assert "No module named 'torch'" in version.stderr  # PyTorch's side stays out
    took = time.monotonic() - began
    before = _unchanged(isolated_home)
    again = _cli("setup", "gpu", "--cpu", minutes=1)
    assert again.returncode == 0 and "current, nothing changed" in again.stdout, again.stderr
    assert _unchanged(isolated_home) == before
    out = tmp_path / "cmp"
    compared = _cli("compare", "--dataset", "synthetic", "--synthetic-size", "256", "--epochs",
                    "1", "--seeds", "1", "--precision", "fp32", "--workers", "0", "--device",
                    "cpu", "--no-own-loops", "--quiet", "--out", str(out), minutes=5)
    assert compared.returncode == 0, compared.stderr[-3000:]
    results = {fw: json.loads((out / "runs" / f"{fw}-seed0" / "result.json").read_text())
               for fw in ("tf", "torch")}
    assert results["tf"]["fairness"]["interpreter"] == {
        "python": recorded.python,
        "from": f"recorded by `cnncompare setup gpu` in {isolated_home / 'config.json'}"}
    assert results["tf"]["environment"]["tensorflow"] == TENSORFLOW_PIN
    assert results["torch"]["fairness"]["interpreter"]["from"] == "cnncompare's own"
    print(f"set-up built and checked in {took:.0f} s; all in {time.monotonic() - began:.0f} s")
