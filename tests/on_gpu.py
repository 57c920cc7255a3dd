"""What the GPU tests share (their fixtures, torch_gpu and tf_gpus, are conftest's): a run's
config on the GPU, a trainer, TensorFlow's scenarios and CLI runs in their own processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import patience, tiny_config

from compare import schema
from compare.experiment import datasets
from compare.process import runner

REPO = Path(__file__).resolve().parent.parent


def gpu_config(tmp_path, **changes):
    return tiny_config(tmp_path, device="gpu", **changes)


def torch_trainer(torch_train, config):
    return torch_train.Trainer(config, datasets.config_dataset(config),
                               torch_train.select_device(config))


def tf_scenario(name: str, tmp_path: Path) -> dict:
    """A TensorFlow scenario in TensorFlow's interpreter ($CNNCOMPARE_TF_PYTHON where set, as
    every TensorFlow process of the tool), with the repository on its path."""
    done = subprocess.run([runner.python_for("tf"), str(REPO / "tests" / "gpu_tf_scenarios.py"),
                           name, str(tmp_path / name)], cwd=REPO, capture_output=True,
                          text=True, timeout=patience(600), env=runner.child_environment())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from compare.cli import main; main()", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=patience(600))


def tf_run(tmp_path: Path, name: str, *options: str) -> dict:
    out = tmp_path / name
    done = cli("run", "--framework", "tf", "--device", "gpu", "--dataset", "synthetic",
                "--synthetic-size", "1024", "--quiet", "--out", str(out), *options)
    assert done.returncode == 0, done.stderr[-3000:]
    return schema.read_result(out / "result.json")
