"""Every layer kind of the spec (compare.experiment.specs.KINDS): one builder in each twin,
the same function in both (logits in evaluation, gradients of one training step), the
activations' formulas as declared, dropout that drops in training, and docs/models.md's
table written from the kinds."""

from __future__ import annotations

import numpy as np
import pytest

from compare.cli import docs as cli_docs
from compare.experiment import porting, specs, weights

S = specs
C = 6  # channels of each case's first map


def _gated(name: str) -> tuple:
    return (S.GlobalAvgPool(f"{name}_pool"), S.Conv(f"{name}_fc", C, C, 1),
            S.Activation(f"{name}_gate", "sigmoid"))


# Each kind, in a small network that needs it, on (C, 13, 13) maps: odd, so padding, ceil
# mode and adaptive bins all have uneven edges.
CASES: dict[type, tuple] = {
    S.Conv: (S.Conv("conv", C, C, 3, padding=1, stride=2, groups=2),),
    S.BatchNorm: (S.BatchNorm("bn", C, epsilon=1e-3, momentum=0.01),),
    S.LayerNorm: (S.LayerNorm("ln", C, 1e-6),),
    S.ReLU: (S.ReLU("relu6", 6.0),),
    S.Activation: tuple(S.Activation(f"act_{i}", name, 0.2 if name in S.FORMULAS and name
                                     in ("leaky_relu", "elu") else None)
                        for i, name in enumerate(S.FORMULAS)),
    S.MaxPool: (S.MaxPool("max", 3, 2, 1), S.MaxPool("max_ceil", 3, 2, 0, ceil_mode=True)),
    S.AvgPool: (S.AvgPool("avg", 3, 2, 1, ceil_mode=True, count_pad=False),
                S.AvgPool("avg_counted", 3, 1, 1)),
    S.AdaptivePool: (S.AdaptivePool("adaptive", (5, 3)), S.AdaptivePool("up", (7, 7), "max")),
    S.GlobalMaxPool: (S.GlobalMaxPool("gmax"),),
    S.GlobalAvgPool: (S.GlobalAvgPool("gavg"),),
    S.ZeroPad: (S.ZeroPad("pad", 0, 1, 2, 1), S.Conv("after_pad", C, C, 3, stride=2)),
    S.Flatten: (S.Flatten("flat"),),
    S.Dense: (S.Flatten("flat"), S.Dense("dense", C * 13 * 13, 10)),
    S.Dropout: (S.Dropout("drop", 0.5), S.Conv("c", C, C, 1),
                S.Dropout("depth", 0.5, per_sample=True)),
    S.Scale: (S.Scale("scale", 0.5),),
    S.Affine: (S.Affine("affine", tuple(np.linspace(0.5, 2.0, C)), (0.25,)),),
    S.ChannelScale: (S.ChannelScale("layer_scale", C),),
    S.Residual: (S.Residual("res", (S.Conv("branch", C, C, 3, 1),),
                            (S.Conv("proj", C, C, 1, bias=False),)),),
    S.Merge: (S.Merge("cat", "concat", ((), (S.Conv("grow", C, 4, 1),))),
              S.Conv("back", C + 4, C, 1),
              S.Merge("se", "multiply", ((), _gated("se"))),
              S.Merge("sum3", "add", ((), (S.Conv("b1", C, C, 1),), (S.Conv("b2", C, C, 1),)))),
}


def _spec(kind: type) -> specs.ModelSpec:
    """A conv, the kind's layers, then a classifier of 10 classes."""
    head = (S.Conv("stem", 3, C, 3, padding=1),) + CASES[kind]
    shape = specs.output_shapes(specs.ModelSpec("probe", (3, 13, 13), 0, head))[head[-1].name]
    tail = ((S.Dense("logits", shape[0], 10),) if len(shape) == 1 else
            (S.GlobalAvgPool("head_pool"), S.Flatten("head_flat"), S.Dense("logits", shape[0], 10)))
    return specs.ModelSpec(kind.__name__, (3, 13, 13), 10, head + tail)


