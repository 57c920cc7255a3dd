"""`cnncompare port torch` on torchvision's classifiers and the layer kinds they use: each kind
read and its PyTorch twin proven equal in process; small torchvision networks and a network
from a function ported end to end, twin in Keras; a twin read back as its own spec; what the
spec cannot express (ShuffleNet's channel shuffle) refused in one line with nothing written."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from compare.cli.app import cli
from compare.experiment import parity, porting, specs
from compare.experiment.specs import (
    Activation,
    AdaptivePool,
    Affine,
    AvgPool,
    BatchNorm,
    ChannelScale,
    Conv,
    Dense,
    Dropout,
    Flatten,
    GlobalAvgPool,
    GlobalMaxPool,
    LayerNorm,
    MaxPool,
    Merge,
    ModelSpec,
    ReLU,
    Residual,
    Scale,
    ZeroPad,
)

pytestmark = pytest.mark.usefixtures("forked_frameworks")

TORCH_MODELS = Path(__file__).parent / "port_torch_models.py"


def _unnamed(layers: tuple[specs.LayerSpec, ...]) -> tuple[specs.LayerSpec, ...]:
    """`layers` with every name blank, blocks' own layers too: what a layer computes."""
    found = []
    for layer in layers:
        if isinstance(layer, Residual):
            layer = dataclasses.replace(layer, layers=_unnamed(layer.layers),
                                        shortcut=_unnamed(layer.shortcut))
        elif isinstance(layer, Merge):
            layer = dataclasses.replace(layer, branches=tuple(map(_unnamed, layer.branches)))
        found.append(dataclasses.replace(layer, name=""))
    return tuple(found)


def _proven(source: nn.Module, input_shape=(3, 8, 8)) -> tuple[porting.Reading, dict]:
    """`source` read, and the proof of its PyTorch twin (float64, four images) as
    `cnncompare port` runs it: dropout off in both."""
    from torch_impl import model as built
    from torch_impl import port
    reading = port.read(source, input_shape, "kinds")
    images, labels = porting.proof_batch(reading.spec.input_shape, reading.spec.num_classes, 4)
    found = port.source_outputs(source, reading, images, labels)
    twin = port.build_twin(specs.without_dropout(reading.spec))
    built.load_weights(twin, reading.weights, reading.spec)
    logits, loss, grads = port.outputs(twin, images, labels)
    theirs = {"logits": logits, "loss": loss, **{
        f"grad/{name}": value
        for name, value in built.export_gradients(twin, grads, reading.spec).items()}}
    return reading, porting.compare_outputs(found, theirs)


def _classified(*body: nn.Module, input_shape=(3, 8, 8)) -> nn.Module:
    """`body` then a flatten and a dense layer to 10 classes, its weights from a fixed seed."""
    torch.manual_seed(7)
    features = nn.Sequential(*body)
    with torch.no_grad():
        size = features.eval()(torch.zeros(1, *input_shape)).numel()
    return nn.Sequential(features, nn.Flatten(), nn.Linear(size, 10)).train()


