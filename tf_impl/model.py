"""Build a compare.experiment.specs ModelSpec as a Keras model, and load the shared weights."""

from __future__ import annotations

import math
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from compare.experiment import specs, stages, weights
from compare.experiment.specs.pooling import adaptive_bins, pooled_size


def _conv(layer: specs.Conv, x, norm: dict):
    # Stride 1 with an odd kernel: "same" pads (kernel - 1) / 2 each side, inside the cuDNN
    # call; a separate ZeroPadding2D would add a kernel and a copy. Strided, "same" pads
    # bottom/right only where PyTorch pads every side alike: pad explicitly.
    same = (layer.stride == 1 and layer.kernel % 2 == 1
            and layer.padding == (layer.kernel - 1) // 2)
    if layer.padding and not same:
        x = keras.layers.ZeroPadding2D(layer.padding, name=f"{layer.name}_pad")(x)
    padding = "same" if same and layer.padding else "valid"
    if layer.depthwise:
        return keras.layers.DepthwiseConv2D(layer.kernel, layer.stride, padding,
                                            use_bias=layer.bias, name=layer.name)(x)
    return keras.layers.Conv2D(layer.out_channels, layer.kernel, layer.stride, padding,
                               groups=layer.groups, use_bias=layer.bias, name=layer.name)(x)


@keras.saving.register_keras_serializable(package="cnncompare")
class Formula(keras.layers.Layer):
    """An activation by the spec's formula name (specs.FORMULAS), in the layer's dtype."""

    def __init__(self, formula: str, alpha: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.formula, self.alpha = formula, alpha

    def call(self, x):
        return ACTIVATIONS[self.formula](x, self.alpha)

    def get_config(self):
        return {**super().get_config(), "formula": self.formula, "alpha": self.alpha}


def _hard_sigmoid(x):
    return keras.ops.relu6(x + 3.0) / 6.0


# Each activation formula (specs.FORMULAS) in keras.ops: (x, alpha) -> output.
ACTIVATIONS = {
    "sigmoid": lambda x, alpha: keras.ops.sigmoid(x),
    "tanh": lambda x, alpha: keras.ops.tanh(x),
    "silu": lambda x, alpha: keras.ops.silu(x),
    # GELU from its formula: TensorFlow's fused kernel is 1e-9 off in float64 (at x = -5),
    # over the float64 parity gate's share
    "gelu": lambda x, alpha: 0.5 * x * (1.0 + keras.ops.erf(x * math.sqrt(0.5))),
    "gelu_tanh": lambda x, alpha: 0.5 * x * (1.0 + keras.ops.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x))),
    "hard_sigmoid": lambda x, alpha: _hard_sigmoid(x),
    "hard_sigmoid_0.2": lambda x, alpha: keras.ops.clip(0.2 * x + 0.5, 0.0, 1.0),
    "hard_swish": lambda x, alpha: x * _hard_sigmoid(x),
    "leaky_relu": lambda x, alpha: keras.ops.leaky_relu(x, alpha),
    "elu": lambda x, alpha: keras.ops.elu(x, alpha),
}


