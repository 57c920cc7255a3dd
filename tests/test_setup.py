"""`cnncompare setup gpu` on injected facts and a stand-in pip (tests/fake_pip.py): the
decision, the configuration and the one rule for each framework's interpreter, a build
switched in only when complete, a second call that changes nothing, a failed or interrupted
build that leaves the earlier state in use, doctor naming a stale environment. The real
build (pip, TensorFlow's CPU build) is tests/test_setup_build.py's, in the heavy tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import patience

from compare.cli import cli
from compare.cli import setup as setup_cli
from compare.errors import FrameworkMissing, UserError
from compare.experiment.frameworks import REPOSITORY, TENSORFLOW_PIN
from compare.process import doctor, runner
from compare.setup import build, config, plan

FAKE_PIP = Path(__file__).with_name("fake_pip.py")
CHECKOUT = str(REPOSITORY)
WANTED = plan.Wanted("gpu", "tensorflow", (f"tensorflow[and-cuda]=={TENSORFLOW_PIN}",
                                            "keras>=3.10", "numpy>=1.26"),
                     plan.Project(("-e", CHECKOUT), "0.1.0", CHECKOUT))
RECORDED = config.Environment("tf", "/envs/tf-1/bin/python", "/envs/tf-1", "gpu",
                              WANTED.requirements, "editable " + CHECKOUT, "2026-12-01")
CURRENT = plan.Found(None, TENSORFLOW_PIN, "tensorflow", "0.1.0", CHECKOUT)


def facts(**changes) -> plan.Facts:
    return replace(plan.Facts("gpu", 1, RECORDED, CURRENT, WANTED, None), **changes)


@pytest.mark.parametrize("changes, action, reason", [
    (dict(gpus=0), "not-needed", None),
    (dict(gpus=0, asked="cpu", recorded=None, found=None), "build", "none is recorded yet"),
    (dict(recorded=None, found=None), "build", "none is recorded yet"),
    ({}, "current", None),
    (dict(found=replace(CURRENT, tensorflow="2.20.0")), "rebuild",
     f"its TensorFlow is 2.20.0, the project pins {TENSORFLOW_PIN}"),
    (dict(found=replace(CURRENT, distribution="tensorflow-cpu")), "rebuild",
     "its TensorFlow comes from tensorflow-cpu, not tensorflow"),
    (dict(found=replace(CURRENT, project_version="0.0.9")), "rebuild",
     "its cnncompare is 0.0.9, this one is 0.1.0"),
    (dict(found=replace(CURRENT, project_at="/elsewhere")), "rebuild",
     f"its cnncompare comes from /elsewhere, not from the checkout at {CHECKOUT}"),
    (dict(found=plan.Found(error="No such file or directory")), "rebuild",
     "its interpreter /envs/tf-1/bin/python does not run: No such file or directory"),
    (dict(recorded=replace(RECORDED, kind="cpu")), "rebuild",
     "it holds TensorFlow's CPU build, this set-up installs its CUDA build"),
    (dict(recorded=replace(RECORDED, requirements=(*WANTED.requirements[:2], "rich>=13"))),
     "rebuild", "the project's requirements changed since it was built (now numpy>=1.26; "
                "no longer rich>=13)"),
])
def test_the_decision_follows_the_facts(changes, action, reason):
    decision = plan.decide(facts(**changes))
    assert decision.action == action
    assert (reason in decision.reasons) if reason else decision.reasons == ()


def test_an_override_is_noted_whatever_is_decided():
    for found in (facts(override="/my/python"), facts(override="/my/python", gpus=0)):
        notes = plan.decide(found).notes
        assert any("$CNNCOMPARE_TF_PYTHON=/my/python is set and overrides" in n for n in notes)
    assert plan.decide(facts(gpus=0)).notes == (
        "the environment recorded earlier stays in use: /envs/tf-1/bin/python",)


def test_a_current_environment_holds_the_pinned_tensorflow_and_no_pytorch():
    for kind, first in (("gpu", f"tensorflow[and-cuda]=={TENSORFLOW_PIN}"),
                        ("cpu", f"{plan.tensorflow_requirement('cpu')[0]}=={TENSORFLOW_PIN}")):
        wanted = plan.wanted(kind)
        assert wanted.requirements[0] == first and wanted.kind == kind
        names = {r.split(">")[0].split("=")[0] for r in wanted.requirements[1:]}
        assert {"keras", "click", "rich", "numpy", "nvidia-ml-py", "tensorboard"} <= names
        assert not names & {"torch", "torchvision", "tensorflow", "tensorflow-datasets"}
        assert wanted.project == plan.Project(("-e", CHECKOUT), wanted.project.version, CHECKOUT)


def test_the_configuration_is_written_atomically_and_read_back_typed(isolated_home):
    assert config.read() == config.Configuration()
    written = config.write(config.Configuration().with_environment(RECORDED))
    assert written == isolated_home / "config.json" and not list(isolated_home.glob(".*tmp"))
    assert config.read().environments == {"tf": RECORDED}
    assert json.loads(written.read_text())["environments"]["tf"]["python"] == RECORDED.python
    written.write_text("{torn")
    with pytest.raises(UserError, match="config.json: not valid JSON.*delete it"):
        config.read()
    written.write_text(json.dumps({"version": 99}))
    with pytest.raises(UserError, match="version 99"):
        config.read()


def test_one_rule_chooses_each_frameworks_interpreter(isolated_home, monkeypatch, tmp_path):
    """The variable, else the recorded environment, else cnncompare's own; the runner's
    commands and the manifest's entry follow it; a recorded interpreter that is gone is
    named with the command that mends it."""
    monkeypatch.delenv("CNNCOMPARE_TF_PYTHON", raising=False)
    assert runner.python_for("tf") == sys.executable
    assert config.ran_in("tf") == {"python": sys.executable, "from": "cnncompare's own"}
    gone = replace(RECORDED, python=str(tmp_path / "gone" / "bin" / "python"))
    config.write(config.Configuration().with_environment(gone))
    assert config.interpreter("tf").source == "setup" and runner.python_for("torch") == \
        sys.executable
    assert runner.command(tmp_path / "c.json", "tf")[0] == gone.python
    with pytest.raises(FrameworkMissing, match="cannot start .*recorded by `cnncompare setup "
                                               "gpu` in .*run `cnncompare setup gpu` again"):
        runner.check_installed("tf")
    assert config.ran_in("tf")["from"] == "started directly, not by cnncompare"
    monkeypatch.setenv("CNNCOMPARE_TF_PYTHON", sys.executable)
    assert runner.python_for("tf") == sys.executable
    assert config.ran_in("tf") == {"python": sys.executable, "from": "$CNNCOMPARE_TF_PYTHON"}


def test_on_a_host_without_a_gpu_the_set_up_is_not_needed(isolated_home, monkeypatch):
    monkeypatch.setattr(plan, "gpu_count", lambda: 0)
    outcome = CliRunner().invoke(cli, ["setup", "gpu"])
    assert outcome.exit_code == 0 and outcome.output.startswith("not needed here")
    assert not (isolated_home / "config.json").exists()


@pytest.fixture
def stand_in_pip(monkeypatch):
    """Environments made without pip (fast), pip's part played by tests/fake_pip.py; this
    host with one GPU; doctor's training left out (it is test_doctor.py's)."""
    monkeypatch.setattr(plan, "gpu_count", lambda: 1)
    monkeypatch.setattr(build, "venv_command", lambda root: [
        sys.executable, "-m", "venv", "--without-pip", str(root)])
    monkeypatch.setattr(build, "pip_command", lambda python: [python, str(FAKE_PIP)])
    monkeypatch.setattr(setup_cli, "_check", lambda console: True)
    monkeypatch.delenv("CNNCOMPARE_TF_PYTHON", raising=False)
    monkeypatch.setenv("FAKE_PIP", "ok")


def _state(home: Path) -> dict:
    """What a set-up may change: config.json (its bytes, inode, time) and the folders."""
    written = home / "config.json"
    return {"config": (written.read_bytes(), written.stat().st_ino, written.stat().st_mtime_ns),
            "folders": sorted(p.name for p in (home / "environments").glob("tf-*")),
            "python": config.read().environments["tf"].python}


def test_a_build_is_switched_in_and_a_second_call_changes_nothing(isolated_home, stand_in_pip):
    first = CliRunner().invoke(cli, ["setup", "gpu"])
    assert first.exit_code == 0, first.output
    recorded = config.read().environments["tf"]
    assert recorded.kind == "gpu" and Path(recorded.python).exists()
    assert recorded.requirements[0] == f"tensorflow[and-cuda]=={TENSORFLOW_PIN}"
    assert Path(recorded.root).parent == isolated_home / "environments"
    assert f"TensorFlow now runs in {recorded.python}" in first.output
    assert runner.python_for("tf") == recorded.python  # found again, no variable
    before = _state(isolated_home)
    second = CliRunner().invoke(cli, ["setup", "gpu"])
    assert second.exit_code == 0 and "current, nothing changed" in second.output
    assert _state(isolated_home) == before
    assert doctor._interpreter("tf") == {"python": recorded.python, "from": config.interpreter(
        "tf").described, "stale": [], "mended_by": "cnncompare setup gpu"}


def test_a_stale_environment_is_rebuilt_aside_and_named_by_doctor(isolated_home, stand_in_pip,
                                                                  monkeypatch, capsys):
    assert CliRunner().invoke(cli, ["setup", "gpu"]).exit_code == 0
    old = config.read().environments["tf"]
    leftover = isolated_home / "environments" / "tf-19990101-000000"  # a killed build's
    leftover.mkdir()
    monkeypatch.setattr(plan, "TENSORFLOW_PIN", "2.99.0")
    stale = doctor._interpreter("tf")["stale"]
    assert stale == [f"its TensorFlow is {TENSORFLOW_PIN}, the project pins 2.99.0"]
    doctor.print_report({"frameworks": {"tf": {"name": "TensorFlow/Keras", "verdict": "v",
                                               "interpreter": doctor._interpreter("tf")}},
                         "verdict": "x"})
    said = " ".join(capsys.readouterr().out.split())
    assert f"runs in {old.python}" in said and "out of date: its TensorFlow is" in said
    assert "run `cnncompare setup gpu` again" in said
    rebuilt = CliRunner().invoke(cli, ["setup", "gpu"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert f"its TensorFlow is {TENSORFLOW_PIN}, the project pins 2.99.0" in rebuilt.output
    new = config.read().environments["tf"]
    assert new.requirements[0] == "tensorflow[and-cuda]==2.99.0" and new.root != old.root
    assert not Path(old.root).exists() and not leftover.exists()
    assert doctor._interpreter("tf")["stale"] == []


def test_a_failed_build_leaves_the_earlier_environment_in_use(isolated_home, stand_in_pip,
                                                             monkeypatch):
    assert CliRunner().invoke(cli, ["setup", "gpu"]).exit_code == 0
    before = _state(isolated_home)
    monkeypatch.setattr(plan, "TENSORFLOW_PIN", "2.99.0")
    monkeypatch.setenv("FAKE_PIP", "fail")
    outcome = CliRunner().invoke(cli, ["setup", "gpu"])
    assert outcome.exit_code == 1 and "Traceback" not in outcome.output
    error = [line for line in outcome.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and (
        "error: setting up tensorflow[and-cuda]==2.99.0 and the project's" in error[0]
        and "failed (exit 1): ERROR: No matching distribution found for tensorflow[and-cuda]"
            "==2.99.0" in error[0] and "the environment in use is unchanged" in error[0])
    assert _state(isolated_home) == before
    assert "ERROR: Could not find" in (isolated_home / "environments" / "setup.log").read_text()


def test_an_interrupted_build_leaves_the_earlier_environment_in_use(isolated_home,
                                                                    stand_in_pip, tmp_path):
    """Interrupted while pip works (SIGINT, as a Ctrl-C): its folder removed, the stand-in
    pip ended, config.json as it was; one line, exit 130. In a process of its own, so that
    the interrupt reaches the set-up and not the tests."""
    assert CliRunner().invoke(cli, ["setup", "gpu"]).exit_code == 0
    before = _state(isolated_home)
    # SIGINT as at a terminal: a process started in the background (CI's, a queue's) inherits
    # it ignored, and Python then installs no handler of its own
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from compare.setup import build, plan; "
            "plan.gpu_count = lambda: 1; plan.TENSORFLOW_PIN = '2.99.0'; "
            "build.venv_command = lambda root: [sys.executable, '-m', 'venv', '--without-pip', "
            "str(root)]; "
            f"build.pip_command = lambda python: [python, {str(FAKE_PIP)!r}]; "
            "from compare.cli import main; main()")
    done = subprocess.run([sys.executable, "-c", code, "setup", "gpu"], capture_output=True,
                          text=True, timeout=patience(60),
                          env={**os.environ, "FAKE_PIP": "interrupt",
                               "FAKE_PIP_PID": str(tmp_path / "pip.pid")})
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "interrupted"
    assert _state(isolated_home) == before
    with pytest.raises(ProcessLookupError):  # the stand-in pip was ended, and waited for
        os.kill(int((tmp_path / "pip.pid").read_text()), 0)


def test_the_command_has_help_with_examples_and_every_option_explained():
    outcome = CliRunner().invoke(cli, ["setup", "gpu", "--help"])
    assert outcome.exit_code == 0 and "cnncompare setup gpu --cpu" in outcome.output
    assert all(p.help for p in setup_cli.gpu.params if p.name != "help")
    assert "setup" in CliRunner().invoke(cli, ["--help"]).output


def test_the_data_cache_lists_a_built_environment_as_one_entry(isolated_home):
    from compare.experiment import datasets
    root = isolated_home / "environments" / "tf-20261201-000000"
    (root / "lib").mkdir(parents=True)
    for name in ("a", "b"):
        (root / "lib" / name).write_bytes(b"x" * 10)
    (isolated_home / "arrays").mkdir()
    (isolated_home / "arrays" / "c.npz").write_bytes(b"y" * 5)
    found = datasets.describe_cache()
    assert {e["path"]: e["bytes"] for e in found["files"]} == {
        str(root): 20, str(isolated_home / "arrays" / "c.npz"): 5}


@pytest.mark.parametrize("origin, args", [
    ("file://{folder}", ("{folder}",)),  # installed from a folder, not editable
    (None, ("cnncompare==0.3.0",)),  # from the index
])
def test_an_installed_copy_goes_in_as_it_was_installed(tmp_path, monkeypatch, origin, args):
    """Where cnncompare runs from site-packages (no checkout beside it), its requirements and
    its install come from its metadata there."""
    folder = tmp_path / "source"
    folder.mkdir()
    info = tmp_path / "cnncompare-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: cnncompare\nVersion: 0.3.0\nRequires-Dist: torch>=2.3\n"
        "Requires-Dist: keras>=3.10\nRequires-Dist: pytest>=8; extra == \"test\"\n")
    if origin:
        (info / "direct_url.json").write_text(json.dumps(
            {"url": origin.format(folder=folder), "dir_info": {}}))
    monkeypatch.setattr(plan, "REPOSITORY", tmp_path)
    assert plan.project_requirements() == ("keras>=3.10",)
    assert plan.project_install() == plan.Project(
        tuple(a.format(folder=folder) for a in args), "0.3.0", None)


def test_the_gpu_tests_run_each_framework_where_the_users_commands_do(isolated_home):
    """The user's recorded interpreters reach the gpu tests (pytest -m gpu, the battery's
    test stages) as the variables that name them, though each test has a home of its own."""
    from conftest import recorded_interpreters
    assert recorded_interpreters() == {}
    config.write(config.Configuration().with_environment(RECORDED))
    assert recorded_interpreters() == {"CNNCOMPARE_TF_PYTHON": RECORDED.python}
    (isolated_home / "config.json").write_text("{torn")
    assert recorded_interpreters() == {}
