"""Divergence, out of memory, crashes, Ctrl-C and SIGTERM, a lost trainer and two commands on
one directory: one clear line, and nothing finished is lost."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience, tiny_config
from processes import (
    LONG_RUN,
    REPO,
    has_epoch,
    start,
    wait_for,
    wait_until_gone,
)

from compare import schema
from compare.errors import EXIT_DIVERGED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OOM
from compare.experiment import networks, precision_rule
from compare.experiment.config import ComparisonConfig, RunConfig
from compare.process import comparison, lock, runner
from compare.run import loop, shutdown
from compare.run import recorder as recorder_module
from compare.run.interface import DeviceChoice

# precision-, tolerance- or time-sensitive: CI runs these again as on an AVX2-only CPU
pytestmark = pytest.mark.machine_sensitive


class FakeTrainer:
    """A trainer that misbehaves on cue; the loop and recorder are the real ones."""

    framework = "torch"
    choice = DeviceChoice("cpu", ("cpu",), None, "CPU (test)")
    spec = networks.get_spec("lenet")
    replicas = 1
    steps_per_epoch = 4
    steps_per_call = 1
    gpu_indices = None
    numerics = {"resolved": precision_rule.choose("fp32", False)}

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

    def train_steps(self, batches, lrs):
        return [self.train_step(next(batches), lr) for lr in lrs], 0.0

    def read_steps(self, pending):
        return [float(v) for losses, _ in pending for v in losses], 0.0

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

    def compilation(self):
        return {"compiler": None, "compiled": False}

    def loss_scale(self):
        return None

    def save_model(self, directory):
        return "model.fake"

    def save_checkpoint(self, directory):
        return "state.fake"

    def load_checkpoint(self, directory):
        pass

    def is_out_of_memory(self, exc):
        return isinstance(exc, MemoryError)

    def scalar_writer(self, directory):
        return NoScalars()

    def close(self):
        pass


class NoScalars:
    """A TensorBoard writer that writes nothing."""

    def scalars(self, tag, values, steps):
        pass

    def flush(self):
        pass

    def close(self):
        pass


def _run_fake(tmp_path, failure, capsys=None):
    config = tiny_config(tmp_path, epochs=3, timing_window=2)
    trainer = FakeTrainer(2, failure)
    recorder = recorder_module.Recorder(config, trainer, networks.get_spec("lenet"), {}, {}, {})
    code = loop.train_epochs(trainer, config, recorder)
    return code, schema.read_result(tmp_path / "run" / "result.json")


def test_nan_loss_stops_the_run_and_keeps_finished_epochs(tmp_path, capsys):
    code, result = _run_fake(tmp_path, "nan")
    assert code == EXIT_DIVERGED
    assert result["summary"].status == "diverged" and len(result["epochs"]) == 1
    assert result["summary"].final_test_accuracy == 0.5
    assert result["error"].startswith("the training loss became nan at epoch 2, step 7: lower --lr")
    assert "error: the training loss became nan" in capsys.readouterr().err


def test_out_of_memory_names_the_batch_size_and_a_smaller_one(tmp_path, capsys):
    code, result = _run_fake(tmp_path, MemoryError("CUDA out of memory"))
    assert code == EXIT_OOM and result["summary"].status == "failed"
    assert len(result["epochs"]) == 1
    assert result["error"] == ("out of device memory at --batch-size 32 (32 per replica); "
                               "try --batch-size 16")


def test_a_crash_keeps_finished_epochs_and_says_what_broke(tmp_path):
    code, result = _run_fake(tmp_path, RuntimeError("cuDNN exploded"))
    assert code == EXIT_FAILED and result["summary"].status == "failed"
    assert len(result["epochs"]) == 1 and result["error"] == "RuntimeError: cuDNN exploded"


def test_keyboard_interrupt_keeps_finished_epochs(tmp_path):
    code, result = _run_fake(tmp_path, KeyboardInterrupt())
    assert code == EXIT_INTERRUPTED and result["summary"].status == "interrupted"
    assert len(result["epochs"]) == 1


def test_real_divergence_exits_3_with_a_valid_result(tmp_path):
    from compare.experiment import datasets
    from torch_impl import train as torch_train
    config = tiny_config(tmp_path, lr=1e6, epochs=2)
    assert torch_train.train(config, datasets.config_dataset(config)) == EXIT_DIVERGED
    result = schema.read_result(tmp_path / "run" / "result.json")
    assert result["summary"].status == "diverged" and "lower --lr" in result["error"]


@pytest.mark.slow
def test_ctrl_c_during_run_writes_an_interrupted_result(tmp_path):
    out = tmp_path / "run"
    process = start("run", "--framework", "torch", *LONG_RUN, "--workers", "0",
                     "--out", str(out), out=out)
    wait_for(has_epoch(out / "result.json"), process)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == EXIT_INTERRUPTED, stderr
    result = schema.read_result(out / "result.json")
    assert result["summary"].status == "interrupted" and 1 <= len(result["epochs"]) < 200
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert wait_until_gone(out) == []


@pytest.mark.slow
def test_ctrl_c_during_compare_reports_what_finished(tmp_path):
    out = tmp_path / "cmp"
    process = start("compare", *LONG_RUN, "--seeds", "2", "--workers", "0", "--out", str(out),
                     out=out)
    wait_for(has_epoch(out / "runs" / "tf-seed0" / "result.json"), process)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=patience(180))
    assert process.returncode == EXIT_INTERRUPTED, stderr
    summary = json.loads((out / "summary.json").read_text())
    # PyTorch's seed-0 run takes turns beside TensorFlow's: stopped in its first epoch (a
    # result) or waiting for its first turn (none); every other run never started
    ran = {(r["framework"], r["seed"]): r["status"] for r in summary["runs"]}
    assert ran.pop(("tf", 0)) == "interrupted" and set(ran.values()) <= {"interrupted"}
    assert set(ran) <= {("torch", 0)}
    assert {(r["framework"], r["reason"]) for r in summary["not_run"]} == {
        ("torch", "interrupted"), ("tf", "interrupted")}
    assert len(summary["not_run"]) == 3 - len(ran)
    assert (out / "report.html").exists() and "interrupted" in (out / "report.md").read_text()
    assert wait_until_gone(out) == []


# A whole comparison (14-25 s under pytest -n 2): the heavy tier. What a killed framework
# process leaves is the next test's, a comparison stopped with its report the one after's.
@pytest.mark.slow
def test_a_framework_killed_mid_comparison_leaves_the_other_and_the_report(tmp_path,
                                                                           monkeypatch):
    """The tf subprocess dies by SIGKILL; torch's run and the report survive, with the
    failure shown."""
    monkeypatch.setitem(runner.MODULES, "tf", "sigkill_self")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    config = tiny_config(tmp_path, epochs=1)
    code = comparison.compare_frameworks(
        config, ComparisonConfig(seeds=1, parity_steps=1, ignore_parity=True, own_loops=False),
        tmp_path / "cmp", command="cnncompare compare (test)")
    assert code == EXIT_FAILED
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["parity"]["passed"] is False and "SIGKILL" in summary["parity"]["error"]
    assert summary["frameworks"]["torch"]["completed"] == 1
    killed = [r for r in summary["not_run"] if r["framework"] == "tf"]
    assert killed and "killed by SIGKILL" in killed[0]["reason"]
    assert "killed by SIGKILL" in (tmp_path / "cmp" / "report.html").read_text()


def _killed_mid_run(tmp_path, monkeypatch) -> tuple[runner.Outcome, RunConfig]:
    """A PyTorch trainer, a process of its own, that dies by SIGKILL after writing its first
    epoch (result still 'running'): its outcome, and its config."""
    monkeypatch.setitem(runner.MODULES, "torch", "dies_mid_run")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    config = tiny_config(tmp_path, epochs=2, framework="torch")
    outcome = runner.run_framework(config, on_line=lambda line: None)
    monkeypatch.setitem(runner.MODULES, "torch", "torch_impl.train")
    return outcome, config


def test_a_trainer_killed_mid_run_is_recorded_failed_with_its_exit(tmp_path, monkeypatch):
    """A trainer dies by SIGKILL after writing its first epoch: its parent marks the result
    failed with the signal and the log's last lines, and the report's caveat names it."""
    outcome, _ = _killed_mid_run(tmp_path, monkeypatch)
    assert outcome.code == -signal.SIGKILL and outcome.status == "failed"
    assert "killed by SIGKILL" in outcome.error
    result = schema.read_result(outcome.result_path)
    assert result["summary"].status == "failed" and len(result["epochs"]) == 1
    assert result["exit"]["reason"] == "killed by SIGKILL" and result["exit"]["code"] == -9
    assert "dies_mid_run: SIGKILL" in result["exit"]["log_tail"]
    from compare import report
    summary = report.summarise(report.load_runs([outcome.result_path]), None, None)
    assert "PyTorch seed 0 failed (killed by SIGKILL)" in " ".join(summary["verdict"])


# a second trainer process (5-8 s under pytest -n 2) in the heavy tier: a run resumed from its
# checkpoint is tests/test_resume.py's, a killed one's record the test above's
@pytest.mark.slow
def test_a_trainer_killed_mid_run_resumes_as_an_unfinished_run(tmp_path, monkeypatch):
    """--resume continues a run whose trainer died by SIGKILL from its checkpoint, as an
    unfinished run: its second epoch, in a second session."""
    outcome, config = _killed_mid_run(tmp_path, monkeypatch)
    assert outcome.status == "failed"
    resumed = runner.run_framework(config, on_line=lambda line: None, resume=True)
    assert resumed.status == "completed"
    result = schema.read_result(outcome.result_path)
    assert len(result["epochs"]) == 2 and len(result["sessions"]) == 2


def test_parity_failure_stops_the_comparison_with_a_report(tmp_path, monkeypatch, capsys):
    from compare.process import parity_check
    monkeypatch.setattr(parity_check, "run_parity", lambda *a, **k: {
        "passed": False, "failed": ["grad_max_rel_diff"], "steps": 3, "tolerances": {},
        "logits_max_abs_diff": 0.0, "loss_abs_diff": 0.0, "grad_max_rel_diff": 0.4,
        "params_rel_update_diff_after_steps": 0.0, "params_max_abs_diff_after_steps": 0.0})
    code = comparison.compare_frameworks(tiny_config(tmp_path),
                                          ComparisonConfig(seeds=1, own_loops=False),
                                          tmp_path / "cmp", command="x")
    assert code == EXIT_FAILED
    assert "the parity check failed (grad_max_rel_diff)" in capsys.readouterr().err
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["runs"] == [] and len(summary["not_run"]) == 2
    assert "FAILED" in (tmp_path / "cmp" / "report.md").read_text()


@pytest.mark.slow
def test_ctrl_c_during_sweep_reports_what_finished(tmp_path):
    out = tmp_path / "sweep"
    process = start("sweep", "--framework", "torch", *LONG_RUN, "--workers", "0",
                     "--vary", "batch-size=32,64", "--out", str(out), out=out)
    wait_for(has_epoch(out / "runs" / "torch-batch-size_32" / "result.json"), process)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == EXIT_INTERRUPTED, stderr
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["interrupted", "not run"]
    assert rows[0]["summary"]["epochs_completed"] >= 1 and (out / "sweep.html").exists()
    assert wait_until_gone(out) == []


# ---- one command per output directory


def _hold_lock(directory: Path) -> subprocess.Popen:
    """Another process holding `directory`'s lock until killed."""
    code = ("import sys, time; from compare.process import lock\n"
            "with lock.hold(sys.argv[1], 'test'): print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(directory)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.parametrize("command", [
    ["run", "--framework", "torch"], ["compare"],
    ["sweep", "--framework", "torch", "--vary", "batch-size=16,32"]])
