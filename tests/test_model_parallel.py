"""--parallel model's cut and rules (the stage splits in each framework: test_frameworks.py)."""

from __future__ import annotations

import itertools

import pytest
from click.testing import CliRunner
from conftest import tiny_config

from compare.cli import cli
from compare.errors import UserError
from compare.experiment import networks, specs, stages
from compare.experiment.validate import check_config


@pytest.mark.parametrize("model", ["lenet", "resnet9"])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_cut_is_the_most_balanced_split_into_consecutive_stages(model, count):
    spec = networks.get_spec(model)
    costs = stages.layer_macs(spec)
    assert sum(costs) * 2 == specs.forward_flops(spec)
    cut = stages.cut(spec, count)
    assert cut[0].start == 0 and cut[-1].end == len(spec.layers)
    assert all(a.end == b.start and a.end > a.start for a, b in zip(cut, cut[1:]))
    every = [max(sum(costs[a:b]) for a, b in zip((0, *bounds), (*bounds, len(costs))))
             for bounds in itertools.combinations(range(1, len(costs)), count - 1)]
    assert max(s.macs for s in cut) == min(every)  # no other cut has a lighter heaviest stage
    shares = stages.describe(spec, cut)
    assert abs(sum(s["flops_share"] for s in shares) - 1) < 1e-3


def test_lenet_in_two_stages_puts_the_first_convolution_apart():
    cut = stages.cut(networks.get_spec("lenet"), 2)
    assert (cut[0].first, cut[1].first) == ("conv1", "conv2")
    with pytest.raises(ValueError, match="cannot be cut into 99 stages"):
        stages.cut(networks.get_spec("lenet"), 99)


@pytest.mark.parametrize("changes, said", [
    ({"stages": 2}, "--stages cuts the network under --parallel model"),
    ({"parallel": "model", "devices": 2, "compile": True}, "--parallel model: --compile"),
    ({"parallel": "model", "devices": 2, "strategy": "mirrored"},
     "--parallel model: --strategy mirrored"),
    ({"parallel": "model", "stages": 99}, "--stages 99: lenet has"),
    ({"micro_batches": 3}, "--micro-batches 3: each replica's batch of 32"),
])
def test_what_model_parallelism_cannot_be_combined_with_is_refused_in_one_line(
        tmp_path, changes, said):
    with pytest.raises(UserError, match=said.replace("(", r"\(")):
        check_config(tiny_config(tmp_path, **changes))


def test_model_parallel_with_one_replica_passes_the_checks(tmp_path):
    config = check_config(tiny_config(tmp_path, parallel="model", devices=2, strategy="none",
                                      micro_batches=4))
    assert stages.placement(config, ("/cpu:0", "/cpu:1")) == ("/cpu:0", "/cpu:1")
    assert stages.placement(config.replace(stages=3), ("cpu",)) == ("cpu", "cpu", "cpu")
    assert stages.placement(config.replace(parallel="data", stages=None), ("cpu",)) is None


@pytest.mark.slow
def test_sweep_varies_data_against_model_parallelism(tmp_path):
    out = tmp_path / "sweep"
    outcome = CliRunner().invoke(cli, [
        "sweep", "--device", "cpu", "--devices", "2", "--vary", "parallel=data,model",
        "--dataset", "synthetic", "--synthetic-size", "128", "--epochs", "1", "--precision",
        "fp32", "--workers", "0", "--out", str(out), "--quiet"])
    assert outcome.exit_code == 0, outcome.output
    import json
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert sorted((r["framework"], r["settings"]["parallel"], r["status"]) for r in rows) == [
        ("tf", "data", "completed"), ("tf", "model", "completed"),
        ("torch", "data", "completed"), ("torch", "model", "completed")]
    assert all(r["speedup"] > 0 for r in rows)
