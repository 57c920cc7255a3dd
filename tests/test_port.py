"""`cnncompare port`: networks written for these tests (tests/port_torch_models.py,
tests/port_keras_models.py) read in one framework, their twins built in the other and proven
equal; what the spec cannot express refused in one line with nothing written; --init-weights."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from compare.cli.app import cli
from compare.errors import UserError
from compare.experiment import networks, parity, porting, specs, weights
from compare.experiment.config import RunConfig
from compare.experiment.porting import Node, Refused
from compare.run import validate

pytestmark = pytest.mark.usefixtures("forked_frameworks")

TORCH_MODELS = Path(__file__).parent / "port_torch_models.py"
TUTORIAL_NET = Path(__file__).parent.parent / "examples" / "tutorial_net.py"


def _port(args: list[str]):
    return CliRunner().invoke(cli, ["port", *args])


def _ported(out: Path) -> tuple[dict, specs.ModelSpec, dict]:
    record = json.loads((out / "port.json").read_text())
    spec = networks.load_reference(str(out / "spec.py"), record["spec"]["num_classes"])
    return record, spec, weights.read_file(out / "weights.npz", spec)


def _assert_proven(record: dict, parameters: int) -> None:
    proof = record["proof"]
    assert proof["passed"] and proof["failed"] == []
    for figure, limit in proof["tolerances"].items():
        assert proof[figure] <= limit, figure
    # float64 in both (the parity check's proof): rounding, 100x inside the float64 limits,
    # which a wrong layout (0.1-1) or a BatchNorm epsilon (1e-1 here) is far outside
    assert "float64" in proof["method"]
    assert proof["tolerances"] == {k: getattr(parity.FLOAT64, k) for k in proof["tolerances"]}
    assert all(proof[k] < limit / 100 for k, limit in proof["tolerances"].items()), proof
    assert (record["source"]["parameters"] == record["spec"]["parameters"]
            == record["twin"]["parameters"] == parameters)


@pytest.mark.machine_sensitive  # a proof in floating point: its figures depend on the kernels
@pytest.mark.parametrize("file, name, parameters, residuals, grouped", [
    (TUTORIAL_NET, "Net", 62_006, 0, 0),  # the PyTorch tutorial's: F.relu, torch.flatten
    (TORCH_MODELS, "ResidualNet", 5_266, 2, 0),  # shortcut +=, a projection, self.relu reused
    (TORCH_MODELS, "Depthwise", 3_914, 0, 2),  # depthwise and grouped convs, ReLU6, p=0 dropout
])
def test_a_torch_cnn_ports_to_keras_with_its_weights_and_proof(tmp_path, file, name, parameters,
                                                               residuals, grouped):
    import importlib.util

    import torch
    # The network as the user has it, drawing its weights from a seed of its own, so that a
    # fresh build below holds the very weights the port must carry over.
    seeded = tmp_path / "seeded.py"
    seeded.write_text(
        "import importlib.util\nimport torch\n"
        f"_found = importlib.util.spec_from_file_location('source_{name}', {str(file)!r})\n"
        "_module = importlib.util.module_from_spec(_found)\n_found.loader.exec_module(_module)\n"
        f"class Seeded(_module.{name}):\n"
        "    def __init__(self):\n        torch.manual_seed(1234)\n        super().__init__()\n")
    out = tmp_path / "ported"
    outcome = _port(["torch", f"{seeded}:Seeded", "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    assert "source and twin equal" in outcome.output
    record, spec, ported = _ported(out)
    _assert_proven(record, parameters)
    assert record["source"]["framework"] == "torch" and record["twin"]["framework"] == "tf"
    assert sum(isinstance(layer, specs.Residual) for layer in _all(spec.layers)) == residuals
    assert sum(isinstance(layer, specs.Conv) and layer.groups > 1
               for layer in _all(spec.layers)) == grouped
    assert sorted(p.name for p in out.iterdir()) == ["port.json", "spec.py", "weights.npz"]
    assert [p.name for p in tmp_path.iterdir()] == ["ported", "seeded.py"]  # no staging left
    # the weights are the source's own, every one of them (torch's layout is canonical)
    loader = importlib.util.spec_from_file_location("ported_source", file)
    models = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(models)
    torch.manual_seed(1234)
    state = {k: v.numpy() for k, v in getattr(models, name)().state_dict().items()}
    carried = {f"{spec_name}.{part}": state[f"{path}.{part}"]
               for spec_name, path in record["source"]["layers"].items()
               for part in ("weight", "bias") if f"{path}.{part}" in state}
    assert carried and set(carried) <= set(ported)
    for key, value in carried.items():
        np.testing.assert_array_equal(ported[key], value, err_msg=key)


@pytest.mark.machine_sensitive  # a proof in floating point: its figures depend on the kernels
@pytest.mark.parametrize("build, parameters, residuals", [
    ("functional_residual", 3_058, 2), ("sequential", 16_034, 0)])
def test_a_keras_model_ports_to_pytorch_with_its_weights_and_proof(tmp_path, build,
                                                                    parameters, residuals):
    import port_keras_models as models
    model = getattr(models, build)()
    model.save(tmp_path / "model.keras")
    out = tmp_path / "ported"
    outcome = _port(["keras", str(tmp_path / "model.keras"), "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    record, spec, ported = _ported(out)
    _assert_proven(record, parameters)
    assert record["source"]["framework"] == "tf" and record["twin"]["framework"] == "torch"
    assert sum(isinstance(layer, specs.Residual) for layer in _all(spec.layers)) == residuals
    # Keras' kernels in the canonical (PyTorch) layout: HWIO -> OIHW
    first = next(layer for layer in specs.walk(spec.layers) if isinstance(layer, specs.Conv))
    kernel = model.get_layer(first.name).get_weights()[0]
    np.testing.assert_array_equal(ported[f"{first.name}.weight"], kernel.transpose(3, 2, 0, 1))
    batchnorms = [layer for layer in specs.walk(spec.layers)
                  if isinstance(layer, specs.BatchNorm)]
    assert all(layer.epsilon == 1e-3 and layer.momentum == pytest.approx(0.01)
               for layer in batchnorms)  # Keras' own, carried into the spec


@pytest.mark.parametrize("args, said", [
    (["torch", f"{TORCH_MODELS}:WithPReLU"], "layer 'gate' (PReLU): PReLU is not a spec "
                                             "layer kind"),
    (["torch", f"{TORCH_MODELS}:WithChunk"], "chunk in WithChunk.forward (node 'chunk'): the "
                                             "spec cannot express it"),
    (["torch", f"{TORCH_MODELS}:WithFunctionalDropout"], "dropout as a function (p=0.5)"),
    (["torch", f"{TORCH_MODELS}:WithDilatedPool"], "layer 'pool' (MaxPool2d): dilated pooling"),
    (["torch", f"{TORCH_MODELS}:WithFullFlatten"], "reshapes to a 1-dimensional tensor; "
                                                   "the spec flattens all but the batch"),
    (["torch", f"{TORCH_MODELS}:NoSuchNet"], "has no nn.Module class or function NoSuchNet"),
    (["torch", f"{TORCH_MODELS}:ResidualNet", "--kwargs", '{"depth": 3}'],
     "ResidualNet(**{\"depth\": 3}) did not build: TypeError"),
])
def test_what_the_spec_cannot_express_is_one_line_and_nothing_written(tmp_path, args, said):
    out = tmp_path / "ported"
    outcome = _port([*args, "--out", str(out)])
    assert outcome.exit_code == 2, outcome.output
    lines = outcome.output.strip().splitlines()
    assert said in lines[-1] and "Traceback" not in outcome.output
    assert list(tmp_path.iterdir()) == []  # neither --out nor a staging directory


@pytest.mark.parametrize("build, said", [
    ("with_softmax_inside", "layer 'probs' (Dense): activation 'softmax' before the output"),
    ("with_cropping", "layer 'crop' (Cropping2D): Cropping2D is not a spec layer kind"),
])
def test_a_keras_model_the_spec_cannot_express_is_refused(tmp_path, build, said):
    outcome = _port(["keras", _keras_file(tmp_path, build), "--out", str(tmp_path / "out")])
    assert outcome.exit_code == 2, outcome.output
    assert said in outcome.output.strip().splitlines()[-1]
    assert [p.name for p in tmp_path.iterdir()] == [f"{build}.keras"]


def test_port_refuses_an_out_that_holds_files_and_bad_arguments(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep me")
    outcome = _port(["torch", f"{TUTORIAL_NET}:Net", "--out", str(tmp_path / "taken")])
    assert outcome.exit_code == 2 and "is not an empty directory" in outcome.output
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["mine.txt"]
    bad = _port(["torch", f"{TUTORIAL_NET}:Net", "--kwargs", "[1]", "--out", "x"])
    assert bad.exit_code == 2 and "a JSON object" in bad.output
    shape = _port(["torch", f"{TUTORIAL_NET}:Net", "--input-shape", "3,32",
                   "--out", "x"])
    assert shape.exit_code == 2 and "C,H,W" in shape.output


def test_a_proof_that_fails_exits_1_and_writes_nothing(tmp_path, monkeypatch):
    from compare.process import port as porter
    real = porter.porting.compare_outputs

    def strict(source, twin):  # a twin off by a wrong layout's margin
        return real(source, {**twin, "logits": twin["logits"] + 0.5})
    monkeypatch.setattr(porter.porting, "compare_outputs", strict)
    outcome = _port(["torch", f"{TUTORIAL_NET}:Net", "--out", str(tmp_path / "out")])
    assert outcome.exit_code == 1
    assert "does not compute what the source does" in str(outcome.exception or outcome.output)
    assert list(tmp_path.iterdir()) == []


def _all(layers):
    for layer in layers:
        yield layer
        yield from _all(layer.sublayers)


def test_assemble_turns_adds_into_residual_blocks_and_refuses_other_graphs():
    conv = [specs.Conv(f"c{i}", 4, 4, 3, 1) for i in range(4)]
    relu = specs.ReLU("r")
    nodes = [Node("x", "input"), Node("a", "layer", ("x",), conv[0]),
             Node("b", "layer", ("a",), conv[1]), Node("s", "layer", ("x",), conv[2]),
             Node("sum", "add", ("b", "s")), Node("r", "layer", ("sum",), relu),
             Node("c", "layer", ("r",), conv[3]), Node("sum2", "add", ("r", "c")),
             Node("out", "output", ("sum2",))]
    layers = porting.assemble(nodes)
    assert layers == (specs.Residual("sum", (conv[0], conv[1]), (conv[2],)), relu,
                      specs.Residual("sum2", (conv[3],), ()))
    with pytest.raises(Refused, match="merges a tensor with itself"):
        porting.assemble([Node("x", "input"), Node("s", "add", ("x", "x"), where="s"),
                          Node("o", "output", ("s",))])
    with pytest.raises(Refused, match="does not reach the logits"):
        porting.assemble([Node("x", "input"), Node("a", "layer", ("x",), conv[0], "head"),
                          Node("b", "layer", ("x",), conv[1]), Node("o", "output", ("b",))])


def test_assemble_reads_concatenations_and_gates_as_merges():
    """DenseNet's concatenations (each layer reads cat of all before it; the block's output
    cats them all), a squeeze-and-excitation gate, a GoogLeNet-like four-way concat; paths
    that meet after parting with a shared layer are refused."""
    conv = [specs.Conv(f"c{i}", 4, 4, 1) for i in range(6)]
    gate = specs.Activation("gate", "sigmoid")
    nodes = [Node("x", "input"), Node("n1", "layer", ("x",), conv[0]),
             Node("cat1", "concat", ("x", "n1")), Node("n2", "layer", ("cat1",), conv[1]),
             Node("cat2", "concat", ("x", "n1", "n2")), Node("g", "layer", ("cat2",), gate),
             Node("se", "multiply", ("cat2", "g")), Node("out", "output", ("se",))]
    first = specs.Merge("cat1", "concat", ((), (conv[0],)))
    second = specs.Merge("cat2", "concat", ((), (conv[1],)))
    assert porting.assemble(nodes) == (first, second,
                                       specs.Merge("se", "multiply", ((), (gate,))))
    four = [Node("x", "input"), *(Node(f"b{i}", "layer", ("x",), conv[i]) for i in range(4)),
            Node("cat", "concat", ("b0", "b1", "b2", "b3")), Node("out", "output", ("cat",))]
    assert porting.assemble(four) == (
        specs.Merge("cat", "concat", tuple((conv[i],) for i in range(4))),)
    shared = [Node("x", "input"), Node("a", "layer", ("x",), conv[0]),
              Node("b", "layer", ("x",), conv[1]), Node("m", "add", ("a", "b")),
              Node("c", "layer", ("m",), conv[2]),
              Node("m2", "concat", ("c", "a"), where="the second concat"),
              Node("out", "output", ("m2",))]
    with pytest.raises(Refused, match="the second concat: its inputs share a layer"):
        porting.assemble(shared)


@pytest.mark.parametrize("name", list(networks.MODELS))
def test_every_network_written_as_a_spec_file_loads_back_equal(tmp_path, name):
    spec = networks.get_spec(name)
    path = tmp_path / "spec.py"
    path.write_text(porting.spec_source(spec, f"{name}, written back"))
    assert networks.load_reference(str(path)) == spec


def test_init_weights_are_checked_before_anything_starts(tmp_path):
    spec = networks.get_spec("lenet")
    good = weights.initial_weights(spec, 7)
    np.savez(tmp_path / "good.npz", **good)
    config = RunConfig(model="lenet", init_weights=str(tmp_path / "good.npz"))
    validate.check_model(config)
    loaded = weights.for_run(spec, config)
    assert all(np.array_equal(loaded[k], good[k]) for k in good)  # the file's, not the seed's
    assert not np.array_equal(loaded["conv1.weight"],
                              weights.initial_weights(spec, 0)["conv1.weight"])
    np.savez(tmp_path / "short.npz", **{k: v for k, v in good.items() if k != "fc3.bias"})
    np.savez(tmp_path / "shape.npz", **{**good, "fc3.bias": np.zeros(3, np.float32)})
    (tmp_path / "text.npz").write_text("not weights")
    for file, said in (("short", "the weights lack fc3.bias"),
                       ("shape", "fc3.bias is (3,), lenet needs (10,)"),
                       ("text", "not an NPZ file of weights"),
                       ("missing", "not an NPZ file of weights")):
        with pytest.raises(UserError, match=re.escape(f"{file}.npz: {said}")):
            validate.check_model(config.replace(init_weights=str(tmp_path / f"{file}.npz")))
    with pytest.raises(UserError, match="--no-shared-init"):
        validate.check_model(config.replace(shared_init=False))


def _keras_file(tmp_path: Path, build: str) -> str:
    import port_keras_models as models
    path = tmp_path / f"{build}.keras"
    getattr(models, build)().save(path)
    return str(path)


def compare_ported(out: Path, runs: Path, record: dict, *options: str) -> dict[str, dict]:
    """`compare` of the port in `out` from its own weights, one short run each on synthetic
    data (`options` added): each framework's result, its parity check passed, its runs
    completed with the spec's parameters and the port's weights."""
    outcome = CliRunner().invoke(cli, [
        "compare", "--model", str(out / "spec.py"), "--init-weights", str(out / "weights.npz"),
        "--dataset", "synthetic", "--synthetic-size", "64", "--epochs", "1", "--seeds", "1",
        "--no-own-loops", "--device", "cpu", "--quiet", "--out", str(runs), *options])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads((runs / "summary.json").read_text())["parity"]["passed"]
    results = {}
    for framework in ("tf", "torch"):
        result = json.loads(next((runs / "runs").glob(f"{framework}-*/result.json")).read_text())
        assert result["summary"]["status"] == "completed"
        assert result["model"]["parameters"] == record["spec"]["parameters"]
        assert record["weights"]["sha256"][:16] in result["fairness"]["init_source"]
        results[framework] = result
    return results


@pytest.mark.machine_sensitive  # the port's proof and the parity check, in floating point
@pytest.mark.slow  # a port, then the parity check and one short run in each framework
@pytest.mark.parametrize("kind", ["torch", "keras"])
def test_a_ported_network_compares_end_to_end_from_its_own_weights(tmp_path, kind):
    source = (f"{TORCH_MODELS}:ResidualNet" if kind == "torch"
              else _keras_file(tmp_path, "functional_residual"))
    out = tmp_path / "ported"
    ported = _port([kind, source, "--out", str(out), "--quiet"])
    assert ported.exit_code == 0, ported.output
    record = json.loads((out / "port.json").read_text())
    for framework, result in compare_ported(out, tmp_path / "runs", record).items():
        batchnorm = result["fairness"]["bn_momentum"]
        if kind == "keras":  # Keras' own BatchNorm settings, carried by the spec's layers
            assert batchnorm["torch_convention"] == pytest.approx(0.01)
            assert result["fairness"]["bn_epsilon"] == pytest.approx(1e-3)
            assert batchnorm["set_by"] == "the network's BatchNorm layers"
            assert batchnorm["as_set"] == pytest.approx(0.99 if framework == "tf" else 0.01)
        else:  # PyTorch's defaults are the run's
            assert batchnorm["set_by"] == "the run" and batchnorm["torch_convention"] == 0.1
