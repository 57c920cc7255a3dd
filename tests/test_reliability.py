"""Divergence, Ctrl-C, out of memory and crashes: one clear line, and nothing finished is lost."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compare import loop, orchestrate, results, runner, specs
from compare import recorder as recorder_module
from compare.interface import DeviceChoice
from compare.errors import EXIT_DIVERGED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OOM
from conftest import tiny_config

REPO = Path(__file__).resolve().parent.parent


class FakeTrainer:
    """A trainer that misbehaves on cue; the loop and recorder are the real ones."""

    framework = "torch"
    choice = DeviceChoice("cpu", ("cpu",), None, "CPU (test)")
    spec = specs.lenet()
    replicas = 1
    steps_per_epoch = 4
    gpu_indices = None

    def __init__(self, fail_at_epoch: int, failure):
        self.fail_at_epoch, self.failure = fail_at_epoch, failure
        self.epoch = 0

    def batches(self, epoch):
        self.epoch = epoch + 1
        return iter(range(self.steps_per_epoch))

    def train_step(self, batch, lr):
        if self.epoch == self.fail_at_epoch and batch == 2:
            if self.failure == "nan":
                return math.nan
            raise self.failure
        return 1.0 / self.epoch

    def losses(self, pending):
        return [float(v) for v in pending]

    def sync(self):
        pass

    def epoch_device_time(self):
        return None

    def evaluate(self):
        return 1.0, 0.5

    def peak_memory(self):
        return None, "fake"

    def reset_peak_memory(self):
        pass

    def manifest(self):
        return {}

    def save_model(self, directory):
        return "model.fake"

    def save_checkpoint(self, directory):
        return "state.fake"

    def load_checkpoint(self, directory):
        pass

    def is_out_of_memory(self, exc):
        return isinstance(exc, MemoryError)

    def close(self):
        pass


def _run_fake(tmp_path, failure, capsys=None):
    config = tiny_config(tmp_path, epochs=3, timing_window=2)
    trainer = FakeTrainer(2, failure)
    recorder = recorder_module.Recorder(config, trainer, specs.lenet(), {}, {}, {})
    code = loop.train_epochs(trainer, config, recorder)
    return code, results.read_result(tmp_path / "run" / "result.json")


def test_nan_loss_stops_the_run_and_keeps_finished_epochs(tmp_path, capsys):
    code, result = _run_fake(tmp_path, "nan")
    assert code == EXIT_DIVERGED
    assert result["summary"]["status"] == "diverged" and len(result["epochs"]) == 1
    assert result["summary"]["final_test_accuracy"] == 0.5
    assert result["error"].startswith("the training loss became nan at epoch 2, step 7: lower --lr")
    assert "error: the training loss became nan" in capsys.readouterr().err


def test_out_of_memory_names_the_batch_size_and_a_smaller_one(tmp_path, capsys):
    code, result = _run_fake(tmp_path, MemoryError("CUDA out of memory"))
    assert code == EXIT_OOM and result["summary"]["status"] == "failed" and len(result["epochs"]) == 1
    assert result["error"] == "out of device memory at --batch-size 32 (32 per replica); try --batch-size 16"


def test_a_crash_keeps_finished_epochs_and_says_what_broke(tmp_path):
    code, result = _run_fake(tmp_path, RuntimeError("cuDNN exploded"))
    assert code == EXIT_FAILED and result["summary"]["status"] == "failed"
    assert len(result["epochs"]) == 1 and result["error"] == "RuntimeError: cuDNN exploded"


def test_keyboard_interrupt_keeps_finished_epochs(tmp_path):
    code, result = _run_fake(tmp_path, KeyboardInterrupt())
    assert code == EXIT_INTERRUPTED and result["summary"]["status"] == "interrupted"
    assert len(result["epochs"]) == 1


def test_real_divergence_exits_3_with_a_valid_result(tmp_path):
    from compare import datasets
    from torch_impl import train as torch_train
    config = tiny_config(tmp_path, lr=1e6, epochs=2)
    assert torch_train.train(config, datasets.config_dataset(config)) == EXIT_DIVERGED
    result = results.read_result(tmp_path / "run" / "result.json")
    assert result["summary"]["status"] == "diverged" and "lower --lr" in result["error"]


def _cli(*args) -> list[str]:
    return [sys.executable, "-c", "from compare.cli import main; main()", *args]


def _wait_for_epoch(path: Path, process, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before it could be interrupted"
        try:
            if json.loads(path.read_text())["epochs"]:
                return
        except (OSError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.2)
    raise TimeoutError(path)


@pytest.mark.slow
def test_ctrl_c_during_run_writes_an_interrupted_result(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(_cli("run", "--framework", "torch", "--dataset", "synthetic", "--synthetic-size",
                                    "2000", "--epochs", "200", "--workers", "0", "--quiet", "--out", str(out)),
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    _wait_for_epoch(out / "result.json", process)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    result = results.read_result(out / "result.json")
    assert result["summary"]["status"] == "interrupted" and 1 <= len(result["epochs"]) < 200
    assert "Traceback" not in stderr and "interrupted" in stderr


@pytest.mark.slow
def test_ctrl_c_during_compare_reports_what_finished(tmp_path):
    out = tmp_path / "cmp"
    process = subprocess.Popen(_cli("compare", "--dataset", "synthetic", "--synthetic-size", "2000", "--epochs",
                                    "200", "--seeds", "2", "--precision", "fp32", "--workers", "0", "--quiet",
                                    "--out", str(out)),
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    _wait_for_epoch(out / "runs" / "tf-seed0" / "result.json", process, timeout=240)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=180)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["interrupted"]
    assert {(r["framework"], r["reason"]) for r in summary["not_run"]} == {
        ("torch", "interrupted"), ("tf", "interrupted")} and len(summary["not_run"]) == 3
    assert (out / "report.html").exists() and "interrupted" in (out / "report.md").read_text()


def test_a_framework_killed_mid_comparison_leaves_the_other_and_the_report(tmp_path, monkeypatch):
    """The tf subprocess dies by SIGKILL; torch's run and the report survive, with the failure shown."""
    monkeypatch.setitem(runner.MODULES, "tf", "sigkill_self")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    config = tiny_config(tmp_path, epochs=1)
    code = orchestrate.compare_frameworks(config, 1, tmp_path / "cmp", parity_steps=1, ignore_parity=True,
                                          command="cnncompare compare (test)")
    assert code == EXIT_FAILED
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["parity"]["passed"] is False and "SIGKILL" in summary["parity"]["error"]
    assert summary["frameworks"]["torch"]["completed"] == 1
    killed = [r for r in summary["not_run"] if r["framework"] == "tf"]
    assert killed and "killed by SIGKILL" in killed[0]["reason"]
    assert "killed by SIGKILL" in (tmp_path / "cmp" / "report.html").read_text()


