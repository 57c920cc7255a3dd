"""Shared initial weights (compare.experiment.weights) in numpy alone: the file a user passes
with --init-weights and its one-line refusals, which weights a run loads, and the flatten
row order between the frameworks' layouts. tests/test_core.py checks the seeded draw."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from compare.experiment import networks, specs, weights
from compare.experiment.config import RunConfig

LENET = networks.get_spec("lenet")


def _refusal(spec: specs.ModelSpec, found: dict[str, np.ndarray]) -> str:
    with pytest.raises(ValueError) as refused:
        weights.check(spec, found)
    return str(refused.value)


def test_check_names_what_is_missing_extra_misshapen_or_not_finite():
    good = weights.initial_weights(LENET, 0)
    weights.check(LENET, good)  # every weight, each of its shape: no complaint
    assert _refusal(LENET, {k: v for k, v in good.items() if k != "fc2.bias"}) == (
        "the weights lack fc2.bias")
    three = {k: v for k, v in good.items() if not k.startswith(("conv1", "fc3.weight"))}
    assert _refusal(LENET, three) == "the weights lack conv1.weight, conv1.bias, fc3.weight"
    few = {k: v for k, v in good.items() if not k.startswith(("conv", "fc1"))}
    assert _refusal(LENET, few) == "the weights lack conv1.weight, conv1.bias, conv2.weight ..."
    assert _refusal(LENET, {**good, "fc9.weight": good["fc3.weight"]}) == (
        "the weights hold fc9.weight, which lenet has not")
    extra = {**good, **{f"x{i}": good["fc3.bias"] for i in range(4)}}
    assert _refusal(LENET, extra) == "the weights hold x0, x1, x2, which lenet has not ..."
    assert _refusal(LENET, {**good, "fc3.weight": good["fc3.weight"].T}) == (
        "fc3.weight is (84, 10), lenet needs (10, 84)")
    for bad in (np.nan, np.inf):
        broken = good["conv2.bias"].copy()
        broken[-1] = bad
        assert _refusal(LENET, {**good, "conv2.bias": broken}) == (
            "conv2.bias holds NaN or infinite values")


def test_a_weights_file_is_read_as_float32_or_refused_in_one_line(tmp_path):
    good = weights.initial_weights(LENET, 3)
    path = tmp_path / "weights.npz"
    np.savez(path, **{k: v.astype(np.float64) for k, v in good.items()})
    read = weights.read_file(path, LENET)
    assert set(read) == set(good) and all(v.dtype == np.float32 for v in read.values())
    assert all(np.array_equal(read[k], good[k]) for k in good)
    assert weights.digest(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    text = tmp_path / "notes.npz"
    text.write_text("not weights")
    with pytest.raises(ValueError) as refused:
        weights.read_file(text, LENET)
    assert str(refused.value).startswith("not an NPZ file of weights (")
    with pytest.raises(ValueError) as refused:
        weights.read_file(tmp_path / "absent.npz", LENET)
    assert str(refused.value).startswith("not an NPZ file of weights (FileNotFoundError: ")
    np.savez(path, **{k: v for k, v in good.items() if k != "fc3.bias"})
    with pytest.raises(ValueError, match="^the weights lack fc3.bias$"):
        weights.read_file(path, LENET)


def test_a_run_loads_its_file_its_seeds_draw_or_nothing(tmp_path):
    drawn = weights.for_run(LENET, RunConfig(seed=4))
    assert drawn is not None
    assert all(np.array_equal(drawn[k], v) for k, v in weights.initial_weights(LENET, 4).items())
    assert not np.array_equal(drawn["fc1.weight"], weights.initial_weights(LENET, 5)["fc1.weight"])
    assert weights.for_run(LENET, RunConfig(seed=4, shared_init=False)) is None
    path = tmp_path / "start.npz"
    np.savez(path, **weights.initial_weights(LENET, 9))
    from_file = weights.for_run(LENET, RunConfig(seed=4, init_weights=str(path)))
    assert from_file is not None
    assert np.array_equal(from_file["conv1.weight"],
                          weights.initial_weights(LENET, 9)["conv1.weight"])


def test_flatten_rows_move_between_orders_on_a_non_square_map():
    chw = (3, 2, 4)  # channels, height, width all different: no axis can stand for another
    w = np.arange(5 * 24, dtype=np.float32).reshape(5, 24)
    hwc = weights.chw_to_hwc_rows(w, chw)
    assert hwc.shape == (5, 24)
    for c in range(3):
        for h in range(2):
            for x in range(4):  # torch's column c*H*W + h*W + x is Keras' (h*W + x)*C + c
                assert hwc[4, (h * 4 + x) * 3 + c] == w[4, c * 8 + h * 4 + x]
    np.testing.assert_array_equal(weights.hwc_to_chw_rows(hwc, chw), w)


def _spec(*layers: specs.LayerSpec, shape: tuple[int, int, int] = (2, 3, 5)) -> specs.ModelSpec:
    return specs.ModelSpec("probe", shape, 4, layers)


def test_the_flattened_map_is_found_past_elementwise_layers_only():
    head = (specs.Conv("conv", 2, 6, 1), specs.Flatten("flatten"))
    dense = specs.Dense("fc", 6 * 3 * 5, 4)
    assert weights.flatten_input_shape(_spec(*head, dense), "fc") == (6, 3, 5)
    elementwise = (specs.Dropout("drop", 0.5), specs.ReLU("relu"),
                   specs.Activation("act", "tanh"), specs.Scale("scale", 0.5))
    assert weights.flatten_input_shape(_spec(*head, *elementwise, dense), "fc") == (6, 3, 5)
    spec = _spec(*head, specs.Dense("fc0", 90, 90), dense)
    assert weights.flatten_input_shape(spec, "fc0") == (6, 3, 5)
    assert weights.flatten_input_shape(spec, "fc") is None  # after another dense layer
    assert weights.flatten_input_shape(spec, "absent") is None
    one_by_one = _spec(specs.Conv("conv", 2, 6, 1), specs.Flatten("flatten"),
                       specs.Dense("fc", 6, 4), shape=(2, 1, 1))
    assert weights.flatten_input_shape(one_by_one, "fc") is None  # both orders agree
    first = _spec(specs.Flatten("flatten"), specs.Dense("fc", 30, 4))
    assert weights.flatten_input_shape(first, "fc") == (2, 3, 5)
    alone = _spec(specs.Dense("fc", 30, 4), shape=(30, 1, 1))
    assert weights.flatten_input_shape(alone, "fc") is None  # nothing before it


def test_the_search_back_stops_at_the_first_layer_that_is_not_elementwise():
    spec = _spec(specs.Conv("conv", 2, 6, 1), specs.Flatten("flatten"),
                 specs.Dense("fc0", 90, 90), specs.Dropout("drop", 0.5), specs.Dense("fc", 90, 4))
    assert weights.flatten_input_shape(spec, "fc") is None  # fc0 reorders nothing for fc
    assert weights.flatten_input_shape(spec, "fc0") == (6, 3, 5)
