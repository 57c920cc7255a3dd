"""Resume: a run stopped in its second epoch and resumed computes, bit for bit on CPU, what
an uninterrupted run computes (every step's loss, the final weights), in both frameworks;
`run --resume` and `compare --resume` continue what did not complete."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import patience, tiny_config
from processes import CLI, wait_for  # one copy of the subprocess helpers

from compare import files, schema
from compare.cli import cli
from compare.errors import EXIT_INTERRUPTED
from compare.experiment import datasets
from compare.experiment.config import ComparisonConfig, PipelineConfig
from compare.run import checkpoint

REPO = Path(__file__).resolve().parent.parent
STOP_AT_STEP = 11  # 1-based training step: the third step of the second epoch (8 an epoch)


def _config(tmp_path: Path, framework: str, name: str):
    """3 epochs of 8 steps; a one-cycle schedule, momentum and weight decay, so a resumed run
    must restore the step count, the momentum buffers and the weights to match."""
    return tiny_config(tmp_path, framework=framework, epochs=3, schedule="onecycle", lr=0.05,
                       weight_decay=5e-4, out=str(tmp_path / name),
                       pipeline=PipelineConfig.preset("naive"),
                       timing_window=10)  # steps: no window closes inside the stopped epoch


def _stop_at(monkeypatch, trainer_class, step: int) -> None:
    """Ctrl-C at the call of the loop that would train the `step`-th step, as the loop sees
    a stop signal."""
    original = trainer_class.train_steps
    done = [0]

    def train_steps(self, batches, lrs):
        if done[0] < step <= done[0] + len(lrs):
            raise KeyboardInterrupt
        done[0] += len(lrs)
        return original(self, batches, lrs)

    monkeypatch.setattr(trainer_class, "train_steps", train_steps)


def _straight_and_resumed(tmp_path, monkeypatch, module, framework: str) -> tuple[Path, Path]:
    straight = _config(tmp_path, framework, "straight")
    dataset = datasets.config_dataset(straight)
    assert module.train(straight, dataset) == 0
    resumed = _config(tmp_path, framework, "resumed")
    with monkeypatch.context() as patch:
        _stop_at(patch, module.Trainer, STOP_AT_STEP)
        assert module.train(resumed, dataset) == EXIT_INTERRUPTED
    out = Path(resumed.out)
    stopped = schema.read_result(out / "result.json")
    assert stopped["summary"].status == "interrupted" and len(stopped["epochs"]) == 1
    assert len((out / "steps.csv").read_text().splitlines()) == 1 + 8  # epoch 1's steps only
    assert json.loads(files.RunDir(out).checkpoint.read_text())["next_epoch"] == 1
    assert module.train(resumed, dataset, resume=True) == 0
    return Path(straight.out), out


def _check_resumed_result(straight: Path, resumed: Path) -> None:
    assert (resumed / "steps.csv").read_text() == (straight / "steps.csv").read_text()
    result = schema.read_result(resumed / "result.json")
    assert result["summary"].status == "completed"
    assert [e["session"] for e in result["epochs"]] == [0, 1, 1]
    assert [s["first_epoch"] for s in result["sessions"]] == [1, 2]
    assert result["epochs"][2]["test_loss"] == schema.read_result(
        straight / "result.json")["epochs"][2]["test_loss"]
    assert not files.RunDir(resumed).checkpoint.exists()  # a completed run keeps none
    assert not files.RunDir(resumed).checkpoint_states.exists()


def test_torch_resumed_run_matches_an_uninterrupted_one_bit_for_bit(tmp_path, monkeypatch):
    import torch

    from torch_impl import train as torch_train
    straight, resumed = _straight_and_resumed(tmp_path, monkeypatch, torch_train, "torch")
    _check_resumed_result(straight, resumed)
    a = torch.load(straight / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(resumed / "model.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _keras_weights(path: Path) -> dict[str, np.ndarray]:
    """Every array in a .keras file's weights, by its path in the HDF5 file."""
    import h5py
    with zipfile.ZipFile(path) as archive:
        data = archive.read("model.weights.h5")
    found = {}
    with h5py.File(io.BytesIO(data), "r") as f:
        f.visititems(lambda name, item: found.__setitem__(name, item[()])
                     if isinstance(item, h5py.Dataset) else None)
    return found


