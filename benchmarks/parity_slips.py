"""The smallest semantic slips one can make in Keras' twin of a network, each a patch of one
builder table in tf_impl/model.py: what the float64 parity gate exists to catch.
tests/test_parity_slips.py proves the gate fails each on examples/my_cnn.py;
benchmarks/parity_float64.py --slips measures each on every built-in network it applies to.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator


def _keras_batchnorm(momentum: float | None = None, epsilon: float | None = None):
    """Keras' BatchNorm build with a momentum (PyTorch's convention) or epsilon of its own."""
    def build(layer, x, norm):
        import keras
        run_momentum, run_epsilon = layer.settings(norm)
        return keras.layers.BatchNormalization(
            momentum=1.0 - (run_momentum if momentum is None else momentum),
            epsilon=run_epsilon if epsilon is None else epsilon, name=layer.name)(x)
    return build


def _keras_same_padding(layer, x, norm):
    """Every convolution padded by Keras' "same": a strided one then pads bottom/right only."""
    import keras
    padding = "same" if layer.padding else "valid"
    if layer.depthwise:
        return keras.layers.DepthwiseConv2D(layer.kernel, layer.stride, padding,
                                            use_bias=layer.bias, name=layer.name)(x)
    return keras.layers.Conv2D(layer.out_channels, layer.kernel, layer.stride, padding,
                               use_bias=layer.bias, name=layer.name)(x)


def _first_kernel_transposed(original):
    """Conv variables as `original` gives them, but the network's first convolution's kernel
    loaded with height and width swapped (OIHW -> WHIO, not HWIO)."""
    def variables(layer, k, spec):
        from compare.experiment import specs
        found = original(layer, k, spec)
        first = next(c.name for c in specs.walk(spec.layers) if isinstance(c, specs.Conv))
        if layer.name == first:
            def swap(a):  # its own inverse
                return a.transpose(3, 2, 1, 0)
            found["weight"] = (found["weight"][0], swap, swap)
        return found
    return variables


def _has_batchnorm(spec) -> bool:
    from compare.experiment import specs
    return any(isinstance(layer, specs.BatchNorm) for layer in specs.walk(spec.layers))


def _has_uneven_same_padding(spec) -> bool:
    """A padded strided convolution, which Keras' "same" would pad unevenly."""
    from compare.experiment import specs
    return any(isinstance(layer, specs.Conv) and layer.stride > 1 and layer.padding
               for layer in specs.walk(spec.layers))


@dataclass(frozen=True)
class Slip:
    table: str  # the tf_impl.model table patched
    kind: str  # the spec kind whose entry is patched
    make: Callable[[Any], Any]  # the patch, from the kind's own entry
    figure: str  # the gated figure it must move past its limit
    applies: Callable[[Any], bool]  # whether the network has what the slip changes


SLIPS = {
    "batchnorm-epsilon-1e-3": Slip("KERAS_LAYERS", "BatchNorm",
                                   lambda _: _keras_batchnorm(epsilon=1e-3),
                                   "grad_max_rel_diff", _has_batchnorm),
    "batchnorm-momentum-0.01": Slip("KERAS_LAYERS", "BatchNorm",
                                    lambda _: _keras_batchnorm(momentum=0.01),
                                    "bn_running_stats_max_rel_diff", _has_batchnorm),
    "padding-bottom-right": Slip("KERAS_LAYERS", "Conv", lambda _: _keras_same_padding,
                                 "logits_max_abs_diff", _has_uneven_same_padding),
    "transposed-kernel": Slip("KERAS_VARIABLES", "Conv", _first_kernel_transposed,
                              "logits_max_abs_diff", lambda spec: True),
}


@contextmanager
def slipped(name: str) -> Iterator[None]:
    """Keras' twin with slip `name` made, for the duration."""
    from compare.experiment import specs
    from tf_impl import model as tf_model
    slip = SLIPS[name]
    entries, kind = getattr(tf_model, slip.table), getattr(specs, slip.kind)
    original = entries[kind]
    entries[kind] = slip.make(original)
    try:
        yield
    finally:
        entries[kind] = original
