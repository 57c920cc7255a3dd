"""The layer kinds that act on each value alone: ReLU, the other activations by formula,
and dropout.

An activation's name can mean several formulas (LeakyReLU's slope is 0.01 in PyTorch, 0.3 in
Keras' layer; hard sigmoid is x/6 + 1/2 in PyTorch and Keras 3, 0.2x + 1/2 in Keras 2): the
spec names the formula (FORMULAS) and each twin computes that one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from compare.experiment.specs.base import LayerSpec


@dataclass(frozen=True)
class ReLU(LayerSpec):
    """ReLU, or ReLU6 with `max_value=6.0` (MobileNet's)."""

    name: str
    per_value: ClassVar[bool] = True
    max_value: float | None = None

    def __post_init__(self) -> None:
        if self.max_value not in (None, 6.0):
            raise ValueError(f"{self.name}: ReLU caps at 6 (ReLU6) or not at all")


def _gelu(x: np.ndarray) -> np.ndarray:
    # 1 + erf(z) as erfc(-z): no cancellation far below 0
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    return 0.5 * x * erfc(-x / math.sqrt(2.0))


def _relu6(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0.0, 6.0)


# Each activation formula: name -> (its definition in words, a float64 numpy reference of
# (x, alpha)). The twins' builders compute these; tests check them against the reference.
# (words, numpy reference of x and alpha; alpha None where the formula takes none)
FORMULAS: dict[str, tuple[str, Callable[[np.ndarray, float | None], np.ndarray]]] = {
    "sigmoid": ("1 / (1 + exp(-x))", lambda x, a: 1.0 / (1.0 + np.exp(-x))),
    "tanh": ("tanh(x)", lambda x, a: np.tanh(x)),
    "silu": ("x * sigmoid(x) (swish)", lambda x, a: x / (1.0 + np.exp(-x))),
    "gelu": ("x * Phi(x), Phi the normal CDF (exact)", lambda x, a: _gelu(x)),
    "gelu_tanh": ("0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))",
                  lambda x, a: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                        * (x + 0.044715 * x ** 3)))),
    "hard_sigmoid": ("relu6(x + 3) / 6 (PyTorch, Keras 3)", lambda x, a: _relu6(x + 3.0) / 6.0),
    "hard_sigmoid_0.2": ("clip(0.2x + 0.5, 0, 1) (Keras 2)",
                         lambda x, a: np.clip(0.2 * x + 0.5, 0.0, 1.0)),
    "hard_swish": ("x * relu6(x + 3) / 6", lambda x, a: x * _relu6(x + 3.0) / 6.0),
    "leaky_relu": ("x, or alpha * x below 0", lambda x, a: np.where(x > 0, x, a * x)),
    "elu": ("x, or alpha * (exp(x) - 1) below 0",
            lambda x, a: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0.0)))),
}
NEEDS_ALPHA = ("leaky_relu", "elu")  # formulas whose alpha has no one default


@dataclass(frozen=True)
class Activation(LayerSpec):
    """An activation by the name of its formula (the formulas below); `alpha` for those
    whose constant differs between libraries (leaky_relu's slope, elu's scale)."""

    name: str
    per_value: ClassVar[bool] = True
    formula: str
    alpha: float | None = None  # leaky_relu's slope, elu's scale

    def __post_init__(self) -> None:
        if self.formula not in FORMULAS:
            raise ValueError(f"{self.name}: no activation formula {self.formula!r} (one of "
                             f"{', '.join(FORMULAS)})")
        if (self.alpha is None) == (self.formula in NEEDS_ALPHA):
            raise ValueError(f"{self.name}: {self.formula} "
                             f"{'needs' if self.formula in NEEDS_ALPHA else 'takes no'} alpha")

    def reference(self, x: np.ndarray) -> np.ndarray:
        """The formula in float64 numpy: what both twins must compute."""
        return FORMULAS[self.formula][1](np.asarray(x, np.float64), self.alpha)


@dataclass(frozen=True)
class Dropout(LayerSpec):
    """Dropout at `rate`, each framework drawing its own masks; `per_sample`: a whole
    sample's tensor at once (stochastic depth, on a residual branch). Off in evaluation."""

    name: str
    per_value: ClassVar[bool] = True
    rate: float
    per_sample: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"{self.name}: a dropout rate is in [0, 1)")