@keras.saving.register_keras_serializable(package="cnncompare")
class TorchPool(keras.layers.Layer):
    """PyTorch's max or average pooling (specs.MaxPool, AvgPool) where Keras' own differs:
    a stride other than the window, padding that never wins a max (-inf) and that the mean
    counts or not (`count_pad`), ceil mode's last partial window (not counted)."""

    def __init__(self, op: str, size: int, stride: int, padding: int, ceil_mode: bool,
                 count_pad: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.op, self.size, self.stride, self.padding = op, size, stride, padding
        self.ceil_mode, self.count_pad = ceil_mode, count_pad

    def _extra(self, n: int) -> int:
        """Pixels past the bottom (right) padding that ceil mode's last window reaches."""
        out = pooled_size(n, self.size, self.stride, self.padding,
                                        self.ceil_mode)
        return max(0, (out - 1) * self.stride + self.size - (n + 2 * self.padding))

    def call(self, x):
        h, w = int(x.shape[1]), int(x.shape[2])
        p, (eh, ew) = self.padding, (self._extra(h), self._extra(w))
        pads = [[0, 0], [p, p + eh], [p, p + ew], [0, 0]]
        window, strides = (self.size, self.size), (self.stride, self.stride)
        if self.op == "max":
            x = keras.ops.pad(x, pads, constant_values=float("-inf"))
            return keras.ops.max_pool(x, window, strides, "valid")
        summed = keras.ops.average_pool(keras.ops.pad(x, pads), window, strides, "valid")
        counted = np.pad(np.ones((1, h, w, 1)), [[0, 0], [p, p], [p, p], [0, 0]],
                         constant_values=1.0 if self.count_pad else 0.0)
        counted = np.pad(counted, [[0, 0], [0, eh], [0, ew], [0, 0]])
        share = keras.ops.average_pool(keras.ops.convert_to_tensor(counted, x.dtype), window,
                                       strides, "valid")  # counted pixels / window area
        return summed / share

    def get_config(self):
        return {**super().get_config(), "op": self.op, "size": self.size,
                "stride": self.stride, "padding": self.padding, "ceil_mode": self.ceil_mode,
                "count_pad": self.count_pad}


@keras.saving.register_keras_serializable(package="cnncompare")
class AdaptivePool(keras.layers.Layer):
    """PyTorch's adaptive average or max pooling to an `output` map (specs.AdaptivePool's
    bins), rows then columns: a rectangle's mean or max is one of its rows' means or maxes."""

    def __init__(self, op: str, output: tuple[int, int], **kwargs):
        super().__init__(**kwargs)
        self.op, self.output_size = op, tuple(output)

    def call(self, x):
        reduce = keras.ops.mean if self.op == "avg" else keras.ops.max
        for axis, out in ((1, self.output_size[0]), (2, self.output_size[1])):
            n = int(x.shape[axis])
            parts = [reduce(keras.ops.take(x, list(range(start, end)), axis=axis), axis=axis,
                            keepdims=True)
                     for start, end in adaptive_bins(n, out)]
            x = keras.ops.concatenate(parts, axis=axis) if len(parts) > 1 else parts[0]
        return x

    def get_config(self):
        return {**super().get_config(), "op": self.op, "output": list(self.output_size)}


@keras.saving.register_keras_serializable(package="cnncompare")
class LayerScale(keras.layers.Layer):
    """Each channel times its learned factor `gamma` (specs.ChannelScale; Keras' ConvNeXt
    names it a layer scale)."""

    def build(self, input_shape):
        self.gamma = self.add_weight(shape=(int(input_shape[-1]),), initializer="ones",
                                     name="gamma")

    def call(self, x):
        return x * keras.ops.cast(self.gamma, x.dtype)


def _pool(layer: specs.MaxPool, x, norm: dict):
    average = isinstance(layer, specs.AvgPool)
    if layer.step == layer.size and not layer.padding and not layer.ceil_mode:
        kind = keras.layers.AveragePooling2D if average else keras.layers.MaxPooling2D
        return kind(layer.size, name=layer.name)(x)
    return TorchPool("avg" if average else "max", layer.size, layer.step, layer.padding,
                     layer.ceil_mode, getattr(layer, "count_pad", True), name=layer.name)(x)


def _dropout(layer: specs.Dropout, x, norm: dict):
    # per sample: one draw for all of a sample's values (stochastic depth)
    noise = (None, *([1] * (len(x.shape) - 1))) if layer.per_sample else None
    return keras.layers.Dropout(layer.rate, noise_shape=noise, name=layer.name)(x)


def _affine(layer: specs.Affine, x, norm: dict):
    # float64 arrays: Keras would round Python numbers to float32 first, and a
    # Normalization's 1/std is no float32 number
    scale, offset = layer.per_channel(int(x.shape[-1]))
    return keras.layers.Rescaling(scale, offset, name=layer.name)(x)


def _merge(layer: specs.Merge, x, norm: dict):
    found = [_build(path, x, norm) for path in layer.branches]
    kind = {"add": keras.layers.Add, "multiply": keras.layers.Multiply,
            "concat": lambda name: keras.layers.Concatenate(axis=-1, name=name)}[layer.op]
    return kind(name=layer.name)(found)


def _residual(layer: specs.Residual, x, norm: dict):
    return keras.layers.Add(name=layer.name)([_build(layer.shortcut, x, norm),
                                              _build(layer.layers, x, norm)])


# Each spec kind's Keras layers: (spec layer, input tensor, BatchNorm settings) -> output.
# Keras' BatchNorm momentum is the share kept from the old statistic: 1 - PyTorch's.
KERAS_LAYERS = {
    specs.Conv: _conv,
    specs.BatchNorm: lambda layer, x, norm: keras.layers.BatchNormalization(
        momentum=1.0 - layer.settings(norm)[0], epsilon=layer.settings(norm)[1],
        name=layer.name)(x),
    specs.LayerNorm: lambda layer, x, norm: keras.layers.LayerNormalization(
        axis=-1, epsilon=layer.epsilon, name=layer.name)(x),
    specs.ReLU: lambda layer, x, norm: keras.layers.ReLU(layer.max_value, name=layer.name)(x),
    specs.Activation: lambda layer, x, norm: Formula(layer.formula, layer.alpha,
                                                     name=layer.name)(x),
    specs.MaxPool: _pool,
    specs.AvgPool: _pool,
    specs.AdaptivePool: lambda layer, x, norm: AdaptivePool(layer.op, layer.output,
                                                            name=layer.name)(x),
    specs.GlobalMaxPool: lambda layer, x, norm: keras.layers.GlobalMaxPooling2D(
        keepdims=True, name=layer.name)(x),
    specs.GlobalAvgPool: lambda layer, x, norm: keras.layers.GlobalAveragePooling2D(
        keepdims=True, name=layer.name)(x),
    specs.ZeroPad: lambda layer, x, norm: keras.layers.ZeroPadding2D(
        ((layer.top, layer.bottom), (layer.left, layer.right)), name=layer.name)(x),
    specs.Flatten: lambda layer, x, norm: keras.layers.Flatten(name=layer.name)(x),
    specs.Dense: lambda layer, x, norm: keras.layers.Dense(
        layer.out_features, use_bias=layer.bias, name=layer.name)(x),
    specs.Dropout: _dropout,
    specs.Scale: lambda layer, x, norm: keras.layers.Rescaling(np.float64(layer.factor),
                                                               name=layer.name)(x),
    specs.Affine: _affine,
    specs.ChannelScale: lambda layer, x, norm: LayerScale(name=layer.name)(x),
    specs.Residual: _residual,
    specs.Merge: _merge,
}


def _build(layers, x, norm: dict):
    for layer in layers:
        if type(layer) not in KERAS_LAYERS:
            raise TypeError(f"no Keras build for {layer!r}")
        x = KERAS_LAYERS[type(layer)](layer, x, norm)
    return x


def build_model(spec: specs.ModelSpec, bn_momentum: float = 0.1, bn_epsilon: float = 1e-5,
                placement: tuple[str, ...] | None = None) -> keras.Model:
    """The spec as a Keras model (NHWC input) under the global dtype policy: a functional
    model, or with `placement` (a device per stage, --parallel model) a StagedModel whose
    stages compare.experiment.stages cuts.

    Under a mixed policy the logits are cast to float32 by a final linear activation,
    as the Keras mixed-precision guide recommends (softmax/loss in float32); under the parity
    probe's float64 policy they stay float64.
    """
    c, h, w = spec.input_shape
    norm = {"momentum": bn_momentum, "epsilon": bn_epsilon}
    if placement is None or len(placement) == 1:
        inputs = keras.Input((h, w, c), name="images")
        x = _build(spec.layers, inputs, norm)
        outputs = keras.layers.Activation("linear", dtype=_logits_dtype(),
                                          name="logits_float32")(x)
        return keras.Model(inputs, outputs, name=spec.name)
    parts, shape = [], (h, w, c)
    for stage, device in zip(stages.cut(spec, len(placement)), placement):
        with tf.device(device):  # the stage's variables are made, so they live, here
            inputs = keras.Input(shape, name=f"stage{stage.index}_input")
            x = _build(spec.layers[stage.start:stage.end], inputs, norm)
            parts.append(keras.Model(inputs, x, name=f"stage{stage.index}"))
        shape = tuple(x.shape[1:])
    model = StagedModel(parts, placement, name=spec.name)
    model.build((None, h, w, c))
    return model


def _logits_dtype() -> str:
    """float32 under float32 and mixed policies; float64 under the parity probe's."""
    return keras.mixed_precision.global_policy().variable_dtype


class StagedModel(keras.Model):
    """Model parallelism: the spec's stages, each a functional model whose variables live
    on its device, called in order, each under tf.device of its device, inside the one
    training step (its gradient ops run beside their forward ops, TensorFlow's default)."""

    def __init__(self, parts: list[keras.Model], placement: tuple[str, ...], **kwargs):
        super().__init__(**kwargs)
        self.parts, self.placement = list(parts), tuple(placement)
        self.to_float32 = keras.layers.Activation("linear", dtype=_logits_dtype(),
                                                  name="logits_float32")

    def call(self, x, training=None):
        for part, device in zip(self.parts, self.placement):
            with tf.device(device):
                x = part(x, training=training)
        return self.to_float32(x)


def _conv_variables(layer: specs.Conv, k, spec: specs.ModelSpec) -> dict[str, tuple]:
    if layer.depthwise:  # (C, 1, H, W) <-> DepthwiseConv2D's (H, W, C, 1)
        found = {"weight": (k.kernel, lambda a: a.transpose(2, 3, 0, 1),
                            lambda a: a.transpose(2, 3, 0, 1))}
    else:  # OIHW <-> HWIO (grouped: I is the inputs of a group)
        found = {"weight": (k.kernel, lambda a: a.transpose(2, 3, 1, 0),
                            lambda a: a.transpose(3, 2, 0, 1))}
    return {**found, "bias": (k.bias, _same, _same)} if layer.bias else found


def _dense_variables(layer: specs.Dense, k, spec: specs.ModelSpec) -> dict[str, tuple]:
    chw = weights.flatten_input_shape(spec, layer.name)
    if chw is None:  # (out, in) -> (in, out)
        found = {"weight": (k.kernel, lambda a: a.T, lambda a: a.T)}
    else:  # also reorder the inputs: torch flattens CHW, Keras HWC
        found = {"weight": (k.kernel, lambda a: weights.chw_to_hwc_rows(a, chw).T,
                            lambda a: weights.hwc_to_chw_rows(a.T, chw))}
    return {**found, "bias": (k.bias, _same, _same)} if layer.bias else found


def _batchnorm_variables(layer: specs.BatchNorm, k, spec: specs.ModelSpec) -> dict[str, tuple]:
    return {part: (variable, _same, _same) for part, variable in (
        ("weight", k.gamma), ("bias", k.beta), ("running_mean", k.moving_mean),
        ("running_var", k.moving_variance))}


def _norm_variables(layer: specs.LayerNorm, k, spec: specs.ModelSpec) -> dict[str, tuple]:
    return {"weight": (k.gamma, _same, _same), "bias": (k.beta, _same, _same)}


# Each weighted spec kind's Keras variables by part, with their converters from and to the
# canonical layout: (spec layer, Keras layer, spec) -> {part: (variable, to Keras, back)}.
KERAS_VARIABLES: dict[type, Callable[..., dict[str, tuple]]] = {
    specs.Conv: _conv_variables, specs.Dense: _dense_variables,
    specs.BatchNorm: _batchnorm_variables, specs.LayerNorm: _norm_variables,
    specs.ChannelScale: lambda layer, k, spec: {"weight": (k.gamma, _same, _same)}}


def _variables(model: keras.Model, spec: specs.ModelSpec) -> dict[str, tuple]:
    """Canonical weight name -> (Keras variable, canonical -> Keras converter, inverse)."""
    return {f"{layer.name}.{part}": found
            for layer in specs.walk(spec.layers) if type(layer) in KERAS_VARIABLES
            for part, found in KERAS_VARIABLES[type(layer)](
                layer, _layer(model, layer.name), spec).items()}


def _layer(model: keras.Model, name: str):
    """The Keras layer called `name`, in the model or in one of its stages."""
    for part in getattr(model, "parts", [model]):
        try:
            return part.get_layer(name)
        except ValueError:
            continue
    raise ValueError(f"no layer {name!r} in {model.name}")


def _same(a: np.ndarray) -> np.ndarray:
    return a


def load_weights(model: keras.Model, weights: dict[str, np.ndarray],
                 spec: specs.ModelSpec) -> None:
    """Copy canonical-layout weights (compare.experiment.weights) into the Keras model."""
    for name, (variable, to_keras, _) in _variables(model, spec).items():
        value = to_keras(weights[name])
        if tuple(variable.shape) != value.shape:
            raise ValueError(f"{name}: model has {tuple(variable.shape)}, weights {value.shape}")
        variable.assign(value)


def export_weights(model: keras.Model, spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """The model's weights in the canonical layout, numpy in the variables' dtype (float32,
    or float64 under the parity probe's policy)."""
    return {name: from_keras(np.asarray(keras.ops.convert_to_numpy(variable)))
            for name, (variable, _, from_keras) in _variables(model, spec).items()}


def export_gradients(model: keras.Model, gradients: dict,
                     spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """Gradients keyed by the model's variable paths, converted to the canonical layout."""
    out = {}
    for name, (variable, _, from_keras) in _variables(model, spec).items():
        if specs.trainable(name):
            out[name] = from_keras(np.asarray(gradients[variable.path]))  # variable's dtype
    return out


def count_parameters(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))


def describe_model(spec: specs.ModelSpec) -> dict:
    """The spec as this framework builds it: its trainable parameters, counted by the
    framework (`cnncompare models`)."""
    return {"parameters": count_parameters(build_model(spec))}
