"""Shared initial weights: generated once in numpy from the seed, loaded into both builds.

Initialisers (documented so either framework's build can be checked against them):
- conv and dense weights and biases: uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)], which
  is PyTorch's default (kaiming_uniform with a=sqrt(5)); fan_in = in_channels * k * k for
  a conv, in_features for a dense layer;
- BatchNorm: weight 1, bias 0, running mean 0, running variance 1.
Weights are in the canonical layout (`specs.parameter_shapes`); each framework converts.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from compare.experiment import specs

if TYPE_CHECKING:  # annotations only
    from compare.experiment.config import RunConfig

# Separate stream from the data plan's, so changing one never shifts the other.
INIT_STREAM = 0x1417


def initial_weights(spec: specs.ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Float32 weights for every entry of `specs.parameter_shapes(spec)`, each layer's from
    its spec (LayerSpec.initial_weights), drawn from one stream in the layers' order."""
    rng = np.random.default_rng([INIT_STREAM, seed])
    return {f"{layer.name}.{part}": value for layer in specs.walk(spec.layers)
            for part, value in layer.initial_weights(rng).items()}


def for_run(spec: specs.ModelSpec, config: RunConfig) -> dict[str, np.ndarray] | None:
    """The initial weights a run of `config` (a RunConfig) loads into both builds: the file
    --init-weights names, else the seed's draw; None with --no-shared-init (each framework
    initialises its own way)."""
    if not config.shared_init:
        return None
    if config.init_weights:
        return read_file(config.init_weights, spec)
    return initial_weights(spec, config.seed)


def read_file(path: str | Path, spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """The weights of `spec` in the NPZ file `path` (canonical layout, as `cnncompare port`
    writes them), float32; ValueError in one line where they do not fit (check)."""
    try:
        with np.load(Path(path).expanduser(), allow_pickle=False) as found:
            weights = {name: np.asarray(found[name], np.float32) for name in found.files}
    except (OSError, ValueError) as exc:
        raise ValueError(f"not an NPZ file of weights ({type(exc).__name__}: {exc})") from None
    check(spec, weights)
    return weights


def digest(path: str | Path) -> str:
    """The file's SHA-256 (hex), recorded with a run that starts from it."""
    return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()


def check(spec: specs.ModelSpec, weights: dict[str, np.ndarray]) -> None:
    """ValueError in one line unless `weights` hold every weight of `spec` (canonical layout,
    running statistics included), each of its shape and finite, and nothing else."""
    expected = specs.parameter_shapes(spec)
    missing = [name for name in expected if name not in weights]
    extra = [name for name in weights if name not in expected]
    if missing or extra:
        said = (f"lack {', '.join(missing[:3])}" if missing else
                f"hold {', '.join(extra[:3])}, which {spec.name} has not")
        raise ValueError(f"the weights {said}{' ...' if len(missing or extra) > 3 else ''}")
    for name, shape in expected.items():
        value = weights[name]
        if tuple(value.shape) != tuple(shape):
            raise ValueError(f"{name} is {tuple(value.shape)}, {spec.name} needs "
                             f"{tuple(shape)}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"{name} holds NaN or infinite values")


def chw_to_hwc_rows(weight: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """Reorder a dense weight's input axis from CHW flatten order (torch) to HWC (Keras).

    `weight` is (out, C*H*W) in the canonical layout; the result is (out, H*W*C).
    """
    c, h, w = chw
    return weight.reshape(len(weight), c, h, w).transpose(0, 2, 3, 1).reshape(len(weight), -1)


def hwc_to_chw_rows(weight: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """The inverse of `chw_to_hwc_rows`."""
    c, h, w = chw
    return weight.reshape(len(weight), h, w, c).transpose(0, 3, 1, 2).reshape(len(weight), -1)


def flatten_input_shape(spec: specs.ModelSpec, dense_name: str) -> tuple[int, int, int] | None:
    """The (C, H, W) map flattened into `dense_name`, or None if it is not after a flatten."""
    layers = list(specs.walk(spec.layers))
    for i, layer in enumerate(layers):
        if layer.name != dense_name:
            continue
        before = i - 1  # past what acts on each value alone: it keeps the order
        while before >= 0 and layers[before].per_value:
            before -= 1
        if before >= 0 and isinstance(layers[before], specs.Flatten):
            shape = specs.input_shape_of(spec, layers[before].name)
            return shape if len(shape) == 3 and shape[1:] != (1, 1) else None
    return None

