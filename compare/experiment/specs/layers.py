"""The weighted and normalising layer kinds of a spec: convolutions, dense layers, the norms,
and fixed or learned per-channel scales."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from compare.experiment.specs.base import LayerSpec, Shape, constant_weights


@dataclass(frozen=True)
class Conv(LayerSpec):
    """2-D convolution, padded `padding` pixels on every side; `groups=in=out` is depthwise.

    PyTorch's symmetric padding; the Keras build pads explicitly where "same" would pad
    unevenly. `groups` splits the channels into groups convolved apart."""

    name: str
    in_channels: int
    out_channels: int
    kernel: int
    padding: int = 0  # pixels each side
    bias: bool = True
    stride: int = 1
    groups: int = 1

    def __post_init__(self) -> None:
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
        weight: dict[str, Shape] = {"weight": (self.out_channels, self.in_channels // self.groups,
                                              self.kernel, self.kernel)}
        return {**weight, "bias": (self.out_channels,)} if self.bias else weight

    def macs(self, output: Shape) -> int:
        c, h, w = output
        return self.fan_in * c * h * w

    @property
    def fan_in(self) -> int:
        return self.in_channels // self.groups * self.kernel * self.kernel


@dataclass(frozen=True)
class Dense(LayerSpec):
    """Fully connected layer on a (features,) vector."""

    name: str
    in_features: int
    out_features: int
    bias: bool = True

    def output_shape(self, shape: Shape) -> Shape:
        if shape != (self.in_features,):
            raise ValueError(f"{self.name}: expects ({self.in_features},), gets {shape}")
        return (self.out_features,)

    def parameter_shapes(self) -> dict[str, Shape]:
        weight: dict[str, Shape] = {"weight": (self.out_features, self.in_features)}
        return {**weight, "bias": (self.out_features,)} if self.bias else weight

    def macs(self, output: Shape) -> int:
        return self.in_features * self.out_features

    @property
    def fan_in(self) -> int:
        return self.in_features


@dataclass(frozen=True)
class BatchNorm(LayerSpec):
    """Batch normalisation over each channel (both frameworks' conventions mapped).

    `epsilon` and `momentum` (PyTorch's convention: the batch statistic's share of the
    running one) where the network fixes its own, as a ported network does; None: the
    run's (RunConfig.bn_epsilon, bn_momentum)."""

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
        return constant_weights(self.channels, weight=1.0, bias=0.0, running_mean=0.0,
                                running_var=1.0)


@dataclass(frozen=True)
class LayerNorm(LayerSpec):
    """Layer normalisation over the channels at each position, learned scale and shift.

    ConvNeXt's: PyTorch's LayerNorm on channels-last (or LayerNorm2d), Keras'
    LayerNormalization on its last axis. On a (features,) vector it normalises those."""

    name: str
    channels: int
    epsilon: float = 1e-5

    def output_shape(self, shape: Shape) -> Shape:
        if shape[0] != self.channels:
            raise ValueError(f"{self.name}: expects {self.channels} channels, gets {shape}")
        return shape

    def parameter_shapes(self) -> dict[str, Shape]:
        return {"weight": (self.channels,), "bias": (self.channels,)}

    def initial_weights(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Scale 1, shift 0 (both frameworks' own)."""
        return constant_weights(self.channels, weight=1.0, bias=0.0)


@dataclass(frozen=True)
class ChannelScale(LayerSpec):
    """Each channel times a learned factor (ConvNeXt's layer scale)."""

    name: str
    channels: int

    def output_shape(self, shape: Shape) -> Shape:
        if shape[0] != self.channels:
            raise ValueError(f"{self.name}: expects {self.channels} channels, gets {shape}")
        return shape

    def parameter_shapes(self) -> dict[str, Shape]:
        return {"weight": (self.channels,)}

    def initial_weights(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Factor 1: the identity until trained."""
        return constant_weights(self.channels, weight=1.0)


@dataclass(frozen=True)
class Scale(LayerSpec):
    """Multiply by a constant."""

    name: str
    per_value: ClassVar[bool] = True
    factor: float


@dataclass(frozen=True)
class Affine(LayerSpec):
    """Fixed per-channel `x * scale + offset` (Keras' Rescaling and Normalization).

    One value in `scale` or `offset` applies to every channel; no weights are trained."""

    name: str
    scale: tuple[float, ...]
    offset: tuple[float, ...]

    def output_shape(self, shape: Shape) -> Shape:
        for what, values in (("scale", self.scale), ("offset", self.offset)):
            if len(values) not in (1, shape[0]):
                raise ValueError(f"{self.name}: {len(values)} {what} values for "
                                 f"{shape[0]} channels")
        return shape

    def per_channel(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """(scale, offset) as float64 vectors of `channels` values."""
        scale, offset = (np.broadcast_to(np.asarray(v, np.float64), (channels,)).copy()
                         for v in (self.scale, self.offset))
        return scale, offset
