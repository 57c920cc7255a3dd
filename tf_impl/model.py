"""Build a compare.specs ModelSpec as a Keras model, and load the shared weights."""

from __future__ import annotations

import keras
import numpy as np

from compare.experiment import specs, weights


def _build(layers, x, bn_momentum: float, bn_epsilon: float):
    for layer in layers:
        if isinstance(layer, specs.Conv):
            # Stride 1 with an odd kernel: "same" pads (kernel - 1) / 2 each side, inside
            # the cuDNN call; a separate ZeroPadding2D would add a kernel and a copy.
            same = layer.kernel % 2 == 1 and layer.padding == (layer.kernel - 1) // 2
            if layer.padding and not same:
                x = keras.layers.ZeroPadding2D(layer.padding, name=f"{layer.name}_pad")(x)
            x = keras.layers.Conv2D(layer.out_channels, layer.kernel,
                                    padding="same" if same and layer.padding else "valid",
                                    use_bias=layer.bias, name=layer.name)(x)
        elif isinstance(layer, specs.BatchNorm):
            # Keras' momentum is the share kept from the old statistic: 1 - torch's.
            x = keras.layers.BatchNormalization(momentum=1.0 - bn_momentum, epsilon=bn_epsilon,
                                                name=layer.name)(x)
        elif isinstance(layer, specs.ReLU):
            x = keras.layers.ReLU(name=layer.name)(x)
        elif isinstance(layer, specs.MaxPool):
            x = keras.layers.MaxPooling2D(layer.size, name=layer.name)(x)
        elif isinstance(layer, specs.GlobalMaxPool):
            x = keras.layers.GlobalMaxPooling2D(keepdims=True, name=layer.name)(x)
        elif isinstance(layer, specs.Flatten):
            x = keras.layers.Flatten(name=layer.name)(x)
        elif isinstance(layer, specs.Dense):
            x = keras.layers.Dense(layer.out_features, use_bias=layer.bias, name=layer.name)(x)
        elif isinstance(layer, specs.Scale):
            x = keras.layers.Rescaling(layer.factor, name=layer.name)(x)
        elif isinstance(layer, specs.Residual):
            branch = _build(layer.layers, x, bn_momentum, bn_epsilon)
            x = keras.layers.Add(name=layer.name)([x, branch])
        else:
            raise TypeError(f"no Keras build for {layer!r}")
    return x


def build_model(spec: specs.ModelSpec, bn_momentum: float = 0.1,
                bn_epsilon: float = 1e-5) -> keras.Model:
    """The spec as a Keras functional model (NHWC input) under the global dtype policy.

    Under a mixed policy the logits are cast to float32 by a final linear activation,
    as the Keras mixed-precision guide recommends (softmax/loss in float32).
    """
    c, h, w = spec.input_shape
    inputs = keras.Input((h, w, c), name="images")
    x = _build(spec.layers, inputs, bn_momentum, bn_epsilon)
    outputs = keras.layers.Activation("linear", dtype="float32", name="logits_float32")(x)
    return keras.Model(inputs, outputs, name=spec.name)


def _variables(model: keras.Model, spec: specs.ModelSpec) -> dict[str, tuple]:
    """Canonical weight name -> (Keras variable, canonical -> Keras converter, inverse)."""
    found = {}
    for layer in specs.walk(spec.layers):
        if isinstance(layer, specs.Conv):
            k = model.get_layer(layer.name)
            # OIHW -> HWIO
            found[f"{layer.name}.weight"] = (k.kernel, lambda a: a.transpose(2, 3, 1, 0),
                                             lambda a: a.transpose(3, 2, 0, 1))
            if layer.bias:
                found[f"{layer.name}.bias"] = (k.bias, _same, _same)
        elif isinstance(layer, specs.Dense):
            k = model.get_layer(layer.name)
            chw = weights.flatten_input_shape(spec, layer.name)
            if chw is None:  # (out, in) -> (in, out)
                found[f"{layer.name}.weight"] = (k.kernel, lambda a: a.T, lambda a: a.T)
            else:  # also reorder the inputs: torch flattens CHW, Keras HWC
                found[f"{layer.name}.weight"] = (
                    k.kernel, lambda a, s=chw: weights.chw_to_hwc_rows(a, s).T,
                    lambda a, s=chw: weights.hwc_to_chw_rows(a.T, s))
            if layer.bias:
                found[f"{layer.name}.bias"] = (k.bias, _same, _same)
        elif isinstance(layer, specs.BatchNorm):
            k = model.get_layer(layer.name)
            for part, var in (("weight", k.gamma), ("bias", k.beta),
                              ("running_mean", k.moving_mean), ("running_var", k.moving_variance)):
                found[f"{layer.name}.{part}"] = (var, _same, _same)
    return found


def _same(a: np.ndarray) -> np.ndarray:
    return a


def load_weights(model: keras.Model, weights: dict[str, np.ndarray],
                 spec: specs.ModelSpec) -> None:
    """Copy canonical-layout weights (compare.init) into the Keras model."""
    for name, (variable, to_keras, _) in _variables(model, spec).items():
        value = to_keras(weights[name])
        if tuple(variable.shape) != value.shape:
            raise ValueError(f"{name}: model has {tuple(variable.shape)}, weights {value.shape}")
        variable.assign(value)


def export_weights(model: keras.Model, spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """The model's weights in the canonical layout, float32 numpy."""
    return {name: from_keras(np.asarray(keras.ops.convert_to_numpy(variable), np.float32))
            for name, (variable, _, from_keras) in _variables(model, spec).items()}


def export_gradients(model: keras.Model, gradients: dict,
                     spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """Gradients keyed by the model's variable paths, converted to the canonical layout."""
    out = {}
    for name, (variable, _, from_keras) in _variables(model, spec).items():
        if specs.trainable(name):
            out[name] = from_keras(np.asarray(gradients[variable.path], np.float32))
    return out


def count_parameters(model: keras.Model) -> int:
    return int(sum(np.prod(v.shape) for v in model.trainable_weights))
