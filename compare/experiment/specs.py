"""Framework-neutral model specs: each network described once, built by both frameworks.

A spec is a list of layers; `Residual` holds a sub-list whose output is added to its
input. Names are unique across a spec and name the weights in both builds. Shapes are
(channels, height, width) per image; parameter counts and FLOPs come from the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Union


@dataclass(frozen=True)
class Conv:
    name: str
    in_channels: int
    out_channels: int
    kernel: int
    padding: int = 0  # pixels each side; stride is always 1
    bias: bool = True


@dataclass(frozen=True)
class BatchNorm:
    name: str
    channels: int


@dataclass(frozen=True)
class ReLU:
    name: str


@dataclass(frozen=True)
class MaxPool:
    name: str
    size: int = 2  # window and stride


@dataclass(frozen=True)
class GlobalMaxPool:
    name: str


@dataclass(frozen=True)
class Flatten:
    name: str


@dataclass(frozen=True)
class Dense:
    name: str
    in_features: int
    out_features: int
    bias: bool = True


@dataclass(frozen=True)
class Scale:
    name: str
    factor: float


@dataclass(frozen=True)
class Residual:
    name: str
    layers: tuple["Layer", ...]


Layer = Union[Conv, BatchNorm, ReLU, MaxPool, GlobalMaxPool, Flatten, Dense, Scale, Residual]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    input_shape: tuple[int, int, int]  # (channels, height, width)
    num_classes: int
    layers: tuple[Layer, ...]


def walk(layers: tuple[Layer, ...]) -> Iterator[Layer]:
    """Every layer in order, descending into residual blocks."""
    for layer in layers:
        if isinstance(layer, Residual):
            yield from walk(layer.layers)
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


def output_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Per-image output shape of every layer, checking that the layers fit together."""
    shapes: dict[str, tuple[int, ...]] = {}

    def run(layers: tuple[Layer, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
        for layer in layers:
            if isinstance(layer, Conv):
                c, h, w = shape
                if c != layer.in_channels:
                    raise ValueError(f"{layer.name}: expects {layer.in_channels} channels, "
                                     f"gets {c}")
                size = lambda n: n + 2 * layer.padding - layer.kernel + 1  # noqa: E731
                shape = (layer.out_channels, size(h), size(w))
            elif isinstance(layer, MaxPool):
                c, h, w = shape
                shape = (c, h // layer.size, w // layer.size)
            elif isinstance(layer, GlobalMaxPool):
                shape = (shape[0], 1, 1)
            elif isinstance(layer, Flatten):
                shape = (shape[0] * shape[1] * shape[2],)
            elif isinstance(layer, Dense):
                if shape != (layer.in_features,):
                    raise ValueError(f"{layer.name}: expects ({layer.in_features},), gets {shape}")
                shape = (layer.out_features,)
            elif isinstance(layer, Residual):
                inner = run(layer.layers, shape)
                if inner != shape:
                    raise ValueError(f"{layer.name}: branch changes shape {shape} -> {inner}")
            shapes[layer.name] = shape
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


def parameter_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every weight in the canonical layout (PyTorch's: conv OIHW, dense (out, in)).

    Trainable weights and BatchNorm running statistics alike; see `trainable`.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in walk(spec.layers):
        if isinstance(layer, Conv):
            shapes[f"{layer.name}.weight"] = (layer.out_channels, layer.in_channels, layer.kernel,
                                              layer.kernel)
            if layer.bias:
                shapes[f"{layer.name}.bias"] = (layer.out_channels,)
        elif isinstance(layer, Dense):
            shapes[f"{layer.name}.weight"] = (layer.out_features, layer.in_features)
            if layer.bias:
                shapes[f"{layer.name}.bias"] = (layer.out_features,)
        elif isinstance(layer, BatchNorm):
            for part in ("weight", "bias", "running_mean", "running_var"):
                shapes[f"{layer.name}.{part}"] = (layer.channels,)
    return shapes


def has_batchnorm(spec: ModelSpec) -> bool:
    return any(isinstance(layer, BatchNorm) for layer in walk(spec.layers))


def trainable(name: str) -> bool:
    return not name.endswith(("running_mean", "running_var"))


def parameter_count(spec: ModelSpec) -> int:
    """Trainable parameters (BatchNorm running statistics excluded, as both libraries count)."""
    total = 0
    for name, shape in parameter_shapes(spec).items():
        if trainable(name):
            n = 1
            for d in shape:
                n *= d
            total += n
    return total


def forward_flops(spec: ModelSpec) -> int:
    """Analytic forward FLOPs per image: convolutions and dense layers, a multiply-add = 2.

    Bias adds, BatchNorm, activations, pooling and the residual adds are left out: they
    are under 1% of the total for these networks and no peak-FLOP figure counts them.
    """
    shapes = output_shapes(spec)
    macs = 0
    for layer in walk(spec.layers):
        if isinstance(layer, Conv):
            c, h, w = shapes[layer.name]
            macs += layer.kernel * layer.kernel * layer.in_channels * c * h * w
        elif isinstance(layer, Dense):
            macs += layer.in_features * layer.out_features
    return 2 * macs


def train_flops(spec: ModelSpec) -> int:
    """Training FLOPs per image: forward + backward, the backward taken as twice the forward."""
    return 3 * forward_flops(spec)


def describe(spec: ModelSpec) -> dict:
    return {"name": spec.name, "input_shape": list(spec.input_shape),
            "num_classes": spec.num_classes,
            "parameters": parameter_count(spec), "forward_flops_per_image": forward_flops(spec),
            "train_flops_per_image": train_flops(spec)}