class Functional(nn.Module):
    """The functional and tensor-method forms torchvision's forwards use."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6 * 4, 10)

    def forward(self, x):
        x = F.elu(torch.tanh(self.conv(x)), 0.7).sigmoid() * 0.5
        x = F.max_pool2d(F.hardsigmoid(F.gelu(x, approximate="tanh")), 3, 2, 1, ceil_mode=True)
        x = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 2), 1))


def _stochastic_depth(p: float, mode: str) -> nn.Module:
    from torchvision.ops import StochasticDepth
    return StochasticDepth(p, mode)


def _layer_norm_2d(channels: int) -> nn.Module:
    from torchvision.models.convnext import LayerNorm2d
    return LayerNorm2d(channels, eps=1e-6)


def _conv(cin=3, cout=6):
    return nn.Conv2d(cin, cout, 3, padding=1)


@pytest.mark.machine_sensitive  # a proof in floating point: its figures depend on the kernels
@pytest.mark.parametrize("build, read_as", [
    (lambda: _classified(_conv(), nn.Sigmoid(), nn.Tanh(), nn.SiLU(), nn.GELU(),
                         nn.GELU(approximate="tanh"), nn.Hardsigmoid(), nn.Hardswish(),
                         nn.LeakyReLU(0.2), nn.ELU(0.7)),
     [Activation("", f) for f in ("sigmoid", "tanh", "silu", "gelu", "gelu_tanh",
                                  "hard_sigmoid", "hard_swish")]
     + [Activation("", "leaky_relu", 0.2), Activation("", "elu", 0.7)]),
    (lambda: _classified(_conv(), nn.MaxPool2d(3, 2, 1, ceil_mode=True),
                         nn.AvgPool2d(3, 1, 1, count_include_pad=False), nn.ZeroPad2d((1, 2, 0, 3)),
                         nn.AdaptiveMaxPool2d((2, 3)), input_shape=(3, 9, 9)),
     [MaxPool("", 3, 2, 1, True), AvgPool("", 3, 1, 1, count_pad=False), ZeroPad("", 0, 3, 1, 2),
      AdaptivePool("", (2, 3), "max")]),
    (lambda: _classified(_conv(), nn.Dropout(0.4), _stochastic_depth(0.2, "row"),
                         _layer_norm_2d(6), nn.AdaptiveAvgPool2d(3)),
     [Dropout("", 0.4), Dropout("", 0.2, per_sample=True), LayerNorm("", 6, 1e-6),
      AdaptivePool("", (3, 3), "avg")]),
    (Functional,
     [Activation("", "tanh"), Activation("", "elu", 0.7), Activation("", "sigmoid"),
      Scale("", 0.5), Activation("", "gelu_tanh"), Activation("", "hard_sigmoid"),
      MaxPool("", 3, 2, 1, True), AvgPool("", 3, 1, 1, count_pad=False)]),
])
def test_each_reader_kind_reads_as_its_spec_layer_and_its_twin_computes_the_same(build,
                                                                                 read_as):
    reading, proof = _proven(build())
    assert proof["passed"], proof
    assert proof["logits_max_abs_diff"] < 1e-12 and proof["grad_max_rel_diff"] < 1e-9
    leaves = _unnamed(tuple(specs.walk(reading.spec.layers)))
    assert [layer for layer in leaves if layer in read_as] == read_as


def _every_kind() -> ModelSpec:
    """A spec with each kind torch_impl/model.py builds as a module of its own."""
    return ModelSpec("every_kind", (3, 12, 12), 10, (
        Affine("norm", (0.5,), (0.25, -0.5, 0.75)),
        ZeroPad("pad", 1, 0, 0, 1),
        Conv("conv", 3, 8, 3, padding=1),
        BatchNorm("bn", 8, 1e-3, 0.01),
        Activation("act", "hard_swish"),
        Residual("res", (Conv("dw", 8, 8, 3, padding=1, groups=8), LayerNorm("ln", 8, 1e-6),
                         Conv("pw", 8, 8, 1), Activation("gelu", "gelu"),
                         ChannelScale("ls", 8), Dropout("sd", 0.2, per_sample=True))),
        Merge("se", "multiply", ((GlobalAvgPool("sq"), Conv("fc1", 8, 4, 1), ReLU("r"),
                                  Conv("fc2", 4, 8, 1), Activation("gate", "hard_sigmoid_0.2")),
                                 ())),
        Merge("cat", "concat", ((MaxPool("mp", 3, 1, 1),), (AvgPool("ap", 3, 1, 1),),
                                (Activation("lr", "leaky_relu", 0.2),))),
        MaxPool("down", 2),
        AdaptivePool("ad", (3, 3), "max"),
        Activation("elu", "elu", 0.5),
        Scale("half", 0.5),
        GlobalMaxPool("gmp"),
        Flatten("flat"),
        Dropout("drop", 0.3),
        Dense("fc", 24, 10),
    ))


@pytest.mark.machine_sensitive
def test_a_pytorch_twin_reads_back_as_its_spec_with_its_weights():
    from torch_impl import model as built
    spec = _every_kind()
    torch.manual_seed(3)
    twin = built.build_model(spec)
    reading, proof = _proven(twin, spec.input_shape)
    assert _unnamed(reading.spec.layers) == _unnamed(spec.layers)
    assert proof["passed"] and proof["logits_max_abs_diff"] < 1e-12, proof
    exported = built.export_weights(twin, spec)
    assert len(reading.weights) == len(exported)
    for mine, theirs in zip(reading.weights.values(), exported.values()):
        np.testing.assert_array_equal(mine, theirs)


def test_stochastic_depth_in_batch_mode_and_a_permute_elsewhere_are_refused():
    from torch_impl import port
    with pytest.raises(porting.Refused, match="stochastic depth in 'batch' mode"):
        port.read(_classified(_conv(), _stochastic_depth(0.1, "batch")), (3, 8, 8), "x")

    class Transposed(nn.Module):
        def forward(self, x):
            return x.permute(0, 1, 3, 2).flatten(1)
    with pytest.raises(porting.Refused, match=r"permutes a channels-first tensor by \(0, 1"):
        port.read(Transposed(), (3, 8, 8), "x")


def _port(tmp_path: Path, source: str, *args: str) -> dict:
    out = tmp_path / "ported"
    outcome = CliRunner().invoke(cli, ["port", "torch", source, "--out", str(out), *args])
    assert outcome.exit_code == 0, outcome.output
    assert "source and twin equal" in outcome.output
    record = json.loads((out / "port.json").read_text())
    proof = record["proof"]
    assert proof["passed"] and "float64" in proof["method"]
    assert proof["tolerances"] == {k: getattr(parity.FLOAT64, k) for k in proof["tolerances"]}
    assert (record["source"]["parameters"] == record["spec"]["parameters"]
            == record["twin"]["parameters"])
    return record


@pytest.mark.machine_sensitive
@pytest.mark.parametrize("name, parameters, dropout", [
    # 9-13 s each under pytest -n 2: the heavy tier; the quick tier ports a function from a
    # file (below) by the same path, and tests/test_port_zoo.py ports both too
    pytest.param("squeezenet1_1", 727_626, {"classifier_0": 0.5}, marks=pytest.mark.slow),
    pytest.param("mobilenet_v3_small", 1_528_106, {"classifier_2": 0.2},
                 marks=pytest.mark.slow),
])
def test_a_torchvision_classifier_ports_by_its_function(tmp_path, name, parameters, dropout):
    record = _port(tmp_path, f"torchvision.models:{name}", "--kwargs", '{"num_classes": 10}',
                   "--input-shape", "3,32,32")
    assert record["source"]["parameters"] == parameters
    assert record["dropout"]["rates"] == dropout and "rate 0" in record["dropout"]["proof"]


@pytest.mark.machine_sensitive
def test_a_network_from_a_function_in_a_file_ports_with_its_reshaped_weights(tmp_path):
    import importlib.util

    from compare.experiment import networks, weights
    record = _port(tmp_path, f"{TORCH_MODELS}:gated_net")
    spec = networks.load_reference(str(tmp_path / "ported" / "spec.py"), 10)
    ported = weights.read_file(tmp_path / "ported" / "weights.npz", spec)
    found = importlib.util.spec_from_file_location("port_torch_models", TORCH_MODELS)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    source = module.gated_net()  # the same seed: the same weights
    layers = record["source"]["layers"]  # spec layer -> the source's module or parameter
    block = source.block
    by_source = {where: name for name, where in layers.items()}
    np.testing.assert_array_equal(ported[f"{by_source['block.layer_scale']}.weight"],
                                  block.layer_scale.detach().numpy().reshape(-1))
    np.testing.assert_array_equal(ported[f"{by_source['block.up']}.weight"],
                                  block.up.weight.detach().numpy()[:, :, None, None])
    kinds = {type(layer) for layer in specs.walk(spec.layers)}
    assert {LayerNorm, ChannelScale, Dropout, Activation} <= kinds
    assert list(record["dropout"]["rates"].values()) == [0.3]


def test_shufflenet_is_refused_in_one_line_with_nothing_written(tmp_path):
    out = tmp_path / "ported"
    outcome = CliRunner().invoke(cli, ["port", "torch", "torchvision.models:shufflenet_v2_x0_5",
                                       "--kwargs", '{"num_classes": 10}', "--out", str(out)])
    assert outcome.exit_code == 2, outcome.output
    line = outcome.output.strip().splitlines()[-1]
    assert "view in stage2.0 (InvertedResidual)" in line and "channel shuffle" in line
    assert "Traceback" not in outcome.output and list(tmp_path.iterdir()) == []
