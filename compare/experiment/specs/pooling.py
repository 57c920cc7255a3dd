"""The layer kinds that change a map's size without weights: pooling as the model zoos use
it, zero padding, and the flatten before a classifier."""

from __future__ import annotations

import math
from dataclasses import dataclass

from compare.experiment.specs.base import LayerSpec, Shape, feature_map


def pooled_size(n: int, size: int, stride: int, padding: int, ceil_mode: bool) -> int:
    """Outputs along one side of `n` pixels: PyTorch's rule (in ceil mode a last window that
    would start in the right padding is dropped)."""
    span = n + 2 * padding - size
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= n + padding:
        out -= 1
    return out


@dataclass(frozen=True)
class MaxPool(LayerSpec):
    """Max over `size` x `size` windows every `stride` (default: `size`) pixels.

    `padding` pixels each side never win (PyTorch's -inf); `ceil_mode` keeps a last partial
    window (PyTorch's ceil_mode, Keras' "same" at stride 2 on an even map)."""

    name: str
    size: int = 2  # window
    stride: int | None = None  # None: the window
    padding: int = 0  # pixels each side, at most half the window
    ceil_mode: bool = False

    @property
    def step(self) -> int:
        return self.size if self.stride is None else self.stride

    def output_shape(self, shape: Shape) -> Shape:
        c, h, w = feature_map(self.name, shape)
        if not 0 <= self.padding <= self.size // 2:
            raise ValueError(f"{self.name}: padding {self.padding} is over half the "
                             f"{self.size}x{self.size} window")
        if min(h, w) + 2 * self.padding < self.size:
            raise ValueError(f"{self.name}: a {self.size}x{self.size} window does not fit "
                             f"a {h}x{w} map")
        return (c, *(pooled_size(n, self.size, self.step, self.padding, self.ceil_mode)
                     for n in (h, w)))


@dataclass(frozen=True)
class AvgPool(MaxPool):
    """Average over windows as MaxPool takes them; `count_pad`: padding counts as zeros in
    the mean (PyTorch's count_include_pad; Keras' "same" pooling does not count it)."""

    count_pad: bool = True


def adaptive_bins(n: int, out: int) -> list[tuple[int, int]]:
    """[start, end) of each of `out` adaptive pooling bins over `n` pixels (PyTorch's)."""
    return [(i * n // out, math.ceil((i + 1) * n / out)) for i in range(out)]


@dataclass(frozen=True)
class AdaptivePool(LayerSpec):
    """Average (`op="avg"`) or max pooling to an `output` map of any size, PyTorch's bins.

    Output row i pools input rows floor(i*H/h) to ceil((i+1)*H/h); VGG's 7x7 on a smaller
    map repeats values. The 1x1 case is GlobalAvgPool or GlobalMaxPool."""

    name: str
    output: tuple[int, int]
    op: str = "avg"

    def __post_init__(self) -> None:
        if self.op not in ("avg", "max") or min(self.output) < 1:
            raise ValueError(f"{self.name}: adaptive pooling is 'avg' or 'max' to a map of "
                             f"at least 1x1")

    def output_shape(self, shape: Shape) -> Shape:
        return (feature_map(self.name, shape)[0], *self.output)


@dataclass(frozen=True)
class GlobalMaxPool(LayerSpec):
    """One value per channel: its map's max."""

    name: str

    def output_shape(self, shape: Shape) -> Shape:
        return (feature_map(self.name, shape)[0], 1, 1)


@dataclass(frozen=True)
class GlobalAvgPool(GlobalMaxPool):
    """One value per channel: its map's mean."""


@dataclass(frozen=True)
class ZeroPad(LayerSpec):
    """Zeros added around the map, each side its own (Keras' ZeroPadding2D, the uneven
    padding of "same" at stride 2)."""

    name: str
    top: int
    bottom: int
    left: int
    right: int

    def output_shape(self, shape: Shape) -> Shape:
        c, h, w = feature_map(self.name, shape)
        if min(self.top, self.bottom, self.left, self.right) < 0:
            raise ValueError(f"{self.name}: padding must be >= 0")
        return (c, h + self.top + self.bottom, w + self.left + self.right)


@dataclass(frozen=True)
class Flatten(LayerSpec):
    """Everything but the batch as one vector, in (channels, height, width) order."""

    name: str

    def output_shape(self, shape: Shape) -> Shape:
        return (math.prod(shape),)
