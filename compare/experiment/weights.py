"""Shared initial weights: generated once in numpy from the seed, loaded into both builds.

Initialisers (documented so either framework's build can be checked against them):
- conv and dense weights and biases: uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)], which
  is PyTorch's default (kaiming_uniform with a=sqrt(5)); fan_in = in_channels * k * k for
  a conv, in_features for a dense layer;
- BatchNorm: weight 1, bias 0, running mean 0, running variance 1.
Weights are in the canonical layout (`specs.parameter_shapes`); each framework converts.
"""

from __future__ import annotations

import numpy as np

from compare.experiment import specs

# Separate stream from the data plan's, so changing one never shifts the other.
INIT_STREAM = 0x1417


def initial_weights(spec: specs.ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Float32 weights for every entry of `specs.parameter_shapes(spec)`, each layer's from
    its spec (LayerSpec.initial_weights), drawn from one stream in the layers' order."""
    rng = np.random.default_rng([INIT_STREAM, seed])
    return {f"{layer.name}.{part}": value for layer in specs.walk(spec.layers)
            for part, value in layer.initial_weights(rng).items()}


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
