"""Bad settings are refused before any work starts (compare.run.validate): one line
naming the option, exit code 2, no traceback, and nothing trained (no result written)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from compare.cli import cli

DATA = ["--dataset", "synthetic", "--synthetic-size", "64", "--quiet"]


def _refused(tmp_path, args: list[str], message: str) -> None:
    out = tmp_path / "out"
    outcome = CliRunner().invoke(cli, [*args, *DATA, "--out", str(out)])
    assert outcome.exit_code == 2, outcome.output
    lines = outcome.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], outcome.output
    assert "Traceback" not in outcome.output
    assert not list(tmp_path.rglob("result.json")) and not list(tmp_path.rglob("config.json"))


@pytest.mark.parametrize("args, message", [
    (["--lr", "nan"], "Invalid value for '--lr': nan is not a finite number > 0"),
    (["--lr", "inf"], "Invalid value for '--lr': inf is not a finite number > 0"),
    (["--epochs", "0"], "Invalid value for '--epochs': 0 is not an integer >= 1"),
    (["--target-accuracy", "0"], "Invalid value for '--target-accuracy': 0.0 is not a fraction"),
    (["--target-accuracy", "1.5"], "Invalid value for '--target-accuracy': 1.5 is not a"),
    (["--batch-size", "128"], "--batch-size 128 is larger than the training set (64 images)"),
    (["--batch-size", "30", "--devices", "4"], "--batch-size 30 does not split evenly over "
                                               "--devices 4"),
    (["--steps-per-call", "0"], "Invalid value for '--steps-per-call': 0 is not an integer >= 1"),
    (["--timing-window-s", "0"], "Invalid value for '--timing-window-s': 0.0 is not a number of "
                                 "seconds > 0"),
    (["--strategy", "none", "--devices", "2"], "--strategy none trains one replica without a "
                                               "wrapper, not --devices 2"),
    (["--strategy", "tf=mirrored,torch=fast"], "Invalid value for '--strategy': "
                                               "'tf=mirrored,torch=fast' is not one of auto, "
                                               "none, mirrored, or tf=CHOICE,torch=CHOICE"),
    (["--augment", "--cutout", "40"], "--cutout 40 does not fit the network's 32x32 images"),
], ids=["lr-nan", "lr-inf", "epochs-0", "target-0", "target-1.5", "batch-too-big", "uneven-split",
        "steps-per-call-0", "window-0s", "none-strategy-2-devices", "strategy-unknown",
        "cutout-too-big"])
def test_run_refuses_a_bad_setting_before_training(tmp_path, args, message):
    _refused(tmp_path, ["run", "--framework", "torch", *args], message)


def test_out_pointing_at_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("not a directory")
    outcome = CliRunner().invoke(cli, ["run", "--framework", "torch", *DATA,
                                       "--out", str(tmp_path / "out")])
    assert outcome.exit_code == 2
    assert outcome.output.strip() == f"error: --out {tmp_path / 'out'} is a file, not a " \
                                     f"directory: choose another path"


def test_compare_refuses_a_bad_setting_before_the_parity_check(tmp_path):
    _refused(tmp_path, ["compare", "--lr", "nan"], "Invalid value for '--lr'")
    assert not (tmp_path / "out" / "parity").exists()


@pytest.mark.parametrize("args, message", [
    (["--vary", "lr=0.01,nan"], "--vary lr=nan: Invalid value for '--lr': nan is not a finite"),
    (["--vary", "lr=inf"], "--vary lr=inf: Invalid value for '--lr': inf is not a finite"),
    (["--vary", "batch-size=32,128"], "--vary batch-size=128: --batch-size 128 is larger than "
                                      "the training set (64 images)"),
    (["--devices", "4", "--vary", "batch-size=32,30"], "--vary batch-size=30: --batch-size 30 "
                                                       "does not split evenly over --devices 4"),
    (["--vary", "epochs=0"], "--vary epochs=0: Invalid value for '--epochs': 0 is not an integer "
                             ">= 1"),
], ids=["lr-nan", "lr-inf", "batch-too-big", "uneven-split", "epochs-0"])
def test_sweep_refuses_a_bad_combination_before_any_run(tmp_path, args, message):
    _refused(tmp_path, ["sweep", "--framework", "torch", *args], message)


def test_a_users_file_is_loaded_once_by_the_checks(tmp_path):
    """check_config loads a user's FILE.py once and passes its spec to every check that needs
    it (--init-weights and --parallel model included), for the class count it was given."""
    import numpy as np

    from compare.experiment import networks, weights
    from compare.experiment.config import RunConfig
    from compare.run import validate
    counted = tmp_path / "loads.txt"
    model = tmp_path / "counted.py"
    model.write_text("from pathlib import Path\n"
                     "from compare.experiment import networks\n"
                     f"def spec(num_classes):\n"
                     f"    with Path({str(counted)!r}).open('a') as f:\n"
                     f"        f.write(f'{{num_classes}}\\n')\n"
                     f"    return networks.get_spec('lenet', num_classes)\n")
    init = tmp_path / "init.npz"
    np.savez(init, **weights.initial_weights(networks.get_spec(str(model)), seed=0))
    counted.unlink()
    validate.check_config(RunConfig(model=str(model), init_weights=str(init), parallel="model",
                                    stages=2, strategy="none", out=str(tmp_path / "out")))
    assert counted.read_text().split() == ["10"]