def _shared_weights(spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """The spec's initial weights, the scales and shifts that start at 1 and 0 drawn too."""
    found = weights.initial_weights(spec, 5)
    rng = np.random.default_rng(6)
    for name in found:
        if name.endswith((".weight", ".bias", "running_mean")) and found[name].ndim == 1:
            found[name] = rng.uniform(0.5, 1.5, found[name].shape).astype(np.float32)
        if name.endswith("running_var"):
            found[name] = rng.uniform(0.5, 2.0, found[name].shape).astype(np.float32)
    return found


def test_every_kind_has_a_case_and_one_builder_in_each_twin(tf_two_cpus):
    from tf_impl import model as keras_model
    from torch_impl import model as torch_model
    assert set(CASES) == set(specs.KINDS)
    assert set(keras_model.KERAS_LAYERS) == set(specs.KINDS) == set(torch_model.TORCH_LAYERS)
    assert set(keras_model.ACTIVATIONS) == set(specs.FORMULAS) == set(torch_model.ACTIVATIONS)


def test_the_kinds_table_in_models_md_is_written_from_the_kinds():
    text = cli_docs.MODELS_PAGE.read_text()
    assert cli_docs.models_page(text) == text, (
        "docs/models.md's layer kinds are stale: run python -m compare.cli.docs")
    assert all(f"`{kind.__name__}(" in text for kind in specs.KINDS)


def _outputs(spec: specs.ModelSpec, shared: dict, images: np.ndarray, labels: np.ndarray):
    """Each twin's (eval logits, loss and canonical gradients of one training step)."""
    import keras
    import tensorflow as tf
    import torch

    from tf_impl import model as keras_model
    from torch_impl import model as torch_model
    found = {}
    built = torch_model.build_model(spec)
    torch_model.load_weights(built, shared, spec)
    x = torch.from_numpy(images)
    with torch.no_grad():
        logits = built.eval()(x).numpy()
    loss = torch.nn.functional.cross_entropy(built.train()(x), torch.from_numpy(labels))
    loss.backward()
    found["torch"] = (logits, loss.item(), torch_model.export_gradients(
        built, {n: p.grad for n, p in built.named_parameters()}, spec))
    model = keras_model.build_model(spec)
    keras_model.load_weights(model, shared, spec)
    nhwc = images.transpose(0, 2, 3, 1)
    logits = np.asarray(model(nhwc, training=False))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, model(nhwc, training=True), from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    found["tf"] = (logits, float(loss), keras_model.export_gradients(
        model, {v.path: np.asarray(g) for v, g in zip(model.trainable_variables, grads)},
        spec))
    return found


@pytest.mark.machine_sensitive  # float32 kernels of two frameworks, within a tolerance
@pytest.mark.parametrize("kind", specs.KINDS, ids=lambda kind: kind.__name__)
def test_each_kind_is_the_same_function_in_both_twins(tf_two_cpus, kind):
    """Float32 on the CPU, the shared weights: eval logits within 1e-4 of each other, the loss
    within 1e-5 and every gradient within 1e-3 of its norm (dropout at rate 0: one function,
    not two frameworks' masks; the masks are the last test's)."""
    spec = specs.without_dropout(_spec(kind))
    specs.check(spec)
    rng = np.random.default_rng(7)
    images = rng.standard_normal((4, 3, 13, 13)).astype(np.float32)
    labels = np.arange(4) % 10
    found = _outputs(spec, _shared_weights(spec), images, labels)
    (tl, tloss, tgrads), (kl, kloss, kgrads) = found["torch"], found["tf"]
    assert np.abs(tl).max() > 1e-2  # not agreeing on zeros
    np.testing.assert_allclose(kl, tl, atol=1e-4)
    assert abs(kloss - tloss) < 1e-5
    assert set(kgrads) == set(tgrads) == {n for n in specs.parameter_shapes(spec)
                                          if specs.trainable(n)}
    # a gradient that is zero in exact arithmetic (a bias before BatchNorm) is rounding
    # alone: measured against a hundredth of the largest gradient's norm
    floor = 1e-2 * max(float(np.linalg.norm(value)) for value in tgrads.values())
    for name, value in tgrads.items():
        scale = max(float(np.linalg.norm(value)), floor)
        assert float(np.linalg.norm(kgrads[name] - value)) / scale < 1e-3, name


@pytest.mark.machine_sensitive  # float64 formulas against numpy, within 1e-12
@pytest.mark.parametrize("formula", list(specs.FORMULAS))
def test_each_activation_computes_its_declared_formula(tf_two_cpus, formula):
    import keras
    import torch

    from tf_impl import model as keras_model
    from torch_impl import model as torch_model
    alpha = 0.2 if formula in specs.elementwise.NEEDS_ALPHA else None
    layer = S.Activation("a", formula, alpha)
    x = np.linspace(-6.0, 6.0, 241)  # steps of 0.05, through every kink
    expected = layer.reference(x)
    found_torch = torch_model.ACTIVATIONS[formula](alpha)(torch.from_numpy(x)).numpy()
    found_keras = np.asarray(keras_model.ACTIVATIONS[formula](
        keras.ops.convert_to_tensor(x, "float64"), alpha))
    np.testing.assert_allclose(found_torch, expected, atol=1e-12)
    np.testing.assert_allclose(found_keras, expected, atol=1e-12)


def test_dropout_drops_in_training_only_in_both_twins(tf_two_cpus):
    """Each twin zeroes about `rate` of the values (per value, or whole samples) in training,
    scales the kept by 1 / (1 - rate), and is the identity in evaluation."""
    import torch

    from tf_impl import model as keras_model
    from torch_impl import model as torch_model
    ones = np.ones((400, 2, 4, 4), np.float32)
    for per_sample in (False, True):
        spec = S.ModelSpec("d", (2, 4, 4), 0, (S.Dropout("drop", 0.25, per_sample),))
        built, model = torch_model.build_model(spec), keras_model.build_model(spec)
        torch.manual_seed(0)
        trained = [built.train()(torch.from_numpy(ones)).numpy(),
                   np.asarray(model(ones.transpose(0, 2, 3, 1), training=True))]
        for out in trained:
            assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
            assert abs((out == 0).mean() - 0.25) < 0.05
            if per_sample:  # a sample is dropped whole or kept whole
                assert all(len(np.unique(sample)) == 1 for sample in out)
        assert np.array_equal(built.eval()(torch.from_numpy(ones)).numpy(), ones)
        assert np.array_equal(np.asarray(model(ones.transpose(0, 2, 3, 1), training=False)),
                              ones.transpose(0, 2, 3, 1))


def test_no_dropout_zeroes_every_rate_and_the_manifest_says_which_dropout_ran(tmp_path):
    """--no-dropout (and the parity probes) train the network with every rate 0, blocks'
    paths included; the fairness manifest's line names the rates and whose masks."""
    from compare.experiment import networks
    from compare.experiment.config import RunConfig, recipe_config
    from compare.experiment.parity import probe_config
    spec = _spec(S.Dropout)
    path = tmp_path / "net.py"
    path.write_text(porting.spec_source(specs.ModelSpec(
        "drops", spec.input_shape, 10, spec.layers[:1] + (
            S.Merge("m", "add", ((S.Dropout("inner", 0.3),), (S.Dropout("path", 0.1, True),))),
            *spec.layers[1:])), "dropout in blocks"))
    config = RunConfig(model=str(path))
    trained = networks.run_spec(config)
    assert porting.dropout_rates(trained) == {"inner": 0.3, "path": 0.1, "drop": 0.5,
                                              "depth": 0.5}
    assert specs.dropout_text(trained) == (
        "dropout at 2 layers, rate 0.3 to 0.5; stochastic depth at 2 layers, rate 0.1 to 0.5; "
        "each framework draws its own random masks")
    for off in (config.replace(dropout=False), probe_config(config)):
        assert set(porting.dropout_rates(networks.run_spec(off)).values()) == {0.0}
        assert specs.dropout_text(networks.run_spec(off)) == "none"
    assert specs.dropout_text(networks.run_spec(recipe_config("resnet9"))) == "none"
