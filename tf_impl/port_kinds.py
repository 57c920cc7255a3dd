"""`cnncompare port`, TensorFlow's side: one reader per Keras layer kind, each giving the spec
layers that compute what the layer does (tf_impl/port.py walks the model's graph).

A reader takes the Keras layer and its `Site` (its spec name, its input's shape, whether its
output is the model's) and gives a tuple of spec layers, empty for the identity, or Refused
in one line naming the layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import keras
import numpy as np

from compare.experiment import porting, specs
from compare.experiment.porting import Refused
from compare.experiment.specs.pooling import pooled_size
from tf_impl import model as framework_model

try:  # ConvNeXt's own layers live where Keras' functional models deserialize them from
    from keras.src.applications import convnext as keras_convnext
except ImportError:  # another Keras: its layers are refused by name like any other
    keras_convnext = None


@dataclass
class Site:
    """A Keras layer where the graph calls it. `source` (the node it reads) a reader may move:
    to a padding's input when it takes in the padding, to a global pool's output when it
    undoes the flatten after it."""

    name: str  # the spec's name for it (the Keras layer's)
    where: str  # its words in refusals: "layer 'conv1' (Conv2D)"
    shape: tuple[int, ...]  # its input per image, Keras' order: (height, width, channels)
    final: bool  # its output is the model's
    taken: set[str]  # the spec names in use (new ones: porting.unique_name)
    changes: list[str]  # what the twin leaves out of the source, in words (port.json)
    source: str = ""
    pad: tuple[int, str] | None = None  # a lone even ZeroPadding2D before it: (pixels, input)
    unflatten: str | None = None  # its input is a global pool flattened: the pool's node
    implicit: set[int] = field(default_factory=set)  # ids of spec layers it may drop


def _same_padding(size: tuple[int, int], kernel: int, stride: int) -> tuple[int, ...]:
    """Keras' "same" padding of a (height, width) input: (top, bottom, left, right), the odd
    pixel at the bottom and right (TensorFlow's rule)."""
    found = []
    for n in size:
        total = max((math.ceil(n / stride) - 1) * stride + kernel - n, 0)
        found += [total // 2, total - total // 2]
    return tuple(found)


def _conv(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    where = site.where
    kernel = porting.square(layer.kernel_size, "kernel", where)
    stride = porting.square(layer.strides, "stride", where)
    if porting.square(layer.dilation_rate, "dilation", where) != 1:
        raise Refused(f"{where}: dilated convolutions are not in the spec")
    if layer.data_format != "channels_last":
        raise Refused(f"{where}: {layer.data_format}; the spec reads Keras channels_last")
    made, padding = [], 0
    if layer.padding == "same":
        height, width = site.shape[:2]
        pads = _same_padding((height, width), kernel, stride)
        if len(set(pads)) == 1:
            padding = pads[0]
        else:  # uneven: TensorFlow's odd pixel at the bottom and right, padded apart
            made.append(specs.ZeroPad(porting.unique_name(f"{site.name}_pad", site.taken),
                                      *pads))
    elif site.pad:  # the ZeroPadding2D before it, even on every side, taken in
        padding, site.source = site.pad
    channels = int(layer.kernel.shape[-2])
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        if layer.depth_multiplier != 1:
            raise Refused(f"{where}: depth multiplier {layer.depth_multiplier}; the spec's "
                          f"depthwise convolutions keep the channels")
        conv = specs.Conv(site.name, channels, channels, kernel, padding, layer.use_bias,
                          stride, channels)
    else:
        groups = layer.groups
        conv = specs.Conv(site.name, channels * groups, layer.filters, kernel, padding,
                          layer.use_bias, stride, groups)
    return (*made, conv, *_own_activation(layer, site))


def _dense(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    """On a vector a Dense; on a (height, width, channels) map, as Keras applies it to the
    last axis, a 1x1 convolution (its kernel reshaped: porting's weights copy)."""
    features = int(layer.kernel.shape[0])
    made: specs.LayerSpec
    if len(site.shape) == 1:
        made = specs.Dense(site.name, features, layer.units, layer.use_bias)
    elif len(site.shape) == 3:
        made = specs.Conv(site.name, features, layer.units, 1, 0, layer.use_bias)
    else:
        raise Refused(f"{site.where}: a dense layer on a {site.shape} input; the spec's read "
                      f"vectors and maps")
    return (made, *_own_activation(layer, site))


def _own_activation(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    name = _name_of(layer)
    if name == "linear":
        return ()
    return _activation(name, porting.unique_name(f"{site.name}_activation", site.taken), site)


def _formula(formula: str, alpha: float | None = None):
    return lambda name: specs.Activation(name, formula, alpha)


# Each Keras activation by name (keras.activations) as a spec layer; None: the identity.
# Keras 3's hard_sigmoid is relu6(x + 3) / 6, its gelu exact unless asked, leaky_relu's slope
# 0.2 and elu's alpha 1 when named alone.
ACTIVATIONS = {
    "linear": None,
    "relu": lambda name: specs.ReLU(name),
    "relu6": lambda name: specs.ReLU(name, 6.0),
    "sigmoid": _formula("sigmoid"),
    "tanh": _formula("tanh"),
    "silu": _formula("silu"),
    "swish": _formula("silu"),
    "gelu": _formula("gelu"),
    "hard_sigmoid": _formula("hard_sigmoid"),
    "hard_silu": _formula("hard_swish"),
    "hard_swish": _formula("hard_swish"),
    "leaky_relu": _formula("leaky_relu", float(np.float32(0.2))),  # see _leaky_slope
    "elu": _formula("elu", 1.0),
}


def _activation(function: str, name: str, site: Site) -> tuple[specs.LayerSpec, ...]:
    """An activation by name; the model's final softmax left out (the twin gives logits,
    the loss applies softmax), port.json saying so; any other softmax refused."""
    if function == "softmax" and site.final:
        site.changes.append(f"{site.where}: the final softmax is left out; the twin gives the "
                            f"logits it would turn into probabilities")
        return ()
    if function not in ACTIVATIONS:
        hint = (" before the output (the spec's networks end in logits)"
                if function == "softmax" else "")
        raise Refused(f"{site.where}: activation {function!r}{hint} is not in the spec (it "
                      f"reads {', '.join(ACTIVATIONS)})")
    made = ACTIVATIONS[function]
    return (made(name),) if made else ()


def _leaky_slope(slope: float) -> float:
    """Keras' leaky_relu as TensorFlow computes it: its slope is the LeakyRelu op's float32
    attribute (0.1 becomes float32's nearest, in float64 too)."""
    return float(np.float32(slope))


def _relu(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    slope, cap = float(layer.negative_slope), layer.max_value
    if layer.threshold or cap not in (None, 6.0) or (slope and cap is not None):
        raise Refused(f"{site.where}: a thresholded ReLU, or one capped other than at 6 or "
                      f"both leaky and capped, is not in the spec")
    if slope:  # uncapped: Keras computes it as leaky_relu
        return (specs.Activation(site.name, "leaky_relu", _leaky_slope(slope)),)
    return (specs.ReLU(site.name, None if cap is None else 6.0),)


def _batchnorm(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    if layer.axis not in (-1, len(site.shape)) or not (layer.center and layer.scale):
        raise Refused(f"{site.where}: BatchNormalization over axis {layer.axis} or without "
                      f"its scale and shift is not in the spec")
    # Keras' momentum is the share kept from the old statistic: 1 - PyTorch's
    return (specs.BatchNorm(site.name, int(layer.gamma.shape[0]), epsilon=float(layer.epsilon),
                            momentum=round(1.0 - float(layer.momentum), 12)),)


def _layernorm(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    axes = tuple(layer.axis) if isinstance(layer.axis, (list, tuple)) else (layer.axis,)
    if axes not in ((-1,), (len(site.shape),)) or layer.rms_scaling or not (
            layer.center and layer.scale):
        raise Refused(f"{site.where}: LayerNormalization over axes {axes}, or without its "
                      f"scale and shift, is not in the spec (it normalises the last axis)")
    return (specs.LayerNorm(site.name, int(site.shape[-1]), float(layer.epsilon)),)


def _pool(kind: type):
    """Keras' pooling as the spec's: "valid" as is; "same" (its padding never counted: -inf
    for max, left out of the mean) as symmetric padding and/or ceil mode where that takes the
    same windows, else refused."""
    def read(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
        size = porting.square(layer.pool_size, "window", site.where)
        stride = porting.square(layer.strides, "stride", site.where)
        step = None if stride == size else stride
        if layer.padding == "valid":
            return (kind(site.name, size, step),)
        height, width = site.shape[:2]
        top, _, left, _ = _same_padding((height, width), size, stride)
        average = {"count_pad": False} if kind is specs.AvgPool else {}
        for ceil_mode in (False, True):
            if top == left <= size // 2 and all(
                    pooled_size(n, size, stride, top, ceil_mode) == math.ceil(n / stride)
                    for n in (height, width)):
                return (kind(site.name, size, step, top, ceil_mode, **average),)
        raise Refused(f"{site.where}: 'same' pooling of a {height}x{width} map by "
                      f"{size}x{size} windows at stride {stride} takes windows no symmetric "
                      f"padding or ceil mode takes")
    return read


def _twin_pool(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    """tf_impl.model's TorchPool (the Keras twin of a spec's pooling), read back."""
    step = None if layer.stride == layer.size else layer.stride
    if layer.op == "max":
        return (specs.MaxPool(site.name, layer.size, step, layer.padding, layer.ceil_mode),)
    return (specs.AvgPool(site.name, layer.size, step, layer.padding, layer.ceil_mode,
                          layer.count_pad),)


def _global(kind: type):
    """Keeps (1, 1, C); without keepdims Keras flattens too (a Reshape to (1, 1, C) after it,
    EfficientNet's squeeze-and-excitation, reads the pool's output)."""
    def read(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
        pooled = kind(site.name)
        if layer.keepdims:
            return (pooled,)
        flat = specs.Flatten(porting.unique_name(f"{site.name}_flatten", site.taken))
        site.implicit.add(id(flat))
        return pooled, flat
    return read


def _reshape(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    target = tuple(layer.target_shape)
    if site.unflatten and target == (1, 1, *site.shape):
        site.source = site.unflatten
        return ()
    if target == tuple(site.shape):
        return ()
    raise Refused(f"{site.where}: reshapes {site.shape} to {target}; the spec reshapes only "
                  f"a global pool's vector back to its (1, 1, C) map")


def _dropout(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    """Per sample where the noise is one value per sample (stochastic depth)."""
    noise = layer.noise_shape
    per_sample = noise is not None and all(n == 1 for n in tuple(noise)[1:])
    if noise is not None and not per_sample:
        raise Refused(f"{site.where}: dropout with noise shape {noise}; the spec drops each "
                      f"value or each sample")
    return (specs.Dropout(site.name, float(layer.rate), per_sample),)


def _one(values) -> tuple[float, ...]:
    """A value or per-channel list as the spec's tuple: one value where all agree."""
    found = np.asarray(values, np.float64).reshape(-1).tolist()
    return (found[0],) if len(set(found)) == 1 else tuple(found)


def _rescaling(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    """Its scale and offset as Keras computes with them: cast as its call casts them (Python
    numbers pass through float32 there: 1/255 becomes float32's nearest)."""
    scale, offset = (keras.ops.convert_to_numpy(keras.ops.cast(v, "float64"))
                     for v in (layer.scale, layer.offset))
    if scale.ndim == 0 and not offset.any():
        return (specs.Scale(site.name, float(scale)),)
    return (specs.Affine(site.name, _one(scale), _one(offset)),)


def _normalization(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    """Keras 3's (x - mean) / max(sqrt(variance), epsilon) (inverted: x * that + mean), its
    epsilon keras.config.epsilon(), as x * scale + offset."""
    if tuple(layer.axis) not in ((-1,), (len(site.shape),)):
        raise Refused(f"{site.where}: normalises over axes {layer.axis}; the spec's per "
                      f"channel")
    mean, variance = (np.asarray(keras.ops.convert_to_numpy(v), np.float64).reshape(-1)
                      for v in (layer.mean, layer.variance))
    deviation = np.maximum(np.sqrt(variance), keras.config.epsilon())
    if layer.invert:
        return (specs.Affine(site.name, _one(deviation), _one(mean)),)
    return (specs.Affine(site.name, _one(1.0 / deviation), _one(-mean / deviation)),)


def _zero_padding(layer, site: Site) -> tuple[specs.LayerSpec, ...]:
    (top, bottom), (left, right) = layer.padding
    return (specs.ZeroPad(site.name, top, bottom, left, right),)


# Each Keras layer class the spec expresses, by its reader. tf_impl/port.py reads the merges
# (MERGES) and raw operations (OPERATIONS) itself, and a model inside the model as its layers.
LAYERS = {
    keras.layers.Conv2D: _conv,
    keras.layers.DepthwiseConv2D: _conv,
    keras.layers.Dense: _dense,
    keras.layers.BatchNormalization: _batchnorm,
    keras.layers.LayerNormalization: _layernorm,
    keras.layers.Activation: lambda layer, site: _activation(_name_of(layer), site.name, site),
    keras.layers.ReLU: _relu,
    keras.layers.LeakyReLU: lambda layer, site: (
        specs.Activation(site.name, "leaky_relu", _leaky_slope(layer.negative_slope)),),
    keras.layers.ELU: lambda layer, site: (specs.Activation(site.name, "elu",
                                                            float(layer.alpha)),),
    keras.layers.MaxPooling2D: _pool(specs.MaxPool),
    keras.layers.AveragePooling2D: _pool(specs.AvgPool),
    keras.layers.GlobalAveragePooling2D: _global(specs.GlobalAvgPool),
    keras.layers.GlobalMaxPooling2D: _global(specs.GlobalMaxPool),
    keras.layers.ZeroPadding2D: _zero_padding,
    keras.layers.Flatten: lambda layer, site: (specs.Flatten(site.name),),
    keras.layers.Reshape: _reshape,
    keras.layers.Identity: lambda layer, site: (),
    keras.layers.Dropout: _dropout,
    keras.layers.Rescaling: _rescaling,
    keras.layers.Normalization: _normalization,
    # the Keras twin's own layers (tf_impl.model), so a twin saved as .keras reads back
    framework_model.Formula: lambda layer, site: (
        specs.Activation(site.name, layer.formula, layer.alpha),),
    framework_model.TorchPool: _twin_pool,
    framework_model.AdaptivePool: lambda layer, site: (
        specs.AdaptivePool(site.name, tuple(layer.output_size), layer.op),),
    framework_model.LayerScale: lambda layer, site: (
        specs.ChannelScale(site.name, int(layer.gamma.shape[0])),),
}
if keras_convnext is not None:  # ConvNeXt's learned per-channel factor, stochastic depth
    LAYERS[keras_convnext.LayerScale] = lambda layer, site: (
        specs.ChannelScale(site.name, int(layer.gamma.shape[0])),)
    LAYERS[keras_convnext.StochasticDepth] = lambda layer, site: (
        specs.Dropout(site.name, float(layer.drop_path_rate), per_sample=True),)

# Each Keras merge layer as the spec's merge (specs.MERGES); concatenation on the channels.
MERGES = {keras.layers.Add: "add", keras.layers.Concatenate: "concat",
          keras.layers.Multiply: "multiply"}

# Each raw Keras operation a functional model may hold (`x + 3.0`, `a + b`), by class name:
# (merge of two tensors or None, the spec layer of a tensor and a number c).
OPERATIONS = {
    "Add": ("add", lambda name, c, first: specs.Affine(name, (1.0,), (c,))),
    "Subtract": (None, lambda name, c, first: specs.Affine(name, (1.0,), (-c,)) if first
                 else specs.Affine(name, (-1.0,), (c,))),
    "Multiply": ("multiply", lambda name, c, first: specs.Scale(name, c)),
    "Divide": (None, lambda name, c, first: specs.Scale(name, 1.0 / c) if first else None),
    "TrueDivide": (None, lambda name, c, first: specs.Scale(name, 1.0 / c) if first
                   else None),
}


def _name_of(layer) -> str:
    found = keras.activations.serialize(layer.activation)
    return found if isinstance(found, str) else found.get("config", found.get("class_name"))


def readable() -> str:
    """What the reader reads, from its tables, for refusals."""
    names = [kind.__name__ for kind in (*LAYERS, *MERGES)]
    return ", ".join([*dict.fromkeys(names), *(f"ops.{op}" for op in OPERATIONS)])