def test_a_second_command_on_the_same_out_is_refused(tmp_path, command):
    from click.testing import CliRunner

    from compare.cli import cli
    holder = _hold_lock(tmp_path / "out")
    try:
        outcome = CliRunner().invoke(cli, [*command, "--dataset", "synthetic", "--synthetic-size",
                                           "64", "--quiet", "--out", str(tmp_path / "out")])
    finally:
        holder.kill()
        holder.wait()
    assert outcome.exit_code == 2 and len(outcome.output.strip().splitlines()) == 1
    assert f"is in use by pid {holder.pid} on " in outcome.output
    assert not list((tmp_path / "out").rglob("result.json"))


def test_a_stale_lock_is_taken_over_with_a_note(tmp_path, capsys):
    holder = _hold_lock(tmp_path)
    holder.kill()  # SIGKILL: its lock file stays, but nothing holds it
    holder.wait()
    assert (tmp_path / lock.LOCK_FILE).exists()
    with lock.hold(tmp_path, "test") as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert f"was locked by pid {holder.pid} on " in capsys.readouterr().err
    assert not (tmp_path / lock.LOCK_FILE).exists()


def test_a_lost_reader_of_a_workers_fd_server_prints_nothing(capsys):
    """A DataLoader worker hands a batch's shared memory over multiprocessing.resource_sharer,
    whose server thread reports errors to sys.excepthook; when the trainer stops
    mid-handover that thread's reader is gone: the stop working, no traceback. Any other
    error still prints, from that thread too."""
    def raised(exc: BaseException, function: str, filename: str) -> str:
        namespace: dict = {}
        exec(compile(f"def {function}(e):\n    raise e\n", filename, "exec"), namespace)
        try:
            namespace[function](exc)
        except BaseException as caught:  # noqa: BLE001 - handed to the hook as Python would
            shutdown.quiet_lost_reader(type(caught), caught, caught.__traceback__.tb_next)
        return capsys.readouterr().err
    sharer = "/usr/lib/python3.11/multiprocessing/resource_sharer.py"
    assert raised(ConnectionResetError(104, "Connection reset by peer"), "_serve", sharer) == ""
    assert raised(EOFError(), "_serve", sharer) == ""
    assert "ValueError: a real bug" in raised(ValueError("a real bug"), "_serve", sharer)
    assert "ConnectionResetError" in raised(ConnectionResetError(104, "reset"), "_serve",
                                            "/work/elsewhere.py")
