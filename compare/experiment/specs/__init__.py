"""Framework-neutral model specs: each network described once, built by both frameworks.

A spec is a list of layers; a block (Residual, Merge) holds paths of layers from its input
and combines them. Names are unique across a spec and name the weights in both builds.
Shapes are (channels, height, width) per image; parameter counts and FLOPs come from the
spec. Each layer kind is declared once, in this package, and listed in KINDS; each twin has
one builder per kind (tf_impl/model.py, torch_impl/model.py) and one reader per kind
(`LAYERS` in tf_impl/port_kinds.py, `MODULES` in torch_impl/port_kinds.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Iterator

from compare.experiment.specs.base import LayerSpec, Shape
from compare.experiment.specs.blocks import MERGES, Merge, Residual
from compare.experiment.specs.elementwise import FORMULAS, Activation, Dropout, ReLU
from compare.experiment.specs.layers import (
    Affine,
    BatchNorm,
    ChannelScale,
    Conv,
    Dense,
    LayerNorm,
    Scale,
)
from compare.experiment.specs.pooling import (
    AdaptivePool,
    AvgPool,
    Flatten,
    GlobalAvgPool,
    GlobalMaxPool,
    MaxPool,
    ZeroPad,
)

Layer = LayerSpec  # any of the kinds below
# Every layer kind, in the order docs/models.md lists them.
KINDS = (Conv, BatchNorm, LayerNorm, ReLU, Activation, MaxPool, AvgPool, AdaptivePool,
         GlobalMaxPool, GlobalAvgPool, ZeroPad, Flatten, Dense, Dropout, Scale, Affine,
         ChannelScale, Residual, Merge)

__all__ = ["FORMULAS", "KINDS", "MERGES", "Layer", "LayerSpec", "ModelSpec", "Shape",
           *(kind.__name__ for kind in KINDS)]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    input_shape: tuple[int, int, int]  # (channels, height, width)
    num_classes: int
    layers: tuple[Layer, ...]


def walk(layers: tuple[Layer, ...]) -> Iterator[Layer]:
    """Every leaf layer in order, descending into blocks path by path."""
    for layer in layers:
        if layer.paths:
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
            for path in layer.paths:  # each path from the block's input
                run(path, shape)
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

    Bias adds, the norms, activations, pooling and the merges are left out: they
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
    if isinstance(layer, Merge):
        return f"{layer.op} merge"
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


def without_dropout(spec: ModelSpec) -> ModelSpec:
    """`spec` with every Dropout's rate 0 (--no-dropout, the parity check's and the port's
    proofs: one function, not two frameworks' random masks)."""
    def off(layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
        found = []
        for layer in layers:
            if isinstance(layer, Dropout):
                layer = dataclasses.replace(layer, rate=0.0)
            elif isinstance(layer, Residual):
                layer = dataclasses.replace(layer, layers=off(layer.layers),
                                            shortcut=off(layer.shortcut))
            elif isinstance(layer, Merge):
                layer = dataclasses.replace(layer, branches=tuple(map(off, layer.branches)))
            found.append(layer)
        return tuple(found)
    return dataclasses.replace(spec, layers=off(spec.layers))


def dropout_text(spec: ModelSpec) -> str:
    """The network's dropout in words, for the fairness manifest: none, or the rates and
    layers, each framework drawing its own masks."""
    found = [layer for layer in walk(spec.layers) if isinstance(layer, Dropout) and layer.rate]
    if not found:
        return "none"
    kinds = []
    for per_sample, what in ((False, "dropout"), (True, "stochastic depth")):
        rates = sorted({layer.rate for layer in found if layer.per_sample == per_sample})
        count = sum(layer.per_sample == per_sample for layer in found)
        if count:
            kinds.append(f"{what} at {count} layer{'s' if count > 1 else ''}, rate "
                         f"{rates[0]:g}" + (f" to {rates[-1]:g}" if len(rates) > 1 else ""))
    return "; ".join(kinds) + "; each framework draws its own random masks"
