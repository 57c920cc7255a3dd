"""What every layer kind of a spec answers (LayerSpec), and the shape rules they share."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

Shape = tuple[int, ...]  # per image: (channels, height, width), or (features,)


class LayerSpec:
    """What every layer kind answers; a kind overrides what it changes. `name` names the
    layer and, with a part ("conv1.weight"), its weights in both frameworks. The first line
    of a kind's docstring is its row in docs/models.md."""

    name: str
    # Acts on each value alone (an activation, dropout, a constant factor), so the order of
    # a flattened map passes through it (compare.experiment.weights.flatten_input_shape)
    per_value: ClassVar[bool] = False

    @property
    def paths(self) -> tuple[tuple["LayerSpec", ...], ...]:
        """A block's paths, each a chain of layers from the block's input (none: a leaf)."""
        return ()

    @property
    def sublayers(self) -> tuple["LayerSpec", ...]:
        """A block's own layers, path after path: the order of its weights."""
        return tuple(layer for path in self.paths for layer in path)

    def output_shape(self, shape: Shape) -> Shape:
        """The per-image output for input `shape` (checked against what the layer expects)."""
        return shape

    def parameter_shapes(self) -> dict[str, Shape]:
        """Each weight's shape by part, in the canonical layout (PyTorch's: conv OIHW,
        dense (out, in)); BatchNorm's running statistics included (see `trainable`)."""
        return {}

    def macs(self, output: Shape) -> int:
        """Multiply-adds per image of the forward pass, given the layer's output shape;
        only convolutions and dense layers count (see forward_flops)."""
        return 0

    def initial_weights(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Float32 initial weights by part (compare.experiment.weights): uniform in
        ±1/sqrt(fan_in), PyTorch's default, drawn from `rng` part by part in order."""
        shapes = self.parameter_shapes()
        bound = 1.0 / math.sqrt(self.fan_in) if shapes else 0.0
        return {part: rng.uniform(-bound, bound, size=shape).astype(np.float32)
                for part, shape in shapes.items()}

    @property
    def fan_in(self) -> int:
        """Inputs to each output unit."""
        raise TypeError(f"{type(self).__name__} has no fan-in")


def feature_map(name: str, shape: Shape) -> Shape:
    """`shape` where a (channels, height, width) map is expected, else ValueError."""
    if len(shape) != 3:
        raise ValueError(f"{name}: expects a (channels, height, width) map, gets {shape}")
    return shape


def through(layers: tuple[LayerSpec, ...], shape: Shape) -> Shape:
    """The per-image shape after `layers` in order."""
    for layer in layers:
        shape = layer.output_shape(shape)
    return shape


def constant_weights(channels: int, **values: float) -> dict[str, np.ndarray]:
    """Per-channel float32 vectors, each filled with its value (scales 1, shifts 0)."""
    return {part: np.full(channels, value, np.float32) for part, value in values.items()}
