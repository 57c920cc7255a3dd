"""Shared initial weights: generated once in numpy from the seed, loaded into both builds.

Initialisers (documented so either framework's build can be checked against them):
- conv and dense weights and biases: uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)], which
  is PyTorch's default (kaiming_uniform with a=sqrt(5)); fan_in = in_channels * k * k for
  a conv, in_features for a dense layer;
- BatchNorm: weight 1, bias 0, running mean 0, running variance 1.
Weights are in the canonical layout (`specs.parameter_shapes`); each framework converts.
"""

from __future__ import annotations

import math

import numpy as np

from compare.experiment import specs

# Separate stream from the data plan's, so changing one never shifts the other.
INIT_STREAM = 0x1417


def initial_weights(spec: specs.ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Float32 weights for every entry of `specs.parameter_shapes(spec)`."""
    rng = np.random.default_rng([INIT_STREAM, seed])
    weights: dict[str, np.ndarray] = {}
    for name, shape in specs.parameter_shapes(spec).items():
        part = name.rsplit(".", 1)[1]
        if part in ("running_mean",) or (part == "bias" and _is_bn(spec, name)):
            weights[name] = np.zeros(shape, np.float32)
        elif part == "running_var" or (part == "weight" and _is_bn(spec, name)):
            weights[name] = np.ones(shape, np.float32)
        else:
            bound = 1.0 / math.sqrt(_fan_in(spec, name))
            weights[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    return weights


def _layer(spec: specs.ModelSpec, name: str) -> specs.Layer:
    layer_name = name.rsplit(".", 1)[0]
    return next(layer for layer in specs.walk(spec.layers) if layer.name == layer_name)


def _is_bn(spec: specs.ModelSpec, name: str) -> bool:
    return isinstance(_layer(spec, name), specs.BatchNorm)


def _fan_in(spec: specs.ModelSpec, name: str) -> int:
    layer = _layer(spec, name)
    if isinstance(layer, specs.Conv):
        return layer.in_channels * layer.kernel * layer.kernel
    return layer.in_features


def chw_to_hwc_rows(weight: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """Reorder a dense weight's input axis from CHW flatten order (torch) to HWC (Keras).

    `weight` is (out, C*H*W) in the canonical layout; the result is (out, H*W*C).
    """
    c, h, w = chw
    return weight.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(weight.shape[0], -1)


def hwc_to_chw_rows(weight: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """The inverse of `chw_to_hwc_rows`."""
    c, h, w = chw
    return weight.reshape(-1, h, w, c).transpose(0, 3, 1, 2).reshape(weight.shape[0], -1)


def flatten_input_shape(spec: specs.ModelSpec, dense_name: str) -> tuple[int, int, int] | None:
    """The (C, H, W) map flattened into `dense_name`, or None if it is not after a flatten."""
    layers = list(specs.walk(spec.layers))
    for i, layer in enumerate(layers):
        if layer.name == dense_name and i > 0 and isinstance(layers[i - 1], specs.Flatten):
            shape = specs.input_shape_of(spec, layers[i - 1].name)
            return shape if len(shape) == 3 and shape[1:] != (1, 1) else None
    return None
