"""--precision is resolved once per command, before any framework starts, and carried in the
run's config: the framework processes read it and never resolve it again."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience, tiny_config

from compare import files
from compare.experiment import precision_rule as rule
from compare.experiment.config import RunConfig
from compare.machine import precision_choice
from compare.process import runner, warm
from compare.run import worker

REPO = Path(__file__).resolve().parent.parent
TWINS = ("tf_impl", "torch_impl")
# Started before anything else in every Python process of a test (PYTHONPATH): the precision
# rule, and this machine's reading of it, raise once a framework is imported, that is in a
# framework process (compare/ itself never imports one, so the command may resolve).
POISON = """
import sys

from compare.experiment import precision_rule as rule
from compare.machine import precision_choice as machine


def poisoned(real):
    def call(*args, **kwargs):
        if "torch" in sys.modules or "tensorflow" in sys.modules:
            raise RuntimeError("a framework process resolved --precision again")
        return real(*args, **kwargs)
    return call


rule.choose = poisoned(rule.choose)
machine.choose = poisoned(machine.choose)
machine.resolve = poisoned(machine.resolve)
"""
# What the test carries for the CPU: not what this machine resolves `auto` to (float32)
CARRIED = {"requested": "auto", "precision": "mixed", "compute_type": "bfloat16",
           "reason": "auto: carried by the test, not this machine's choice", "warning": None,
           "handicap": None}
FLOAT32 = {**CARRIED, "precision": "fp32", "compute_type": "float32"}


def _poisoned_environment(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "poison"
    site.mkdir()
    (site / "sitecustomize.py").write_text(POISON)
    path = os.pathsep.join(p for p in (str(site), str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def test_the_twins_never_read_the_machine_for_their_precision():
    """Neither framework package imports the machine's precision choice
    (compare.machine.precision_choice): configure_numerics applies what the config carries
    (compare.experiment.precision_rule.carried)."""
    readers = []
    for package in TWINS:
        for path in sorted((REPO / package).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (
                        node.module == "compare.machine.precision_choice" or
                        (node.module == "compare.machine"
                         and any(a.name == "precision" for a in node.names))):
                    readers.append(f"{path.relative_to(REPO)}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(
                        a.name == "compare.machine.precision_choice" for a in node.names):
                    readers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert readers == []
    for package in TWINS:
        device = (REPO / package / "device.py").read_text()
        assert "precision_rule.carried(config, choice.kind)" in device


def test_a_config_carries_its_resolution_until_what_it_was_resolved_from_changes(tmp_path):
    config = precision_choice.carry(RunConfig(precision="auto", device="cpu"))
    assert set(config.precision_resolved) == {"cpu"}  # --device cpu: the CPU alone
    assert rule.carried(config, "cpu") == precision_choice.resolve("auto", False, model="lenet")
    assert RunConfig.from_json(config.to_json()) == config  # to the framework and back
    kept = config.replace(seed=3, out=str(tmp_path), framework="tf")
    assert kept.precision_resolved == config.precision_resolved
    for change in ({"precision": "fp32"}, {"device": "auto"}, {"model": "resnet9"}):
        assert config.replace(**change).precision_resolved is None, change
    with pytest.raises(ValueError, match="not resolved for the GPU"):
        rule.carried(config, "gpu")
    stale = config.replace(precision_resolved={"cpu": {**CARRIED, "requested": "fp32"}})
    with pytest.raises(ValueError, match="--precision auto was not resolved"):
        rule.carried(stale, "cpu")
    # a framework process started on a config without one resolves it at its entry, once
    assert worker.carried_precision(RunConfig(device="cpu")).precision_resolved == \
        config.precision_resolved
    assert worker.carried_precision(stale) is stale  # carried: read, not resolved again


# TensorFlow's pair of processes (14-16 s under pytest -n 2) in the heavy tier; PyTorch's in both
@pytest.mark.parametrize("framework", [pytest.param("tf", marks=pytest.mark.slow), "torch"])
def test_a_framework_process_uses_the_carried_precision_and_resolves_none(tmp_path, framework,
                                                                          monkeypatch):
    """A config carrying mixed bfloat16 for `auto` on the CPU, which this machine would
    resolve to float32: the framework process, where resolving raises, trains in the carried
    precision and records it with its reason."""
    assert precision_choice.resolve("auto", False, model="lenet").compute_type == "float32"
    losses = {}
    monkeypatch.setenv("PYTHONPATH", _poisoned_environment(tmp_path)["PYTHONPATH"])
    # both processes forked from one fork server, as a command starts its runs: the poison
    # loaded at the server's start, the framework's import paid once
    with warm.fork_servers() as pool:
        for carried in (CARRIED, FLOAT32):
            config = tiny_config(tmp_path / carried["compute_type"], framework=framework,
                                 precision="auto", epochs=1)
            config = config.replace(precision_resolved={"cpu": carried})
            lines: list[str] = []
            outcome = runner.run_framework(config, on_line=lines.append)
            assert outcome.status == "completed", "\n".join(lines[-30:])
        assert [server.forked for server in pool.servers.values()] == [2]
    for carried in (CARRIED, FLOAT32):
        config = tiny_config(tmp_path / carried["compute_type"])
        result = json.loads((Path(config.out) / "result.json").read_text())
        assert result["fairness"]["precision"] == carried  # recorded with its reason
        losses[carried["compute_type"]] = files.read_csv(files.RunDir(Path(config.out)).steps)[
            "loss"][0]
    # what the process computed in: the same first batch from the same weights, its loss
    # rounded by bfloat16 (8 significand bits) in one and exact to float32 in the other
    assert losses["bfloat16"] != losses["float32"]
    assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=0.02)


def test_a_run_resolves_in_the_command_and_its_framework_reads_it(tmp_path):
    """`cnncompare run`: the command resolves --precision auto (its framework process, where
    resolving raises, trains all the same), and result.json's config carries what it chose."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", "from compare.cli import main; main()", "run", "--framework",
         "torch", "--dataset", "synthetic", "--synthetic-size", "64", "--epochs", "1",
         "--profile", "0", "--device", "cpu", "--quiet", "--out", str(out)],
        cwd=REPO, env=_poisoned_environment(tmp_path), capture_output=True, text=True,
        timeout=patience(300))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    chosen = precision_choice.resolve("auto", False, model="lenet").to_dict("auto")
    assert result["fairness"]["precision"] == chosen
    assert result["config"]["precision_resolved"] == {"cpu": chosen}
