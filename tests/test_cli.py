"""The command line through click's CliRunner: help, bad input, data, env, compare, report."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from compare import schema
from compare.cli import cli
from compare.experiment import networks

RUN = ["run", "--framework", "torch", "--dataset", "synthetic", "--synthetic-size", "64", "--quiet"]


def invoke(args):
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize("command", [[], ["run"], ["compare"], ["sweep"], ["report"], ["env"],
                                     ["doctor"], ["data"],
                                     ["data", "info"], ["data", "fetch"], ["data", "cache"]])
def test_every_command_has_help_with_an_example_and_every_option_help_text(command):
    import click
    outcome = invoke([*command, "--help"])
    assert outcome.exit_code == 0
    if command != ["data"]:
        assert "Example" in outcome.output
    target = cli
    for name in command:
        target = target.commands[name]
    options = [p for p in target.params if isinstance(p, click.Option)]
    assert all(p.help for p in options), [p.name for p in options if not p.help]


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "Invalid value for '--batch-size'"),
    (["--batch-size", "-8"], "Invalid value for '--batch-size'"),
    (["--epochs", "0"], "Invalid value for '--epochs'"),
    (["--lr", "0"], "Invalid value for '--lr'"),
    (["--lr", "-0.1"], "Invalid value for '--lr'"),
    (["--model", "vgg16"], f"'vgg16' is not one of {', '.join(networks.MODELS)}, a file "
                          "FILE.py[:NAME] or package.module:NAME"),
    (["--precision", "fp8"], "'fp8' is not one of 'auto', 'mixed', 'fp16', 'fp32'"),
    (["--devices", "0"], "Invalid value for '--devices'"),
])
def test_bad_options_get_one_clear_line_and_exit_2(args, message):
    outcome = invoke([*RUN, *args])
    assert outcome.exit_code == 2
    assert message in outcome.output and "Traceback" not in outcome.output


def test_unknown_framework_is_refused():
    outcome = invoke(["run", "--framework", "jax"])
    assert outcome.exit_code == 2 and "'jax' is not one of 'tf', 'torch'" in outcome.output


def test_missing_data_dir_is_one_line(tmp_path):
    outcome = invoke(["run", "--framework", "torch", "--dataset", "folder", "--data-dir",
                      str(tmp_path / "nope")])
    assert outcome.exit_code == 2
    assert outcome.output.strip() == f"error: --data-dir {tmp_path / 'nope'} does not exist"


def test_corrupt_archive_is_one_line(tmp_path):
    bad = tmp_path / "cifar-10-python.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00 this is not a whole archive")
    outcome = invoke(["run", "--framework", "tf", "--dataset", "cifar10", "--data-dir", str(bad)])
    assert outcome.exit_code == 2 and "corrupt or truncated" in outcome.output
    assert "Traceback" not in outcome.output


def test_batch_larger_than_the_dataset_is_refused():
    outcome = invoke([*RUN, "--batch-size", "128"])
    assert outcome.exit_code == 2 and "larger than the training set (64 images)" in outcome.output


def test_uneven_split_over_devices_is_refused():
    outcome = invoke([*RUN, "--batch-size", "30", "--devices", "4"])
    assert outcome.exit_code == 2 and "does not split evenly" in outcome.output


def test_gpu_asked_for_but_absent_fails_clearly(tmp_path, capfd):
    """On any host: the run's process sees no GPU (the session hides them from every non-gpu
    test's processes, tests/conftest.py), as on a machine without one."""
    outcome = invoke([*RUN, "--device", "gpu", "--out", str(tmp_path)])
    assert outcome.exit_code == 2
    assert "PyTorch sees no CUDA GPU" in outcome.output + capfd.readouterr().err


