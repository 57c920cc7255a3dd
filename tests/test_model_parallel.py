"""--parallel model: the cut and its rules, and the stages and micro-batches in each framework,
training the unsplit model's steps."""

from __future__ import annotations

import itertools
import json

import pytest
from click.testing import CliRunner
from conftest import tiny_config, trainer_for

from compare import schema
from compare.cli import cli
from compare.errors import UserError
from compare.experiment import networks, specs, stages
from compare.run.validate import check_config


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
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert sorted((r["framework"], r["settings"]["parallel"], r["status"]) for r in rows) == [
        ("tf", "data", "completed"), ("tf", "model", "completed"),
        ("torch", "data", "completed"), ("torch", "model", "completed")]
    assert all(r["speedup"] > 0 for r in rows)


def _losses(module, config, steps: int = 6) -> list[float]:
    trainer = trainer_for(module, config)
    batches = trainer.batches(0)
    return trainer.read_steps([trainer.train_steps(batches, [0.05]) for _ in range(steps)])[0]


def test_model_parallel_stages_train_the_unsplit_models_steps(tmp_path, framework):
    """--parallel model --devices 2 cuts LeNet into two stages (conv1 block | the rest) on
    two devices; in float32 on a CPU each step's loss is the unsplit model's. Measured: the
    same ops on the same data, so equal to rounding (0 in both frameworks here); the bound,
    1e-6 relative, leaves room for another CPU's kernels and none for a wrong step."""
    name, module = framework
    whole = tiny_config(tmp_path)
    split = whole.replace(parallel="model", devices=2)
    expected, found = _losses(module, whole), _losses(module, split)
    assert max(abs(a - b) / abs(b) for a, b in zip(found, expected)) <= 1e-6
    trainer = trainer_for(module, split)
    if name == "tf":  # each stage's variables and ops on its logical CPU device
        import tensorflow as tf
        assert [p.name for p in trainer.model.parts] == ["stage0", "stage1"]
        for part, device in zip(trainer.model.parts, ("CPU:0", "CPU:1")):
            assert part.weights and all(w.value.device.endswith(device) for w in part.weights)
        graph = tf.function(lambda x: trainer.model(x, training=False)).get_concrete_function(
            tf.TensorSpec((None, 32, 32, 3))).graph
        devices = {op.name: op.device for op in graph.get_operations()}
        assert any("conv1" in n and d.endswith("CPU:0") for n, d in devices.items())
        assert any("conv2" in n and d.endswith("CPU:1") for n, d in devices.items())
    else:  # two stage modules; on a CPU both on the one device
        assert len(trainer.model.body) == 2
        assert trainer.model.named_layers["conv2"] in list(trainer.model.body[1].modules())
        assert {p.device.type for p in trainer.model.parameters()} == {"cpu"}
    assert trainer.manifest()["placement"] == trainer.placement  # as the stages were asked
    # where each stage's weights live, read from the framework
    assert trainer.manifest()["weights_on"] == (["/cpu:0", "/cpu:1"] if name == "tf"
                                                else ["cpu", "cpu"])


@pytest.mark.machine_sensitive  # summed parts against the whole, float32 rounding
def test_micro_batches_accumulate_the_whole_batchs_gradient(tmp_path, framework):
    """--micro-batches 2 on LeNet (no BatchNorm, so the parts' statistics cannot differ)
    trains the whole batch's steps: the gradients of two halves, each scaled by the global
    batch, add up to the whole batch's, to float32 rounding (measured below 1e-6; bound
    1e-5 relative)."""
    _, module = framework
    whole = tiny_config(tmp_path)
    expected = _losses(module, whole)
    found = _losses(module, whole.replace(micro_batches=2))
    assert max(abs(a - b) / abs(b) for a, b in zip(found, expected)) <= 1e-5


@pytest.mark.parametrize("name", ["tf", "torch"])
def test_cli_run_trains_with_the_model_split_over_two_devices(tmp_path, name):
    out = tmp_path / "mp"
    outcome = CliRunner().invoke(cli, ["run", "--framework", name, "--device", "cpu",
                                       "--devices", "2", "--parallel", "model", "--dataset",
                                       "synthetic", "--synthetic-size", "128", "--epochs", "1",
                                       "--precision", "fp32", "--out", str(out), "--quiet"])
    assert outcome.exit_code == 0, outcome.output
    result = schema.read_result(out / "result.json")
    parallel = result["fairness"]["parallel"]
    assert parallel["kind"] == "model" and parallel["micro_batches"] == 1
    assert [s["layers"].split(" .. ")[0] for s in parallel["stages"]] == ["conv1", "conv2"]
    assert abs(sum(s["flops_share"] for s in parallel["stages"]) - 1) < 1e-3
    assert len(result["fairness"]["placement"]) == 2 and result["summary"].replicas == 1


@pytest.mark.parametrize("parallel, rank, names", [
    ("data", 1, ("cuda:0",)), ("model", 0, ("cuda:0", "cuda:0"))])
def test_torch_devices_share_one_gpu_only_when_asked(tmp_path, monkeypatch, parallel, rank,
                                                     names):
    """PyTorch's choice on a host with one CUDA GPU (faked: this CPU has none): --devices 2
    is refused unless --share-device, which puts both DDP processes (or both model-parallel
    stages) on GPU 0, all-reduces over gloo (NCCL refuses two ranks on one GPU) and records
    the shared chip."""
    import torch

    from compare.errors import DeviceError
    from torch_impl import device as torch_device
    for name, value in {"is_available": lambda: True, "device_count": lambda: 1,
                        "get_device_name": lambda i=0: "NVIDIA H100 80GB HBM3",
                        "get_device_capability": lambda i=0: (9, 0)}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    if parallel == "data":  # the second of two DDP processes on this machine
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    config = tiny_config(tmp_path, device="gpu", devices=2, parallel=parallel)
    with pytest.raises(DeviceError, match="--share-device"):
        torch_device.select_device(config)
    choice = torch_device.select_device(config.replace(share_device=True))
    assert choice.names == names and choice.shared_chip and choice.rank == rank
    assert choice.description == "GPU: NVIDIA H100 80GB HBM3 shared by 2 devices"
    if parallel == "data":
        joined = []
        monkeypatch.setattr(torch_device.dist, "init_process_group",
                            lambda backend, **_: joined.append(backend))
        assert torch_device.make_strategy(config, choice) == "gloo" and joined == ["gloo"]