def test_tf_resumed_run_matches_an_uninterrupted_one_bit_for_bit(tmp_path, monkeypatch,
                                                                 tf_two_cpus):
    straight, resumed = _straight_and_resumed(tmp_path, monkeypatch, tf_two_cpus, "tf")
    _check_resumed_result(straight, resumed)
    a, b = _keras_weights(straight / "model.keras"), _keras_weights(resumed / "model.keras")
    assert a.keys() == b.keys() and len(a) >= 10
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_a_checkpoint_from_other_settings_is_refused(tmp_path, monkeypatch):
    from torch_impl import train as torch_train
    config = _config(tmp_path, "torch", "run")
    with monkeypatch.context() as patch:
        _stop_at(patch, torch_train.Trainer, STOP_AT_STEP)
        torch_train.train(config, datasets.config_dataset(config))
    from compare.errors import UserError
    with pytest.raises(UserError, match=r"other settings \(lr\)"):
        checkpoint.load(config.replace(lr=0.1))
    assert checkpoint.load(config.replace(quiet=False))["next_epoch"] == 1


def test_run_resume_refuses_other_options_and_a_directory_without_a_run(tmp_path):
    (tmp_path / "config.json").write_text(tiny_config(tmp_path).to_json())
    outcome = CliRunner().invoke(cli, ["run", "--resume", str(tmp_path), "--epochs", "5"])
    assert outcome.exit_code == 2 and "drop --epochs" in outcome.output
    outcome = CliRunner().invoke(cli, ["run", "--resume", str(tmp_path / "nothing")])
    assert outcome.exit_code == 2 and "not a run directory" in outcome.output
    outcome = CliRunner().invoke(cli, ["run", "--epochs", "1"])
    assert outcome.exit_code == 2 and "Missing option '--framework'" in outcome.output


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI, *args]


@pytest.mark.machine_sensitive  # a signal in a run
@pytest.mark.slow
def test_compare_resume_keeps_the_parity_check_and_finished_runs(tmp_path):
    """SIGTERM while the second run (one after the other: --no-turns) evaluates its second
    epoch (held there by tests/slow_evaluation.py, so the signal lands at that point on any
    machine); `compare
    --resume` keeps the passed parity check and the first run, and continues the second from
    its checkpoint."""
    out, evaluating = tmp_path / "cmp", tmp_path / "evaluating"
    code = f"import compare.process.runner as r; r.MODULES['torch'] = 'slow_evaluation'; {CLI}"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "compare", "--dataset", "synthetic", "--synthetic-size",
         "320", "--epochs", "4", "--precision", "fp32", "--device", "cpu", "--pipeline",
         "naive", "--no-own-loops", "--no-turns", "--quiet", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent),
             "CNNCOMPARE_TEST_EVALUATING": str(evaluating),
             "CNNCOMPARE_TEST_SLOW_EVALUATION": "2"})
    second = out / "runs" / "torch-seed0"
    wait_for(evaluating.exists, process)
    assert len(json.loads((second / "result.json").read_text())["epochs"]) == 1
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert schema.read_result(second / "result.json")["summary"].status == "interrupted"
    first = schema.read_result(out / "runs" / "tf-seed0" / "result.json")
    assert first["summary"].status == "completed"
    parity_written = (out / "parity" / "tf.npz").stat().st_mtime_ns
    outcome = subprocess.run(_cli("compare", "--resume", str(out), "--quiet"), cwd=REPO,
                             capture_output=True, text=True, timeout=patience(600))
    assert outcome.returncode == 0, outcome.stderr
    assert "parity check: passed before, kept" in outcome.stderr
    assert (out / "parity" / "tf.npz").stat().st_mtime_ns == parity_written
    assert schema.read_result(out / "runs" / "tf-seed0" / "result.json") == first
    resumed = schema.read_result(second / "result.json")
    assert resumed["summary"].status == "completed" and len(resumed["epochs"]) == 4
    assert len(resumed["sessions"]) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(r["status"] for r in summary["runs"]) == ["completed", "completed"]
    assert os.path.exists(out / "report.html")