def test_framework_not_installed_names_the_fix(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorflow" else real(name, *a))
    outcome = invoke(["run", "--framework", "tf", "--dataset", "synthetic", "--synthetic-size",
                      "64"])
    assert outcome.exit_code == 2
    assert ("TensorFlow/Keras is not installed (missing tensorflow): pip install tensorflow"
            in outcome.output)


def test_data_info_json_for_synthetic_and_a_folder(image_folder):
    outcome = invoke(["data", "info", "--dataset", "synthetic", "--json"])
    info = json.loads(outcome.output)
    assert info["train_size"] == 5_000 and info["test_size"] == 1_000 and info["num_classes"] == 10
    outcome = invoke(["data", "info", "--dataset", "folder", "--data-dir", str(image_folder),
                      "--json"])
    info = json.loads(outcome.output)
    assert (info["train_size"], info["test_size"]) == (18, 6)
    assert info["classes"] == ["cat", "dog", "ship"]
    assert info["train_class_counts"] == [6, 6, 6]
    table = invoke(["data", "info", "--dataset", "folder", "--data-dir", str(image_folder)])
    assert table.exit_code == 0 and "cat 6, dog 6, ship 6" in table.output


def test_data_cache_lists_and_clears(isolated_home):
    invoke(["data", "info", "--dataset", "synthetic"])
    listed = invoke(["data", "cache"])
    assert "synthetic-" in listed.output and " 0 file(s)" not in listed.output
    cached = [line.split()[-1] for line in listed.output.splitlines() if "synthetic-" in line]
    assert cached and all(Path(path).exists() for path in cached)
    cleared = invoke(["data", "cache", "--clear"])
    assert cleared.output.splitlines()[0].endswith(": 0 file(s), 0.0 MB")
    assert not any(Path(path).exists() for path in cached)


@pytest.mark.slow
def test_env_json_reports_both_frameworks():
    outcome = invoke(["env", "--json"])
    assert outcome.exit_code == 0, outcome.output
    info = json.loads(outcome.output)
    tf, torch = info["frameworks"]["tf"], info["frameworks"]["torch"]
    assert tf["tensorflow"].startswith("2.") and tf["keras"].startswith("3.")
    assert torch["torch"] and torch["tf32_default"]["matmul"] is False
    assert info["machine"]["cpu_count"] >= 1 and "available" in info["machine"]["nvml"]


@pytest.mark.slow
def test_compare_end_to_end_and_report_rebuild(tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    args = ["compare", "--dataset", "synthetic", "--synthetic-size", "320", "--epochs", "2",
            "--seeds", "2", "--precision", "fp32", "--workers", "0", "--device", "cpu",
            "--no-own-loops", "--quiet", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", ["cnncompare", *args])  # as the console script sees it
    outcome = invoke(args)
    assert outcome.exit_code == 0, outcome.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parity"]["passed"] and summary["parity"]["steps"] == 3
    for fw in ("tf", "torch"):
        assert summary["frameworks"][fw]["completed"] == 2
        assert summary["frameworks"][fw]["final_test_accuracy"]["n"] == 2
    assert summary["ratios"]["train_time_s"]["n"] == 2 and summary["accuracy_difference"]["n"] == 2
    assert summary["command"] == "cnncompare " + shlex.join(args)
    started = sorted((schema.read_result(p)["started_at"], p.parent.name)
                     for p in out.glob("runs/*/result.json"))
    # tf first for seed 0, torch first for seed 1
    assert [name for _, name in started][0] == "tf-seed0"
    assert {name for _, name in started[2:]} == {"torch-seed1", "tf-seed1"}
    html = (out / "report.html").read_text()
    assert "Parity check" in html and "<strong>PASSED</strong>" in html
    before = json.loads((out / "summary.json").read_text())
    (out / "report.html").unlink()
    rebuilt = invoke(["report", str(out)])
    assert rebuilt.exit_code == 0 and (out / "report.html").exists()
    after = json.loads((out / "summary.json").read_text())
    assert after["frameworks"] == before["frameworks"] and after["parity"] == before["parity"]


def test_the_progress_line_shows_no_figures_of_the_run_before(tmp_path, monkeypatch, capsys):
    """The queue's progress line shows the last epoch's figures beside the run's name: a
    run that starts shows none until its own first epoch, not the previous run's."""
    import rich.progress

    from compare.console import console as make_console
    from compare.experiment.config import RunConfig
    from compare.process import queue as run_queue_module
    from compare.process import runner
    from compare.run import progress
    shown: list[tuple[str, str]] = []

    class Recording(rich.progress.Progress):
        def update(self, task_id, **fields):
            super().update(task_id, **fields)
            task = self.tasks[0]
            shown.append((task.description, task.fields.get("last", "")))

    def trains(config, on_line=None, **_):
        on_line(progress.window_line(1, 1, 32, 64, 1234.5, 0.75))  # live, within the epoch
        on_line(f"{config.framework} epoch 1/1  train_loss 0.5  test_acc 0.{config.seed}")
        return runner.Outcome(config.framework, Path(config.out), 0, "completed", None)

    monkeypatch.setattr(rich.progress, "Progress", Recording)
    monkeypatch.setattr(runner, "run_framework", trains)
    queue = [run_queue_module.QueuedRun(f"{fw} seed {seed}", RunConfig(
        framework=fw, seed=seed, epochs=1, out=str(tmp_path / fw))) for fw, seed in
        (("tf", 7), ("torch", 8))]
    run_queue_module.run_queue(queue, "compare", False, make_console())
    labels = [(description, last) for description, last in shown
              if description.startswith("torch seed 8")]
    assert labels[0] == ("torch seed 8 (2/2)", "")
    assert labels[1][1] == "epoch 1/1  step 32/64  1,234 img/s  loss 0.7500"
    assert any("test_acc 0.8" in last for _, last in labels)
    assert not any("test_acc 0.7" in last for _, last in labels)
    capsys.readouterr()
    run_queue_module.run_queue(queue, "compare", True, make_console())  # --quiet: epochs only
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["tf seed 7 (1/2): tf epoch 1/1  train_loss 0.5  test_acc 0.7",
                       "torch seed 8 (2/2): torch epoch 1/1  train_loss 0.5  test_acc 0.8"]


def test_a_quiet_display_prints_window_lines_only_when_asked(capsys, monkeypatch):
    """A quiet run prints one line per epoch; a comparison's child (--window-lines) also one
    per timing window, which the parent reads back as the live figures it shows."""
    from compare.experiment.config import RunConfig
    from compare.run import progress
    for asked in (False, True):
        monkeypatch.setattr(progress, "_window_lines_asked", asked)
        display = progress.ProgressDisplay(RunConfig(epochs=2, quiet=True), "tf", 64, True)
        display.start_epoch(2)
        display.window(32, 1234.5, 0.75)
        lines = capsys.readouterr().out.splitlines()
        assert [progress.window_text(line) for line in lines] == (
            ["epoch 2/2  step 32/64  1,234 img/s  loss 0.7500"] if asked else [])


def test_a_comparisons_framework_process_sends_its_windows_to_the_parent_alone(tmp_path):
    """A framework process started for a comparison (on_line given) sends a line per timing
    window, which reaches on_line and not the run's log; its epoch line reaches both."""
    from conftest import tiny_config

    from compare import files
    from compare.process import runner
    from compare.run import progress
    config = tiny_config(tmp_path, framework="torch", synthetic_train_size=128)
    lines: list[str] = []
    outcome = runner.run_framework(config, on_line=lines.append)
    assert outcome.status == "completed"
    windows = [progress.window_text(line) for line in lines
               if progress.window_text(line) is not None]
    assert windows and windows[-1].startswith("epoch 1/1  step 4/4  ")
    log = files.RunDir(Path(config.out)).log.read_text()
    assert progress.WINDOW_PREFIX not in log and "torch epoch 1/1" in log

