"""The block kinds of a spec: paths from one input, combined (Residual, Merge)."""

from __future__ import annotations

from dataclasses import dataclass

from compare.experiment.specs.base import LayerSpec, Shape, through


@dataclass(frozen=True)
class Residual(LayerSpec):
    """`shortcut(x) + layers(x)`; an empty shortcut is the identity.

    The shortcut's layers, where the branch changes the shape, are usually a 1x1
    convolution and BatchNorm."""

    name: str
    layers: tuple[LayerSpec, ...]
    shortcut: tuple[LayerSpec, ...] = ()

    @property
    def paths(self) -> tuple[tuple[LayerSpec, ...], ...]:
        return (self.layers, self.shortcut)  # the weights' order: branch, then shortcut

    def output_shape(self, shape: Shape) -> Shape:
        branch, shortcut = (through(path, shape) for path in self.paths)
        if branch != shortcut:
            raise ValueError(f"{self.name}: the branch gives {branch}, the shortcut "
                             f"{shortcut}: they must match to be added")
        return branch


MERGES = ("add", "concat", "multiply")


@dataclass(frozen=True)
class Merge(LayerSpec):
    """Paths from one input, combined by `op`: "add", "concat" (along the channels, in path
    order: DenseNet, GoogLeNet, SqueezeNet) or "multiply" (squeeze-and-excitation: the input
    times a per-channel gate computed from it). An empty path is the identity."""

    name: str
    op: str
    branches: tuple[tuple[LayerSpec, ...], ...]

    def __post_init__(self) -> None:
        if self.op not in MERGES or len(self.branches) < 2:
            raise ValueError(f"{self.name}: a merge combines two or more paths by one of "
                             f"{', '.join(MERGES)}")

    @property
    def paths(self) -> tuple[tuple[LayerSpec, ...], ...]:
        return self.branches

    def output_shape(self, shape: Shape) -> Shape:
        shapes = [through(path, shape) for path in self.branches]
        if self.op == "concat":
            if len({len(s) for s in shapes}) != 1 or len({s[1:] for s in shapes}) != 1:
                raise ValueError(f"{self.name}: concatenates {shapes}: all but the channels "
                                 f"must match")
            return (sum(s[0] for s in shapes), *shapes[0][1:])
        if self.op == "multiply":  # a (C, 1, 1) gate scales a (C, H, W) map
            widest = max(shapes, key=lambda s: sum(s))
            for s in shapes:
                if s != widest and not (len(s) == len(widest) and s[0] == widest[0]
                                        and all(n == 1 for n in s[1:])):
                    raise ValueError(f"{self.name}: multiplies {shapes}: each must be the "
                                     f"map's shape or one value per channel")
            return widest
        if len(set(shapes)) != 1:
            raise ValueError(f"{self.name}: adds {shapes}: they must match")
        return shapes[0]
