"""`cnncompare port keras`: what Keras Applications' classifiers are made of, read through
Keras' public API (a functional config and its operations) into the spec's kinds and proven
equal in float64; Keras Applications models ported end to end; the Keras twin of a spec of
every kind read back as that spec; what the reader does not read refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import patience

from compare.cli.app import cli
from compare.experiment import networks, parity, specs
from compare.process import runner

pytestmark = pytest.mark.usefixtures("forked_frameworks")

S = specs


def _port(source: Path, out: Path):
    return CliRunner().invoke(cli, ["port", "keras", str(source), "--out", str(out)])


def _proven(out: Path) -> tuple[dict, specs.ModelSpec]:
    """port.json and the spec of a port whose proof passed, within float64's limits with a
    100x margin (a wrong layout or formula is off by 1e-3 or more)."""
    record = json.loads((out / "port.json").read_text())
    proof = record["proof"]
    assert proof["passed"] and "float64" in proof["method"], proof
    assert proof["tolerances"] == {k: getattr(parity.FLOAT64, k) for k in proof["tolerances"]}
    assert all(proof[k] < limit / 100 for k, limit in proof["tolerances"].items()), proof
    assert record["source"]["parameters"] == record["spec"]["parameters"]
    spec = networks.load_reference(str(out / "spec.py"), record["spec"]["num_classes"])
    return record, spec


def _every_layer(layers):
    for layer in layers:
        yield layer
        yield from _every_layer(layer.sublayers)


def _kinds_model():
    """A functional model of what the Applications use: preprocessing, 'same' padding at
    stride 2, padding before a convolution, the activation layers and names, 'same' pooling,
    Dense on a map, LayerNormalization, a squeeze-and-excitation gate written with raw
    operations (EfficientNet's Reshape, MobileNetV3's relu6(x + 3) * (1/6)), stochastic
    depth, a residual `x + y`, concatenation, a three-way add and a final softmax."""
    import keras
    from keras import layers
    images = keras.Input((16, 16, 3))
    x = layers.Rescaling(1 / 127.5, -1.0, name="rescale")(images)
    # float32's values: both twins compute an Affine with those (Keras' Rescaling casts)
    x = layers.Normalization(mean=[0.5, 0.25, 1.5], variance=[1.0, 4.0, 0.25], name="norm")(x)
    x = layers.Conv2D(8, 3, strides=2, padding="same", name="down")(x)
    x = layers.LeakyReLU(0.1, name="leaky")(x)
    x = layers.ZeroPadding2D(1, name="pad")(x)
    x = layers.DepthwiseConv2D(3, name="dw")(x)
    x = layers.ReLU(negative_slope=0.05, name="relu_leaky")(x)
    x = layers.ELU(0.5, name="elu")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="maxpool")(x)
    x = layers.AveragePooling2D(3, strides=1, padding="same", name="avgpool")(x)
    # (not gelu: Keras' own kernel is 1e-9 off its formula in float64, the proof's limit)
    y = layers.Dense(16, activation="relu", name="expand")(x)
    y = layers.LayerNormalization(epsilon=1e-6, name="ln")(layers.Dense(8, name="project")(y))
    gate = layers.Reshape((1, 1, 8), name="unflatten")(
        layers.GlobalAveragePooling2D(name="squeeze")(y))
    gate = layers.Conv2D(8, 1, name="excite")(gate)
    gate = layers.ReLU(6.0, name="gate_relu6")(gate + 3.0) * (1.0 / 6.0)
    y = layers.Multiply(name="gate")([y, gate])
    x = x + layers.Dropout(0.3, noise_shape=(None, 1, 1, 1), name="drop_path")(y)
    x = layers.Concatenate(name="cat")([layers.Activation(name, name=f"act_{name}")(x)
                                        for name in ("swish", "hard_silu", "tanh")])
    x = layers.Conv2D(8, 1, activation="sigmoid", name="mix")(x)
    x = layers.Add(name="sum3")([layers.Activation(name, name=f"act_{name}")(x)
                                 for name in ("hard_sigmoid", "elu", "relu6")])
    x = layers.Dropout(0.2, name="drop")(layers.GlobalMaxPooling2D(name="gmax")(x))
    return keras.Model(images, layers.Dense(10, activation="softmax", name="probs")(x))


@pytest.mark.machine_sensitive  # a proof in floating point: its figures depend on the kernels
def test_each_reader_kind_is_read_and_proven(tmp_path):
    _kinds_model().save(tmp_path / "kinds.keras")
    outcome = _port(tmp_path / "kinds.keras", tmp_path / "out")
    assert outcome.exit_code == 0, outcome.output
    record, spec = _proven(tmp_path / "out")
    found = {layer.name: layer for layer in _every_layer(spec.layers)}
    kinds = {type(layer) for layer in found.values()}
    assert kinds >= {S.Affine, S.Scale, S.ZeroPad, S.Conv, S.Activation, S.ReLU, S.MaxPool,
                     S.AvgPool, S.LayerNorm, S.GlobalAvgPool, S.GlobalMaxPool, S.Merge,
                     S.Residual, S.Dropout, S.Dense}
    assert found["down_pad"] == S.ZeroPad("down_pad", 0, 1, 0, 1)  # TensorFlow's odd pixel
    assert found["dw"].padding == 1 and "pad" not in found  # an even padding taken in
    # 'same' on 8x8 pads the bottom and right only: the spec's ceil mode takes that window
    assert found["maxpool"] == S.MaxPool("maxpool", 3, 2, 0, ceil_mode=True)
    assert found["avgpool"] == S.AvgPool("avgpool", 3, 1, 1, count_pad=False)
    assert found["expand"] == S.Conv("expand", 8, 16, 1)  # a Dense on a map
    assert found["expand_activation"] == S.ReLU("expand_activation")
    # TensorFlow's LeakyRelu takes its slope as a float32 attribute
    assert found["relu_leaky"] == S.Activation("relu_leaky", "leaky_relu",
                                               float(np.float32(0.05)))
    assert found["drop_path"] == S.Dropout("drop_path", 0.3, per_sample=True)
    assert found["act_hard_sigmoid"].formula == "hard_sigmoid"  # Keras 3's relu6(x + 3) / 6
    assert found["act_hard_silu"].formula == "hard_swish"
    assert found["gate"].op == "multiply" and found["cat"].op == "concat"
    assert found["sum3"].op == "add" and len(found["sum3"].branches) == 3
    assert found["norm"] == S.Affine("norm", (1.0, 0.5, 2.0), (-0.5, -0.125, -3.0))
    assert isinstance(spec.layers[-1], S.Dense)  # logits: the softmax left out, and said so
    assert ["probs" in line and "softmax" in line for line in record["source"]["left_out"]] \
        == [True]
    assert record["dropout"]["rates"] == {"drop_path": 0.3, "drop": 0.2}


@pytest.mark.machine_sensitive  # a proof in floating point: its figures depend on the kernels
# Whole Applications (8-25 s each under pytest -n 2) in the heavy tier: what they are made of
# is test_each_reader_kind_is_read_and_proven's model, ported and proven in the quick tier
@pytest.mark.parametrize("application, kwargs, merges", [
    pytest.param("MobileNetV3Small", {"alpha": 0.75}, {"multiply"},  # its adds: residuals
                 marks=pytest.mark.slow),
    pytest.param("MobileNetV2", {"alpha": 0.35}, set(), marks=pytest.mark.slow),
])
def test_a_keras_application_ports_with_its_proof(tmp_path, application, kwargs, merges):
    import keras
    model = getattr(keras.applications, application)(
        weights=None, input_shape=(32, 32, 3), classes=10, **kwargs)
    model.save(tmp_path / "app.keras")
    outcome = _port(tmp_path / "app.keras", tmp_path / "out")
    assert outcome.exit_code == 0, outcome.output
    record, spec = _proven(tmp_path / "out")
    assert record["source"]["parameters"] == sum(
        int(np.prod(w.shape)) for w in model.trainable_weights)
    assert {layer.op for layer in _every_layer(spec.layers)
            if isinstance(layer, S.Merge)} == merges
    assert any(isinstance(layer, S.Residual) for layer in _every_layer(spec.layers))
    assert len(record["source"]["left_out"]) == 1  # the final softmax


def _every_kind_spec() -> specs.ModelSpec:
    """A spec of every kind whose Keras twin reads back as itself: paddings the twin writes
    as 'same' or as a padding before the convolution, the pools it writes in Keras' own and
    its own layers, and an Affine whose values are float32's (Keras' Rescaling computes
    with those)."""
    c = 6
    gate = (S.GlobalAvgPool("se_pool"), S.Conv("se_fc", c, c, 1),
            S.Activation("se_gate", "hard_sigmoid"))
    layers = (
        S.Scale("scale", 0.5), S.Affine("affine", (0.5, 0.75, 1.25), (0.25,)),
        S.Conv("stem", 3, c, 3, padding=1), S.BatchNorm("bn", c, 1e-3, 0.01),
        S.ReLU("relu"), S.Conv("down", c, c, 3, padding=1, stride=2, groups=2),
        S.LayerNorm("ln", c, 1e-6), S.Activation("leaky", "leaky_relu", 0.2),
        S.ZeroPad("pad", 0, 1, 0, 1), S.MaxPool("max", 3, 2, 1, ceil_mode=True),
        S.AvgPool("avg", 3, 1, 1, count_pad=False), S.MaxPool("max2", 2),
        S.ChannelScale("layer_scale", c), S.Dropout("drop_path", 0.1, per_sample=True),
        S.Residual("res", (S.Conv("branch", c, c, 3, 1), S.ReLU("branch_relu6", 6.0))),
        S.Merge("se", "multiply", ((), gate)),
        S.Merge("cat", "concat", ((), (S.Conv("grow", c, 4, 1),))),
        S.Merge("sum3", "add", ((S.Activation("gelu", "gelu"),),
                                (S.Activation("elu", "elu", 1.0),), ())),
        S.AdaptivePool("adaptive", (3, 2)), S.GlobalMaxPool("gmax"), S.Flatten("flat"),
        S.Dropout("drop", 0.2), S.Dense("logits", c + 4, 10))
    return S.ModelSpec("every_kind", (3, 17, 17), 10, (*layers[:19], S.AvgPool("avg2", 2),
                                                       *layers[19:]))


def test_the_keras_twin_of_a_spec_of_every_kind_reads_back_as_the_spec(tmp_path):
    from tf_impl import model as keras_model
    spec = _every_kind_spec()
    assert {type(layer) for layer in _every_layer(spec.layers)} == set(S.KINDS)
    keras_model.build_model(spec).save(tmp_path / "twin.keras")
    # TensorFlow's reader in a child of the module's fork server (the one the ports use)
    read = runner.framework_call("tf", "tf_impl.port", [
        "read", str(tmp_path / "twin.keras"), "--dir", str(tmp_path), "--name", spec.name],
        timeout=patience(300))
    assert read.returncode == 0, read.stdout
    assert networks.load_reference(str(tmp_path / "spec.py"), 10) == spec


def test_what_the_reader_does_not_read_is_one_line_naming_the_layer(tmp_path):
    import keras
    from keras import layers
    images = keras.Input((16, 16, 3))
    x = keras.ops.square(layers.Conv2D(4, 3, name="conv")(images))
    model = keras.Model(images, layers.Dense(10)(layers.GlobalAveragePooling2D()(x)))
    model.save(tmp_path / "square.keras")
    outcome = _port(tmp_path / "square.keras", tmp_path / "out")
    assert outcome.exit_code == 2, outcome.output
    line = outcome.output.strip().splitlines()[-1]
    assert "(Square): the operation Square" in line and "Traceback" not in outcome.output
    for read in ("Conv2D", "LayerNormalization", "Concatenate", "ops.Add"):  # its tables
        assert read in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["square.keras"]
