"""Stop signals sent to the parent alone, the parent's death, a closed output pipe and the
shield around writing: the trainers stop, write what they finished, and leave no process."""

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
from processes import (
    CLI,
    LONG_RUN,
    has_epoch,
    left_behind,
    start,
    wait_for,
    wait_until_gone,
)

from compare import schema
from compare.errors import Interrupted
from compare.run import shutdown

REPO = Path(__file__).resolve().parent.parent

# precision-, tolerance- or time-sensitive: CI runs these again as on an AVX2-only CPU

# time-sensitive: CI runs these again as on an AVX2-only CPU
pytestmark = pytest.mark.machine_sensitive


@pytest.mark.slow
@pytest.mark.parametrize("signum, workers", [pytest.param(signal.SIGTERM, "0", id="SIGTERM"),
                                             pytest.param(signal.SIGHUP, "2", id="SIGHUP")])
def test_a_stop_signal_to_the_parent_alone_reaches_the_trainer(tmp_path, signum, workers):
    """`kill PID` of the CLI, not of its group (as `timeout` and schedulers may do): the
    trainer (and its DataLoader workers) stop, the result says interrupted, and the CLI
    exits 128 + the signal after them, leaving no process behind."""
    out = tmp_path / "run"
    process = start("run", "--framework", "torch", *LONG_RUN, "--workers", workers,
                     "--out", str(out), out=out)
    wait_for(has_epoch(out / "result.json"), process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == 128 + signum, stderr
    result = schema.read_result(out / "result.json")
    assert result["summary"].status == "interrupted" and 1 <= len(result["epochs"]) < 200
    assert result["error"] == f"interrupted ({signal.Signals(signum).name})"
    assert "Traceback" not in stderr
    assert wait_until_gone(out) == []


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_stops_the_run_as_interrupted(tmp_path):
    """`kill -- -PGID`, or a scheduler cancelling a job, signals every process at once,
    DataLoader workers too: they leave the stop to the trainer, which ends them after
    writing its result (killed first, PyTorch's loader raised in the trainer and the run
    ended as failed; seen on a GPU, when the GPU battery stopped a stage at its limit)."""
    out = tmp_path / "run"
    process = start("run", "--framework", "torch", *LONG_RUN, "--workers", "2",
                     "--out", str(out), out=out)
    wait_for(has_epoch(out / "result.json"), process)
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == 128 + signal.SIGTERM, stderr
    result = schema.read_result(out / "result.json")
    assert result["summary"].status == "interrupted" and 1 <= len(result["epochs"]) < 200
    assert result["error"] == "interrupted (SIGTERM)"
    assert "killed by signal" not in stderr and "Traceback" not in stderr
    assert wait_until_gone(out) == []


@pytest.mark.slow
def test_sigterm_to_the_parent_reaches_every_ddp_process(tmp_path):
    out = tmp_path / "ddp"
    process = start("run", "--framework", "torch", "--devices", "2", *LONG_RUN,
                     "--workers", "0", "--out", str(out), out=out)
    wait_for(has_epoch(out / "result.json"), process)
    assert len(left_behind(out)) >= 4  # the CLI, the DDP launcher and its two processes
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert schema.read_result(out / "result.json")["summary"].status == "interrupted"
    assert wait_until_gone(out) == []


@pytest.mark.slow
def test_a_trainer_whose_parent_is_killed_stops_and_writes_its_result(tmp_path):
    """SIGKILL to the CLI: nothing can be forwarded; the kernel's parent-death signal stops
    the trainer, which writes its result as interrupted."""
    out = tmp_path / "run"
    process = start("run", "--framework", "torch", *LONG_RUN, "--workers", "0",
                     "--out", str(out), out=out)
    wait_for(has_epoch(out / "result.json"), process)
    process.kill()
    process.communicate(timeout=patience(120))  # the trainer holds the stdout pipe until it ends
    assert wait_until_gone(out, timeout=60) == []
    result = schema.read_result(out / "result.json")
    assert result["summary"].status == "interrupted" and len(result["epochs"]) >= 1
    assert "the parent process" in result["error"] and "ended" in result["error"]


@pytest.mark.slow
def test_sigterm_during_the_parity_check_stops_the_comparison(tmp_path):
    out = tmp_path / "cmp"
    process = start("compare", *LONG_RUN, "--out", str(out), out=out)
    wait_for((out / "parity" / "tf" / "config.json").exists, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert wait_until_gone(out) == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == [] and {r["reason"] for r in summary["not_run"]} == {"interrupted"}
    assert not (out / "runs").exists()


@pytest.mark.slow
def test_sigterm_during_evaluation_stops_it_and_keeps_the_finished_epochs(tmp_path):
    """The evaluation is cut short (it would last a minute), not waited for."""
    from slow_evaluation import SLOW_EVALUATION_S
    out, evaluating = tmp_path / "run", tmp_path / "evaluating"
    code = f"import compare.process.runner as r; r.MODULES['torch'] = 'slow_evaluation'; {CLI}"
    process = start("run", "--framework", "torch", *LONG_RUN, "--workers", "0",
                     "--out", str(out), out=out, code=code,
                     env={"PYTHONPATH": str(Path(__file__).parent),
                          "CNNCOMPARE_TEST_EVALUATING": str(evaluating)})
    wait_for(evaluating.exists, process)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert time.monotonic() - sent < SLOW_EVALUATION_S
    result = schema.read_result(out / "result.json")
    assert result["summary"].status == "interrupted" and result["epochs"] == []
    assert wait_until_gone(out) == []


def test_a_closed_output_pipe_is_a_stop_not_a_crash(monkeypatch):
    """A print to a pipe whose reader is gone raises nothing; it stops the trainer, which
    then exits 128 + SIGPIPE once it has written its result."""
    monkeypatch.setattr(shutdown, "_state", shutdown.TrainerState())
    read, write = os.pipe()
    os.close(read)
    stream = shutdown.GuardedStream(os.fdopen(write, "w"), shutdown._output_lost)
    with shutdown.interruptible(), pytest.raises(Interrupted) as stopped:
        print("epoch 1", file=stream, flush=True)
    assert stopped.value.exit_code == 128 + signal.SIGPIPE
    print("later lines go nowhere", file=stream, flush=True)
    assert shutdown.stop_received() == signal.SIGPIPE


def test_a_stop_while_shielded_takes_effect_when_the_shield_ends_and_only_once(monkeypatch):
    monkeypatch.setattr(shutdown, "_state", shutdown.TrainerState())
    written = []
    with pytest.raises(Interrupted) as stopped:
        with shutdown.interruptible():
            with shutdown.shielded():
                shutdown.stop(signal.SIGTERM, "SIGTERM")
                written.append("the epoch's files")  # not cut short
            written.append("never: the stop acts when the shield ends")
    assert written == ["the epoch's files"] and stopped.value.exit_code == 143
    with shutdown.interruptible():
        shutdown.stop(signal.SIGINT, "SIGINT")  # already stopping: ignored
    assert shutdown.stop_received() == signal.SIGTERM


SCRIPT_LEAVING_WORKERS = """
import sys
from compare.experiment import datasets
from compare.experiment.config import PipelineConfig, RunConfig
from torch_impl import data, train
config = RunConfig(dataset="synthetic", synthetic_train_size=256, synthetic_test_size=64,
                   batch_size=32, device="cpu", quiet=True, out=sys.argv[1],
                   pipeline=PipelineConfig(workers=2, persistent_workers=True))
batches = data.train_pipeline(datasets.config_dataset(config), config,
                              train.select_device(config))
next(iter(batches.epoch(0)))
print("a batch from the workers", flush=True)
"""


def test_a_process_that_exits_holding_loader_workers_still_ends(tmp_path):
    """The workers leave stops to the trainer, yet SIGTERM still ends them: at exit,
    multiprocessing terminates its daemonic children (the loader's workers, here left
    running) with SIGTERM and waits for them; a worker ignoring it hung the process (seen in
    a test process that trained with workers, after its tests had passed)."""
    done = subprocess.run([sys.executable, "-c", SCRIPT_LEAVING_WORKERS, str(tmp_path / "run")],
                          cwd=REPO, capture_output=True, text=True, timeout=patience(120),
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and "a batch from the workers" in done.stdout, done.stderr