def test_parity_failure_stops_the_comparison_with_a_report(tmp_path, monkeypatch, capsys):
    from compare import parity
    monkeypatch.setattr(parity, "run_parity", lambda *a, **k: {
        "passed": False, "failed": ["grad_max_rel_diff"], "steps": 3, "tolerances": {},
        "logits_max_abs_diff": 0.0, "loss_abs_diff": 0.0, "grad_max_rel_diff": 0.4,
        "params_rel_update_diff_after_steps": 0.0, "params_max_abs_diff_after_steps": 0.0})
    code = orchestrate.compare_frameworks(tiny_config(tmp_path), 1, tmp_path / "cmp", command="x")
    assert code == EXIT_FAILED
    assert "the parity check failed (grad_max_rel_diff)" in capsys.readouterr().err
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["runs"] == [] and len(summary["not_run"]) == 2
    assert "FAILED" in (tmp_path / "cmp" / "report.md").read_text()


@pytest.mark.slow
def test_ctrl_c_during_sweep_reports_what_finished(tmp_path):
    out = tmp_path / "sweep"
    process = subprocess.Popen(_cli("sweep", "--framework", "torch", "--dataset", "synthetic", "--synthetic-size",
                                    "2000", "--epochs", "200", "--precision", "fp32", "--workers", "0",
                                    "--vary", "batch-size=32,64", "--quiet", "--out", str(out)),
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    _wait_for_epoch(out / "runs" / "torch-batch-size_32" / "result.json", process)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["interrupted", "not run"]
    assert rows[0]["summary"]["epochs_completed"] >= 1 and (out / "sweep.html").exists()
