"""Framework-neutral model specs: each network described once, built by both frameworks.

A spec is a list of layers; `Residual` holds a sub-list whose output is added to its
input. Names are unique across a spec and name the weights in both builds. Shapes are
(channels, height, width) per image; parameter counts and FLOPs come from the spec.
"""

from __future__ import annotations

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
    name: str
    in_channels: int
    out_channels: int
    kernel: int
    padding: int = 0  # pixels each side; stride is always 1
    bias: bool = True

    def output_shape(self, shape: Shape) -> Shape:
        c, h, w = shape
        if c != self.in_channels:
            raise ValueError(f"{self.name}: expects {self.in_channels} channels, gets {c}")
        return (self.out_channels, h + 2 * self.padding - self.kernel + 1,
                w + 2 * self.padding - self.kernel + 1)

    def parameter_shapes(self) -> dict[str, Shape]:
        weight = {"weight": (self.out_channels, self.in_channels, self.kernel, self.kernel)}
        return {**weight, "bias": (self.out_channels,)} if self.bias else weight

    def macs(self, output: Shape) -> int:
        c, h, w = output
        return self.fan_in * c * h * w

    @property
    def fan_in(self) -> int:
        return self.in_channels * self.kernel * self.kernel


@dataclass(frozen=True)
class BatchNorm(LayerSpec):
    name: str
    channels: int

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


@dataclass(frozen=True)
class MaxPool(LayerSpec):
    name: str
    size: int = 2  # window and stride

    def output_shape(self, shape: Shape) -> Shape:
        c, h, w = shape
        return (c, h // self.size, w // self.size)


@dataclass(frozen=True)
class GlobalMaxPool(LayerSpec):
    name: str

    def output_shape(self, shape: Shape) -> Shape:
        return (shape[0], 1, 1)


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
    """x + branch(x): `layers` is the branch, which must keep the shape."""

    name: str
    layers: tuple[LayerSpec, ...]

    @property
    def sublayers(self) -> tuple[LayerSpec, ...]:
        return self.layers

    def output_shape(self, shape: Shape) -> Shape:
        inner = shape
        for layer in self.layers:
            inner = layer.output_shape(inner)
        if inner != shape:
            raise ValueError(f"{self.name}: branch changes shape {shape} -> {inner}")
        return shape


Layer = LayerSpec  # any of the kinds above


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


def lenet(num_classes: int = 10) -> ModelSpec:
    """The seed's Net (PyTorch CIFAR-10 tutorial): 62,006 parameters."""
    return ModelSpec("lenet", (3, 32, 32), num_classes, (
        Conv("conv1", 3, 6, 5),
        ReLU("relu1"),
        MaxPool("pool1"),
        Conv("conv2", 6, 16, 5),
        ReLU("relu2"),
        MaxPool("pool2"),
        Flatten("flatten"),
        Dense("fc1", 16 * 5 * 5, 120),
        ReLU("relu3"),
        Dense("fc2", 120, 84),
        ReLU("relu4"),
        Dense("fc3", 84, num_classes),
    ))


def _conv_bn(name: str, cin: int, cout: int) -> tuple[Layer, ...]:
    return (Conv(f"{name}_conv", cin, cout, 3, padding=1, bias=False),
            BatchNorm(f"{name}_bn", cout),
            ReLU(f"{name}_relu"))


def resnet9(num_classes: int = 10) -> ModelSpec:
    """The DAWNBench CIFAR-10 ResNet (Page, 2018): 6,573,120 trainable parameters."""
    return ModelSpec("resnet9", (3, 32, 32), num_classes, (
        *_conv_bn("prep", 3, 64),
        *_conv_bn("layer1", 64, 128),
        MaxPool("layer1_pool"),
        Residual("layer1_res",
                 _conv_bn("layer1_res1", 128, 128) + _conv_bn("layer1_res2", 128, 128)),
        *_conv_bn("layer2", 128, 256),
        MaxPool("layer2_pool"),
        *_conv_bn("layer3", 256, 512),
        MaxPool("layer3_pool"),
        Residual("layer3_res",
                 _conv_bn("layer3_res1", 512, 512) + _conv_bn("layer3_res2", 512, 512)),
        GlobalMaxPool("pool"),
        Flatten("flatten"),
        Dense("fc", 512, num_classes, bias=False),
        Scale("scale", 0.125),
    ))


MODELS = {"lenet": lenet, "resnet9": resnet9}


def get_spec(name: str, num_classes: int = 10) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return MODELS[name](num_classes)


def output_shapes(spec: ModelSpec) -> dict[str, Shape]:
    """Per-image output shape of every layer, checking that the layers fit together."""
    shapes: dict[str, Shape] = {}

    def run(layers: tuple[Layer, ...], shape: Shape) -> Shape:
        for layer in layers:
            if layer.sublayers:
                run(layer.sublayers, shape)  # the block's own layers' shapes
            shape = shapes[layer.name] = layer.output_shape(shape)
        return shape

    run(spec.layers, spec.input_shape)
    return shapes


def input_shape_of(spec: ModelSpec, name: str) -> tuple[int, ...]:
    """Per-image input shape of the layer called `name`."""
    shapes = output_shapes(spec)
    previous = spec.input_shape
    for layer in walk(spec.layers):
        if layer.name == name:
            return previous
        previous = shapes[layer.name]
    raise KeyError(name)


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


def train_flops(spec: ModelSpec) -> int:
    """Training FLOPs per image: forward + backward, the backward taken as twice the forward."""
    return 3 * forward_flops(spec)


def describe(spec: ModelSpec) -> dict:
    return {"name": spec.name, "input_shape": list(spec.input_shape),
            "num_classes": spec.num_classes,
            "parameters": parameter_count(spec), "forward_flops_per_image": forward_flops(spec),
            "train_flops_per_image": train_flops(spec)}