@pytest.mark.machine_sensitive  # a signal in a run
@pytest.mark.slow
def test_a_pair_stopped_while_taking_turns_resumes_both_from_their_checkpoints(tmp_path):
    """SIGTERM while PyTorch's run evaluates its second epoch, TensorFlow's run beside it
    waiting for its third turn: both stop with their finished epochs written (TensorFlow two,
    PyTorch one), and `compare --resume` finishes both."""
    out, evaluating = tmp_path / "cmp", tmp_path / "evaluating"
    code = f"import compare.process.runner as r; r.MODULES['torch'] = 'slow_evaluation'; {CLI}"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "compare", "--dataset", "synthetic", "--synthetic-size",
         "320", "--epochs", "4", "--precision", "fp32", "--device", "cpu", "--pipeline",
         "naive", "--no-own-loops", "--quiet", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent),
             "CNNCOMPARE_TEST_EVALUATING": str(evaluating),
             "CNNCOMPARE_TEST_SLOW_EVALUATION": "2"})
    wait_for(evaluating.exists, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=patience(120))
    assert process.returncode == 128 + signal.SIGTERM, stderr
    stopped = {fw: schema.read_result(out / "runs" / f"{fw}-seed0" / "result.json")
               for fw in ("tf", "torch")}
    assert {fw: (r["summary"].status, len(r["epochs"])) for fw, r in stopped.items()} == {
        "tf": ("interrupted", 2), "torch": ("interrupted", 1)}
    outcome = subprocess.run(_cli("compare", "--resume", str(out), "--quiet"), cwd=REPO,
                             capture_output=True, text=True, timeout=patience(600))
    assert outcome.returncode == 0, outcome.stderr
    for fw in ("tf", "torch"):
        resumed = schema.read_result(out / "runs" / f"{fw}-seed0" / "result.json")
        assert resumed["summary"].status == "completed" and len(resumed["epochs"]) == 4
        assert len(resumed["sessions"]) == 2


@pytest.mark.slow  # a comparison in two commands (19 s under pytest -n 2)
def test_one_framework_now_and_the_rest_on_resume(tmp_path):
    """`compare --framework torch` runs PyTorch's seeds alone (no parity check: it needs both)
    and lists TensorFlow's as not run yet; `compare --resume` then runs the parity check and
    TensorFlow's seeds, keeps PyTorch's, and the report says the two were not alternated."""
    from conftest import tiny_config

    from compare.process import comparison
    out = tmp_path / "cmp"
    config = tiny_config(tmp_path, epochs=1)
    code = comparison.compare_frameworks(
        config, ComparisonConfig(seeds=2, parity_steps=1, own_loops=False), out,
        command="(test)", frameworks=("torch",))
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parity"] is None and summary["frameworks"]["torch"]["completed"] == 2
    assert [r["framework"] for r in summary["not_run"]] == ["tf", "tf"]
    assert "not run yet" in summary["not_run"][0]["reason"]
    torch_result = schema.read_result(out / "runs" / "torch-seed0" / "result.json")
    saved, chosen = comparison.saved_comparison(out)
    assert chosen == ComparisonConfig(seeds=2, parity_steps=1, own_loops=False)
    code = comparison.compare_frameworks(saved.replace(quiet=True), chosen, out,
                                          command="(test)", resume=True)
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parity"]["passed"] and not summary["not_run"]
    assert {fw: e["completed"] for fw, e in summary["frameworks"].items()} == {"tf": 2, "torch": 2}
    assert schema.read_result(out / "runs" / "torch-seed0" / "result.json") == torch_result
    assert "not alternated" in " ".join(summary["verdict"])
    assert summary["ratios"]["train_time_s"]["n"] == 2


@pytest.mark.parametrize("chosen", [
    ComparisonConfig(seeds=3, parity_steps=2, own_loops=False, defaults=False, best=True),
    ComparisonConfig(seeds=1, parity_steps=3, ignore_parity=True, defaults=True, turns=False)])
def test_a_resumed_comparison_keeps_every_setting_it_was_started_with(tmp_path, chosen):
    """--resume reads the comparison's settings back as they were saved, --no-defaults and
    --best among them; one saved before own loops, best runs, defaults runs and turns
    existed resumes without any of them, as it ran."""
    import dataclasses

    from compare import files
    from compare.experiment.config import RunConfig
    from compare.process import comparison
    directory = files.ComparisonDir(tmp_path)
    saved = {"config": RunConfig(out=str(tmp_path)).to_dict(), **dataclasses.asdict(chosen)}
    files.write_json(directory.comparison, saved)
    assert comparison.saved_comparison(tmp_path)[1] == chosen
    older = {key: saved[key] for key in ("config", "seeds", "parity_steps", "ignore_parity")}
    files.write_json(directory.comparison, older)
    assert comparison.saved_comparison(tmp_path)[1] == dataclasses.replace(
        chosen, own_loops=False, best=False, defaults=False, turns=False)
