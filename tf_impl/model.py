"""Build a compare.experiment.specs ModelSpec as a Keras model, and load the shared weights."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from compare.experiment import specs, stages, weights


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
    specs.ReLU: lambda layer, x, norm: keras.layers.ReLU(layer.max_value, name=layer.name)(x),
    specs.MaxPool: lambda layer, x, norm: keras.layers.MaxPooling2D(layer.size,
                                                                    name=layer.name)(x),
    specs.AvgPool: lambda layer, x, norm: keras.layers.AveragePooling2D(layer.size,
                                                                        name=layer.name)(x),
    specs.GlobalMaxPool: lambda layer, x, norm: keras.layers.GlobalMaxPooling2D(
        keepdims=True, name=layer.name)(x),
    specs.GlobalAvgPool: lambda layer, x, norm: keras.layers.GlobalAveragePooling2D(
        keepdims=True, name=layer.name)(x),
    specs.Flatten: lambda layer, x, norm: keras.layers.Flatten(name=layer.name)(x),
    specs.Dense: lambda layer, x, norm: keras.layers.Dense(
        layer.out_features, use_bias=layer.bias, name=layer.name)(x),
    specs.Scale: lambda layer, x, norm: keras.layers.Rescaling(layer.factor,
                                                               name=layer.name)(x),
    specs.Residual: _residual,
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


# Each weighted spec kind's Keras variables by part, with their converters from and to the
# canonical layout: (spec layer, Keras layer, spec) -> {part: (variable, to Keras, back)}.
KERAS_VARIABLES = {specs.Conv: _conv_variables, specs.Dense: _dense_variables,
                   specs.BatchNorm: _batchnorm_variables}


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
