"""The built-in networks beyond LeNet and ResNet-9 (ResNet-18, VGG-11, MobileNetV2) and the spec's
layer kinds they need: both frameworks build each kind to the same function, `cnncompare models`
counts every network in both, a model sweep trains each one epoch in both and compares them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from compare.cli import cli
from compare.experiment import networks, specs, weights

# what each built-in network's source counts (compare.experiment.networks.Network.parameters)
PUBLISHED_PARAMETERS = {name: network.parameters for name, network in networks.MODELS.items()}


def _every_new_kind() -> specs.ModelSpec:
    """Small, on 16x16 images: ReLU6, a grouped strided convolution (Keras pads it
    explicitly), a residual block whose shortcut is average pooling while its branch starts
    with a ReLU, a depthwise strided convolution, a projection shortcut, global average
    pooling."""
    return specs.ModelSpec("kinds", (3, 16, 16), 10, (
        specs.Conv("c0", 3, 8, 3, padding=1), specs.ReLU("r0", 6.0),
        specs.Conv("grouped", 8, 16, 3, padding=1, groups=4, stride=2), specs.ReLU("r1"),
        specs.Residual("pooled", (specs.ReLU("r2"), specs.Conv("c2", 16, 16, 3, padding=1,
                                                                stride=2)),
                       (specs.AvgPool("sp", 2),)),
        specs.Residual("projected", (specs.Conv("dw", 16, 16, 3, padding=1, groups=16),
                                     specs.BatchNorm("bn", 16), specs.Conv("pw", 16, 24, 1)),
                       (specs.Conv("proj", 16, 24, 1, bias=False),
                        specs.BatchNorm("proj_bn", 24))),
        specs.GlobalAvgPool("gap"), specs.Flatten("flatten"), specs.Dense("fc", 24, 10)))


@pytest.mark.machine_sensitive  # float32 logits of two frameworks' kernels, within a tolerance
def test_every_new_layer_kind_computes_the_same_function_in_both_frameworks(tf_two_cpus):
    """The shared weights loaded into both builds give the same logits (eval mode, float32),
    and each build's exported weights are the shared ones back."""
    import torch

    from tf_impl import model as keras_model
    from torch_impl import model as torch_model
    spec = _every_new_kind()
    shared = weights.initial_weights(spec, 3)
    built = torch_model.build_model(spec)
    torch_model.load_weights(built, shared, spec)
    built.eval()
    keras = keras_model.build_model(spec)
    keras_model.load_weights(keras, shared, spec)
    images = np.random.default_rng(0).normal(size=(4, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        expected = built(torch.from_numpy(images)).numpy()
    found = np.asarray(keras(images.transpose(0, 2, 3, 1), training=False))
    np.testing.assert_allclose(found, expected, atol=1e-5)
    assert np.abs(expected).max() > 1e-2  # not agreeing on zeros
    for export in (torch_model.export_weights(built, spec),
                   keras_model.export_weights(keras, spec)):
        assert all(np.array_equal(export[name], shared[name]) for name in shared)
    assert (specs.parameter_count(spec) == torch_model.count_parameters(built)
            == keras_model.count_parameters(keras))
    # Keras' "same" would pad a strided convolution bottom/right only: padded explicitly
    assert keras.get_layer("grouped_pad") and keras.get_layer("c0").padding == "same"


def test_the_spec_names_the_layer_that_does_not_fit():
    with pytest.raises(ValueError, match="do not split into 3 groups"):
        specs.Conv("g", 8, 16, 3, groups=3)
    with pytest.raises(ValueError, match="ReLU caps at 6"):
        specs.ReLU("r", 5.0)
    mismatched = specs.ModelSpec("m", (8, 8, 8), 10, (specs.Residual(
        "block", (specs.Conv("c", 8, 8, 3, padding=1, stride=2),)),))
    with pytest.raises(ValueError, match=r"layer 1 \(Residual 'block'\): the branch gives "
                                         r"\(8, 4, 4\), the shortcut \(8, 8, 8\)"):
        specs.output_shapes(mismatched)
    too_small = specs.ModelSpec("s", (3, 4, 4), 10, (specs.Conv("c", 3, 8, 5),))
    with pytest.raises(ValueError, match=r"layer 1 \(Conv 'c'\): a 5x5 kernel does not fit a "
                                         r"4x4 input"):
        specs.output_shapes(too_small)


def test_the_networks_are_pytorch_cifars_and_say_where_their_flops_are():
    for name, count in PUBLISHED_PARAMETERS.items():
        assert specs.parameter_count(networks.get_spec(name)) == count, name
    shapes = specs.output_shapes(networks.get_spec("resnet18"))
    assert shapes["layer2_0"] == (128, 16, 16) and shapes["layer4_1"] == (512, 4, 4)
    assert shapes["pool"] == (512, 1, 1)  # 4x4 average pooling, as pytorch-cifar
    mobile = networks.get_spec("mobilenetv2")
    assert sum(isinstance(layer, specs.Conv) and layer.depthwise
               for layer in specs.walk(mobile.layers)) == 17  # one per inverted residual
    kinds = specs.flops_by_kind(mobile)
    assert list(kinds)[:2] == ["pointwise 1x1 conv", "depthwise 3x3 conv"]
    assert sum(kinds.values()) == pytest.approx(1.0)
    assert specs.train_flops(networks.get_spec("resnet18")) == pytest.approx(3.33e9, rel=0.01)


@pytest.mark.slow  # each framework builds every network in its own process
def test_models_lists_every_network_as_each_framework_builds_it():
    outcome = CliRunner().invoke(cli, ["models", "--json"])
    assert outcome.exit_code == 0, outcome.output
    rows = {row["model"]: row for row in json.loads(outcome.output)}
    assert list(rows) == list(networks.MODELS)
    for name, row in rows.items():
        assert row["parameters"] == PUBLISHED_PARAMETERS[name]
        assert row["parameters_built"] == {"tf": row["parameters"], "torch": row["parameters"]}
        assert row["source"] and row["published"] and row["recipe"]["batch_size"] > 0
    assert rows["mobilenetv2"]["recipe"]["target_accuracy"] == 0.94
    assert "pytorch-cifar" in rows["resnet18"]["source"]


@pytest.mark.machine_sensitive  # one epoch's float32 losses of two frameworks, within 2e-3
@pytest.mark.slow  # three big networks, one small epoch each, in both frameworks
def test_a_model_sweep_trains_each_network_in_both_and_gives_the_framework_ratio(tmp_path):
    out = tmp_path / "sweep"
    outcome = CliRunner().invoke(cli, [
        "sweep", "--dataset", "synthetic", "--synthetic-size", "32", "--batch-size", "16",
        "--epochs", "1", "--precision", "fp32", "--device", "cpu",
        "--vary", "model=resnet18,vgg11,mobilenetv2", "--quiet", "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert len(rows) == 6 and all(r["status"] == "completed" for r in rows)
    losses = {}
    for row in rows:
        result = json.loads(Path(row["path"]).read_text())
        assert result["model"]["parameters"] == PUBLISHED_PARAMETERS[row["settings"]["model"]]
        losses.setdefault(row["settings"]["model"], []).append(result["epochs"][0]["train_loss"])
    for model, (a, b) in losses.items():  # the same weights and batches: the same epoch
        assert a == pytest.approx(b, rel=2e-3), model
    page = (out / "sweep.md").read_text()
    assert "## TensorFlow against PyTorch per setting" in page
    assert "| model=mobilenetv2 |" in page and "depthwise 3x3 conv" in page


REFUSED = {  # the user's file, and the one line that refuses it
    "unknown_kind.py": ("from compare.experiment import specs\n"
                        "class Swish:\n    name = 'swish'\n    sublayers = ()\n"
                        "spec = specs.ModelSpec('u', (3, 32, 32), 10, (\n"
                        "    specs.Conv('c', 3, 8, 3), Swish(), specs.Flatten('f'),\n"
                        "    specs.Dense('fc', 8 * 30 * 30, 10)))\n",
                        "layer 2 ('swish'): Swish is not a spec layer kind"),
    "misfit.py": ("from compare.experiment import specs\n"
                  "def spec(num_classes):\n"
                  "    return specs.ModelSpec('m', (3, 32, 32), num_classes, (\n"
                  "        specs.Conv('c1', 3, 8, 3, padding=1), specs.MaxPool('p'),\n"
                  "        specs.Conv('c2', 16, 8, 3), specs.Flatten('f'),\n"
                  "        specs.Dense('fc', 8, num_classes)))\n",
                  "layer 3 (Conv 'c2'): expects 16 channels, gets (8, 16, 16)"),
    "broken.py": ("from compare.experiment import specs\n"
                  "def spec(num_classes):\n    return 1 / 0\n",
                  "broken.py:spec did not build: ZeroDivisionError: division by zero"),
    "classes.py": ("from compare.experiment import specs\n"
                   "spec = specs.ModelSpec('k', (3, 32, 32), 10, (specs.Flatten('f'),\n"
                   "    specs.Dense('fc', 3 * 32 * 32, 7)))\n",
                   "the last layer gives (7,) per image, not one score for each of the 10"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_users_network_that_cannot_be_built_gets_one_line_and_exit_2(tmp_path, name):
    source, said = REFUSED[name]
    (tmp_path / name).write_text(source)
    outcome = CliRunner().invoke(cli, ["compare", "--model", str(tmp_path / name), "--dataset",
                                       "synthetic", "--out", str(tmp_path / "out")])
    assert outcome.exit_code == 2, outcome.output
    lines = [line for line in outcome.output.splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0], outcome.output
    assert "Traceback" not in outcome.output and not (tmp_path / "out").exists()


def test_the_example_network_loads_by_file_and_by_module_path():
    from_file = networks.get_spec("examples/my_cnn.py")
    assert from_file == networks.get_spec("examples/my_cnn.py:spec")
    assert from_file.name == "my_cnn" and specs.parameter_count(from_file) == 32_874
    assert networks.get_spec("examples/my_cnn.py", num_classes=5).layers[-1].out_features == 5
    assert networks.get_spec("compare.experiment.networks:resnet18") == networks.get_spec(
        "resnet18")


@pytest.mark.slow  # the parity check and one short run in each framework
def test_a_users_own_network_compares_end_to_end(tmp_path):
    out = tmp_path / "out"
    outcome = CliRunner().invoke(cli, ["compare", "--model", "examples/my_cnn.py", "--dataset",
                                       "synthetic", "--synthetic-size", "64", "--epochs", "1",
                                       "--seeds", "1", "--no-own-loops", "--quiet",
                                       "--out", str(out)])
    assert outcome.exit_code == 0, outcome.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parity"]["passed"]
    for framework in ("tf", "torch"):
        result = json.loads(next((out / "runs").glob(f"{framework}-*/result.json")).read_text())
        assert result["model"]["name"] == "my_cnn" and result["model"]["parameters"] == 32_874
        assert result["summary"]["status"] == "completed"
