"""A model zoo's network ported and then compared end to end: torchvision's MobileNetV3-Small
and Keras Applications' MobileNetV3Small (squeeze-and-excitation gates, hard swish, dropout)
at CIFAR-10's size, from the source's own weights, with the parity check and one short run
in each framework."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_port import compare_ported

from compare.cli import cli

pytestmark = pytest.mark.usefixtures("forked_frameworks")


def _source(tmp_path: Path, kind: str) -> list[str]:
    """The port's arguments for the zoo's MobileNetV3-Small of `kind`'s framework."""
    if kind == "torch":
        return ["torch", "torchvision.models:mobilenet_v3_small", "--kwargs",
                '{"num_classes": 10}']
    path = tmp_path / "mobilenet_v3_small.keras"
    subprocess.run([sys.executable, "-c",
                    "import keras; keras.applications.MobileNetV3Small(weights=None, "
                    f"input_shape=(32, 32, 3), classes=10).save({str(path)!r})"],
                   check=True, capture_output=True)
    return ["keras", str(path)]


@pytest.mark.machine_sensitive  # the port's proof and the parity check, in floating point
@pytest.mark.slow  # a port, then the parity check and one short run in each framework
@pytest.mark.parametrize("kind", ["torch", "keras"])
def test_a_zoo_network_ports_and_compares_end_to_end(tmp_path, kind):
    out = tmp_path / "ported"
    ported = CliRunner().invoke(cli, ["port", *_source(tmp_path, kind), "--out", str(out),
                                      "--quiet"])
    assert ported.exit_code == 0, ported.output
    record = json.loads((out / "port.json").read_text())
    assert record["proof"]["passed"]
    assert record["dropout"]["rates"]  # the classifier's dropout, read, not refused
    for result in compare_ported(out, tmp_path / "runs", record, "--synthetic-size", "32",
                                 "--batch-size", "16").values():
        assert result["fairness"]["dropout"].endswith("each framework draws its own random "
                                                      "masks")

def test_the_coverage_table_in_porting_md_is_the_measured_one():
    """docs/porting.md's table is written from benchmarks/results/port_coverage.json, every
    listed model in it, and the claims table's count (docs/benchmarks.md) is the table's."""
    from benchmarks import port_coverage
    found = json.loads(port_coverage.RESULTS.read_text())
    text = port_coverage.DOCS.read_text()
    assert port_coverage.table(found["entries"]) in text, (
        "docs/porting.md's coverage is stale: python -m benchmarks.port_coverage --write-docs")
    listed = {e["model"] for e in found["entries"]}
    assert listed == set(port_coverage.TORCHVISION) | set(port_coverage.KERAS_APPLICATIONS)
    ported = sum(port_coverage.round_trip(e) for e in found["entries"])
    claims = (port_coverage.ROOT / "docs" / "benchmarks.md").read_text()
    assert f"| {ported} of {len(listed)} |" in claims
