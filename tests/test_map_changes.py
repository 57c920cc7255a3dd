"""The map's promises kept: each kind of change docs/architecture.md's "Where to change what"
names is made in a copy of compare/, in exactly the files its row names, and everything the
row says follows does follow, in a fresh process that imports the copy. A change that needs
one more file to show fails here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import patience

REPO = Path(__file__).resolve().parent.parent


def _with_edits(tmp_path: Path, edits: dict[str, list[tuple[str, str]]]) -> Path:
    """A copy of compare/ under tmp_path with each file's (old, new) replacements made."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "compare", root / "compare",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name, replacements in edits.items():
        path = root / name
        text = path.read_text()
        for old, new in replacements:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        path.write_text(text)
    return root


def _run(root: Path, script: str) -> dict:
    """`script`'s last line of output, as JSON, run with the copy first on the path (the tests'
    helpers after it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO / "tests")])}
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, text=True,
                          capture_output=True, timeout=patience(120))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_figure_is_one_entry_in_figures(tmp_path):
    """A figure reading a field RunSummary already has: its `Figure` in FIGURES and nothing
    else, and the aggregates, the TF / PyTorch ratio, the report's rows and headline, the
    definitions every result carries and the docs' table all show it."""
    new = ('EPOCHS = Figure(\n'
           '    "epochs_completed", "Epochs completed", "s", "epochs_completed",\n'
           '    "epochs trained to their end", Read("epochs_completed"), "positive", "ratio",\n'
           '    headline=True)\n\n')
    order = "# In the order of the report's table.\n"
    root = _with_edits(tmp_path, {"compare/figures.py": [
        (order, new + order),
        ("TIME_TO_TARGET,\n)", "TIME_TO_TARGET, EPOCHS,\n)")]})
    found = _run(root, f"""
import json
from pathlib import Path
from report_runs import fake_result, write_runs
from compare import report, schema
from compare.cli import docs
out = Path({str(tmp_path / "cmp")!r})
write_runs(out, [fake_result(fw, seed, t, 0.6, epochs=epochs) for fw, t, epochs in
                 (("tf", 10.0, 3), ("torch", 8.0, 2)) for seed in (0, 1)])
report.rebuild(out, [out])
summary = json.loads((out / "summary.json").read_text())
print(json.dumps({{"tf": summary["frameworks"]["tf"]["epochs_completed"]["centre"],
                  "ratio": summary["ratios"]["epochs_completed"]["ratio"],
                  "headline": [r["figure"] for r in report.verdict_rows(summary, headline=True)],
                  "report": "| Epochs completed |" in (out / "report.md").read_text(),
                  "defined": schema.MEASUREMENT.get("epochs_completed"),
                  "docs": "| Epochs completed | `epochs_completed` |" in docs.figures_table()}}))
""")
    # 3 epochs against 2 (geometric means: exact to rounding)
    assert found["tf"] == pytest.approx(3.0) and found["ratio"] == pytest.approx(1.5)
    assert "Epochs completed" in found["headline"] and found["report"] and found["docs"]
    assert found["defined"] == "epochs trained to their end"


def test_a_report_section_is_one_function_listed_in_sections(tmp_path):
    """A report section: a function returning its Section, listed in SECTIONS; both pages
    render it without a template or builder edit."""
    new = ('def epochs_trained(g: Group) -> Section | None:\n'
           '    return Section("epochs-trained", "Epochs trained", "Per run.",\n'
           '                   ("Framework", "Epochs"),\n'
           '                   [[r["framework"], str(len(r["epochs"]))]\n'
           '                    for r in g.runs or []],\n'
           '                   folded=False)\n\n\n')
    root = _with_edits(tmp_path, {"compare/report/sections.py": [
        ("SECTIONS = (headline,", new + "SECTIONS = (epochs_trained, headline,")]})
    found = _run(root, f"""
import json
from pathlib import Path
from report_runs import fake_result, write_runs
from compare import report
out = Path({str(tmp_path / "cmp")!r})
write_runs(out, [fake_result(fw, 0, 8.0, 0.6, epochs=2) for fw in ("tf", "torch")])
report.rebuild(out, [out])
markdown, html = (out / "report.md").read_text(), (out / "report.html").read_text()
print(json.dumps({{"markdown": "Epochs trained" in markdown and "| torch | 2 |" in markdown,
                  "html": "Epochs trained" in html and "<td>tf</td><td>2</td>" in html}}))
""")
    assert found == {"markdown": True, "html": True}


def test_a_network_is_one_entry_in_models(tmp_path):
    """A built-in network: its Network in MODELS (here a second name for LeNet's builder);
    --model takes it, its recipe sets the run's defaults and `cnncompare models` lists it.
    Each framework's build of every network (its own process, 7-20 s of a 2-core machine)
    answers an error here: a row is listed either way, and the builds are
    tests/test_networks.py's (heavy tier)."""
    root = _with_edits(tmp_path, {"compare/experiment/networks.py": [
        ('MODELS: dict[str, Network] = {\n',
         'MODELS: dict[str, Network] = {\n'
         '    "lenet_twin": Network(lenet, {"augment": False, "batch_size": 8}, "none",\n'
         '                          "a copy of lenet", 62006),\n')]})
    found = _run(root, """
import json
from click.testing import CliRunner
from compare.cli import cli
from compare.experiment.config import recipe_config
from compare.process import runner
runner.framework_models = lambda framework, names: {"error": "not built in this test"}
listed = CliRunner().invoke(cli, ["models"]).output
helped = CliRunner().invoke(cli, ["run", "--help"]).output
print(json.dumps({"batch": recipe_config("lenet_twin").batch_size,
                  "listed": "lenet_twin" in listed, "choice": "lenet_twin" in helped}))
""")
    assert found == {"batch": 8, "listed": True, "choice": True}
