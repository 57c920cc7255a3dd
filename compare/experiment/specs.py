"""Framework-neutral model specs: each network described once, built by both frameworks.

A spec is a list of layers; `Residual` holds a sub-list whose output is added to its
input. Names are unique across a spec and name the weights in both builds. Shapes are
(channels, height, width) per image; parameter counts and FLOPs come from the spec.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

Shape = tuple[int, ...]  # per image: (channels, height, width), or (features,)


class LayerSpec:
    """What every layer kind answers; a kind overrides what it changes. `name` names the
    layer and, with a part ("conv1.weight"), its weights in both frameworks."""

    name: str
    sublayers: tuple["LayerSpec", ...] = ()  # a block's own layers (Residual's branch)

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


@dataclass(frozen=True)
class Conv(LayerSpec):
    """A 2-D convolution, padded `padding` pixels on every side (PyTorch's symmetric padding;
    the Keras build pads explicitly where "same" would pad unevenly). `groups` splits the
    channels into groups convolved apart: in_channels groups of one is a depthwise
    convolution."""

    name: str
    in_channels: int
    out_channels: int
    kernel: int
    padding: int = 0  # pixels each side
    bias: bool = True
    stride: int = 1
    groups: int = 1

    def __post_init__(self):
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"{self.name}: {self.in_channels} in and {self.out_channels} out "
                             f"channels do not split into {self.groups} groups")
        if min(self.kernel, self.stride, self.groups) < 1 or self.padding < 0:
            raise ValueError(f"{self.name}: kernel, stride and groups must be >= 1 and "
                             f"padding >= 0")

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.in_channels == self.out_channels

    def output_shape(self, shape: Shape) -> Shape:
        if len(shape) != 3 or shape[0] != self.in_channels:
            raise ValueError(f"{self.name}: expects {self.in_channels} channels, gets {shape}")
        c, h, w = shape
        size = [(n + 2 * self.padding - self.kernel) // self.stride + 1 for n in (h, w)]
        if min(size) < 1:
            raise ValueError(f"{self.name}: a {self.kernel}x{self.kernel} kernel does not fit "
                             f"a {h}x{w} input padded by {self.padding}")
        return (self.out_channels, *size)

    def parameter_shapes(self) -> dict[str, Shape]:
        weight = {"weight": (self.out_channels, self.in_channels // self.groups, self.kernel,
                             self.kernel)}
        return {**weight, "bias": (self.out_channels,)} if self.bias else weight

    def macs(self, output: Shape) -> int:
        c, h, w = output
        return self.fan_in * c * h * w

    @property
    def fan_in(self) -> int:
        return self.in_channels // self.groups * self.kernel * self.kernel


@dataclass(frozen=True)
class BatchNorm(LayerSpec):
    """Normalisation over each channel. `epsilon` and `momentum` (PyTorch's convention: the
    batch statistic's share of the running one) where the network fixes its own, as a ported
    network does; None: the run's (RunConfig.bn_epsilon, bn_momentum)."""

    name: str
    channels: int
    epsilon: float | None = None
    momentum: float | None = None

    def settings(self, norm: dict) -> tuple[float, float]:
        """(momentum, epsilon): the layer's own, else the run's `norm`."""
        return (norm["momentum"] if self.momentum is None else self.momentum,
                norm["epsilon"] if self.epsilon is None else self.epsilon)

    def parameter_shapes(self) -> dict[str, Shape]:
        return {part: (self.channels,)
                for part in ("weight", "bias", "running_mean", "running_var")}

    def initial_weights(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Scale 1, shift 0, running mean 0, running variance 1 (both frameworks' own)."""
        ones, zeros = np.ones(self.channels, np.float32), np.zeros(self.channels, np.float32)
        return {"weight": ones, "bias": zeros, "running_mean": zeros.copy(),
                "running_var": ones.copy()}


@dataclass(frozen=True)
class ReLU(LayerSpec):
    name: str
    max_value: float | None = None  # 6.0: ReLU6 (MobileNet's)

    def __post_init__(self):
        if self.max_value not in (None, 6.0):
            raise ValueError(f"{self.name}: ReLU caps at 6 (ReLU6) or not at all")


def _map(name: str, shape: Shape) -> Shape:
    if len(shape) != 3:
        raise ValueError(f"{name}: expects a (channels, height, width) map, gets {shape}")
    return shape


@dataclass(frozen=True)
class MaxPool(LayerSpec):
    name: str
    size: int = 2  # window and stride

    def output_shape(self, shape: Shape) -> Shape:
        c, h, w = _map(self.name, shape)
        if min(h, w) < self.size:
            raise ValueError(f"{self.name}: a {self.size}x{self.size} window does not fit "
                             f"a {h}x{w} map")
        return (c, h // self.size, w // self.size)


@dataclass(frozen=True)
class AvgPool(MaxPool):
    """Average over size x size windows, stride size, no padding."""


@dataclass(frozen=True)
class GlobalMaxPool(LayerSpec):
    name: str

    def output_shape(self, shape: Shape) -> Shape:
        return (_map(self.name, shape)[0], 1, 1)


@dataclass(frozen=True)
class GlobalAvgPool(GlobalMaxPool):
    """The mean of each channel's map."""


@dataclass(frozen=True)
class Flatten(LayerSpec):
    name: str

    def output_shape(self, shape: Shape) -> Shape:
        return (math.prod(shape),)


@dataclass(frozen=True)
class Dense(LayerSpec):
    name: str
    in_features: int
    out_features: int
    bias: bool = True

    def output_shape(self, shape: Shape) -> Shape:
        if shape != (self.in_features,):
            raise ValueError(f"{self.name}: expects ({self.in_features},), gets {shape}")
        return (self.out_features,)

    def parameter_shapes(self) -> dict[str, Shape]:
        weight = {"weight": (self.out_features, self.in_features)}
        return {**weight, "bias": (self.out_features,)} if self.bias else weight

    def macs(self, output: Shape) -> int:
        return self.in_features * self.out_features

    @property
    def fan_in(self) -> int:
        return self.in_features


@dataclass(frozen=True)
class Scale(LayerSpec):
    name: str
    factor: float


@dataclass(frozen=True)
class Residual(LayerSpec):
    """shortcut(x) + branch(x): `layers` is the branch; `shortcut` is the identity when empty,
    else its layers (a 1x1 convolution and BatchNorm where the branch changes the shape)."""

    name: str
    layers: tuple[LayerSpec, ...]
    shortcut: tuple[LayerSpec, ...] = ()

    @property
    def sublayers(self) -> tuple[LayerSpec, ...]:
        return self.layers + self.shortcut  # the weights' order: branch, then shortcut

    def output_shape(self, shape: Shape) -> Shape:
        branch, shortcut = (_through(path, shape) for path in (self.layers, self.shortcut))
        if branch != shortcut:
            raise ValueError(f"{self.name}: the branch gives {branch}, the shortcut "
                             f"{shortcut}: they must match to be added")
        return branch


def _through(layers: tuple[LayerSpec, ...], shape: Shape) -> Shape:
    for layer in layers:
        shape = layer.output_shape(shape)
    return shape


Layer = LayerSpec  # any of the kinds above
KINDS = (Conv, BatchNorm, ReLU, MaxPool, AvgPool, GlobalMaxPool, GlobalAvgPool, Flatten, Dense,
         Scale, Residual)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    input_shape: tuple[int, int, int]  # (channels, height, width)
    num_classes: int
    layers: tuple[Layer, ...]


def walk(layers: tuple[Layer, ...]) -> Iterator[Layer]:
    """Every layer in order, descending into residual blocks."""
    for layer in layers:
        if layer.sublayers:
            yield from walk(layer.sublayers)
        else:
            yield layer


def layer_shapes(spec: ModelSpec) -> dict[str, tuple[Shape, Shape]]:
    """Per-image (input, output) shape of every layer, blocks and their own layers, checking
    that the layers fit together (ValueError naming the first that does not)."""
    shapes: dict[str, tuple[Shape, Shape]] = {}
    position = itertools.count(1)  # every layer, blocks and their own, in order

    def run(layers: tuple[Layer, ...], shape: Shape) -> Shape:
        for layer in layers:
            at = next(position)
            if isinstance(layer, Residual):  # branch and shortcut each from the block's input
                run(layer.layers, shape)
                run(layer.shortcut, shape)
            try:
                shapes[layer.name] = (shape, layer.output_shape(shape))
            except ValueError as exc:
                said = str(exc).removeprefix(f"{layer.name}: ")
                raise ValueError(f"layer {at} ({type(layer).__name__} {layer.name!r}): "
                                 f"{said}") from None
            shape = shapes[layer.name][1]
        return shape

    run(spec.layers, spec.input_shape)
    return shapes


def check(spec: ModelSpec, num_classes: int | None = None) -> None:
    """A spec both frameworks can build, or ValueError in one line naming the layer: every
    layer one of the kinds above (KINDS), names unique, every layer's input fitting, and
    the output one score per class."""
    seen: set[str] = set()
    for at, layer in enumerate(_every_layer(spec.layers), 1):
        if type(layer) not in KINDS:
            raise ValueError(f"layer {at} ({getattr(layer, 'name', '?')!r}): "
                             f"{type(layer).__name__} is not a spec layer kind (one of "
                             f"{', '.join(k.__name__ for k in KINDS)})")
        if layer.name in seen:
            raise ValueError(f"layer {at}: the name {layer.name!r} is used twice (names "
                             f"name the weights in both frameworks)")
        seen.add(layer.name)
    out = layer_shapes(spec)[spec.layers[-1].name][1] if spec.layers else spec.input_shape
    classes = spec.num_classes if num_classes is None else num_classes
    if out != (classes,):
        raise ValueError(f"the last layer gives {out} per image, not one score for each of "
                         f"the {classes} classes")


def _every_layer(layers: tuple[Layer, ...]) -> Iterator[Layer]:
    """Every layer in order, blocks included (walk gives only the leaves)."""
    for layer in layers:
        yield layer
        yield from _every_layer(getattr(layer, "sublayers", ()))


def output_shapes(spec: ModelSpec) -> dict[str, Shape]:
    """Per-image output shape of every layer, checking that the layers fit together."""
    return {name: output for name, (_, output) in layer_shapes(spec).items()}


def input_shape_of(spec: ModelSpec, name: str) -> tuple[int, ...]:
    """Per-image input shape of the layer called `name`."""
    return layer_shapes(spec)[name][0]


def parameter_shapes(spec: ModelSpec) -> dict[str, Shape]:
    """Every weight in the canonical layout (PyTorch's: conv OIHW, dense (out, in)).

    Trainable weights and BatchNorm running statistics alike; see `trainable`.
    """
    return {f"{layer.name}.{part}": shape for layer in walk(spec.layers)
            for part, shape in layer.parameter_shapes().items()}


def has_batchnorm(spec: ModelSpec) -> bool:
    return any(isinstance(layer, BatchNorm) for layer in walk(spec.layers))


def trainable(name: str) -> bool:
    return not name.endswith(("running_mean", "running_var"))


def parameter_count(spec: ModelSpec) -> int:
    """Trainable parameters (BatchNorm running statistics excluded, as both libraries count)."""
    return sum(math.prod(shape) for name, shape in parameter_shapes(spec).items()
               if trainable(name))


def forward_flops(spec: ModelSpec) -> int:
    """Analytic forward FLOPs per image: convolutions and dense layers, a multiply-add = 2.

    Bias adds, BatchNorm, activations, pooling and the residual adds are left out: they
    are under 1% of the total for these networks and no peak-FLOP figure counts them.
    """
    shapes = output_shapes(spec)
    return 2 * sum(layer.macs(shapes[layer.name]) for layer in walk(spec.layers))


def layer_kind(layer: LayerSpec) -> str:
    """What a layer computes, as the FLOPs table groups it: convolutions by their shape
    (depthwise, grouped, pointwise 1x1, k x k), dense layers; the rest by class."""
    if isinstance(layer, Conv):
        if layer.depthwise:
            return f"depthwise {layer.kernel}x{layer.kernel} conv"
        if layer.groups > 1:
            return f"grouped {layer.kernel}x{layer.kernel} conv"
        return "pointwise 1x1 conv" if layer.kernel == 1 else \
            f"{layer.kernel}x{layer.kernel} conv"
    return "dense" if isinstance(layer, Dense) else type(layer).__name__


def flops_by_kind(spec: ModelSpec) -> dict[str, float]:
    """Each layer kind's share of the forward FLOPs (forward_flops), largest first."""
    shapes = output_shapes(spec)
    by_kind: dict[str, int] = {}
    for layer in walk(spec.layers):
        if macs := layer.macs(shapes[layer.name]):
            by_kind[layer_kind(layer)] = by_kind.get(layer_kind(layer), 0) + macs
    total = sum(by_kind.values()) or 1
    return dict(sorted(((k, v / total) for k, v in by_kind.items()), key=lambda kv: -kv[1]))


def train_flops(spec: ModelSpec) -> int:
    """Training FLOPs per image: forward + backward, the backward taken as twice the forward."""
    return 3 * forward_flops(spec)


def describe(spec: ModelSpec) -> dict:
    return {"name": spec.name, "input_shape": list(spec.input_shape),
            "num_classes": spec.num_classes,
            "parameters": parameter_count(spec), "forward_flops_per_image": forward_flops(spec),
            "train_flops_per_image": train_flops(spec), "flops_by_kind": flops_by_kind(spec)}
