"""`cnncompare port`, TensorFlow's side: read a saved Keras model through its layer graph into
the spec's layer kinds, and give a model's logits, loss and gradients on the proof batch.

    python -m tf_impl.port read MODEL.keras --dir STAGING   (started by `cnncompare port`)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from compare.run import port_worker

port_worker.quiet_framework_logs()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from compare.experiment import porting, specs  # noqa: E402
from compare.experiment.porting import Node, Refused  # noqa: E402
from tf_impl import model as framework_model  # noqa: E402 - the protocol's too

# The proof is float64 on the CPU (porting.compare_outputs), as PyTorch's side computes it: on
# a GPU host TensorFlow would otherwise compute it there, in TF32 convolutions by default.
tf.config.set_visible_devices([], "GPU")

FRAMEWORK = "tf"
SOURCE_KIND = "a saved Keras model, MODEL.keras (or .h5)"


def load(reference: str, kwargs: dict) -> keras.Model:
    """The saved Keras model at `reference`, or Refused in one line."""
    if kwargs:
        raise Refused(f"--kwargs {json.dumps(kwargs)}: a saved Keras model takes none")
    path = Path(reference).expanduser()
    if not path.is_file():
        raise Refused(f"{reference}: no such file")
    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as exc:  # noqa: BLE001 - the user's file: any failure is one line
        raise Refused(f"{reference} did not load as a Keras model: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


def _padding(layer, kernel: int, stride: int, where: str) -> int:
    """Keras' padding as the spec's pixels on each side."""
    if layer.padding == "valid":
        return 0
    if stride != 1 or kernel % 2 == 0:
        raise Refused(f"{where}: padding 'same' at stride {stride} with a {kernel}x{kernel} "
                      f"kernel pads the bottom and right only, which PyTorch cannot express "
                      f"(pad with ZeroPadding2D and use padding='valid')")
    return kernel // 2


def _conv(layer, name: str, where: str, padding: int) -> specs.Conv:
    kernel = porting.square(layer.kernel_size, "kernel", where)
    stride = porting.square(layer.strides, "stride", where)
    if porting.square(layer.dilation_rate, "dilation", where) != 1:
        raise Refused(f"{where}: dilated convolutions are not in the spec")
    if layer.data_format != "channels_last":
        raise Refused(f"{where}: {layer.data_format}; the spec reads Keras channels_last")
    own = _padding(layer, kernel, stride, where)
    if own and padding:
        raise Refused(f"{where}: padded twice (ZeroPadding2D and 'same')")
    channels = int(layer.kernel.shape[-2])
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        if layer.depth_multiplier != 1:
            raise Refused(f"{where}: depth multiplier {layer.depth_multiplier}; the spec's "
                          f"depthwise convolutions keep the channels")
        return specs.Conv(name, channels, channels, kernel, padding + own, layer.use_bias,
                          stride, channels)
    groups = getattr(layer, "groups", 1)
    return specs.Conv(name, channels * groups, layer.filters, kernel, padding + own,
                      layer.use_bias, stride, groups)


def _batchnorm(layer, name: str, where: str) -> specs.BatchNorm:
    if layer.axis not in (-1, 3, [3], [-1]) or not (layer.center and layer.scale):
        raise Refused(f"{where}: BatchNormalization over axis {layer.axis} or without its "
                      f"scale and shift is not in the spec")
    # Keras' momentum is the share kept from the old statistic: 1 - PyTorch's
    return specs.BatchNorm(name, int(layer.gamma.shape[0]), epsilon=float(layer.epsilon),
                           momentum=round(1.0 - float(layer.momentum), 12))


def _activation(name: str, function: str, where: str) -> specs.LayerSpec | None:
    """An activation by name: ReLU, ReLU6 or none (linear); anything else refused."""
    if function in ("relu", "relu6"):
        return specs.ReLU(name, 6.0 if function == "relu6" else None)
    if function == "linear":
        return None
    hint = (": the spec's networks end in logits (save the model without its final "
            "softmax; the loss applies it)" if function == "softmax" else "")
    raise Refused(f"{where}: activation {function!r} is not in the spec{hint}")


def _function_name(layer) -> str:
    found = keras.activations.serialize(layer.activation)
    return found if isinstance(found, str) else found.get("config", found.get("class_name"))


def _relu(layer, name: str, where: str) -> specs.ReLU:
    if layer.negative_slope or layer.threshold or layer.max_value not in (None, 6.0):
        raise Refused(f"{where}: a leaky, thresholded or capped (other than at 6) ReLU is "
                      f"not in the spec")
    return specs.ReLU(name, None if layer.max_value is None else 6.0)


def _pool(kind: type, layer, name: str, where: str) -> specs.MaxPool:
    size = porting.square(layer.pool_size, "window", where)
    if porting.square(layer.strides, "stride", where) != size or layer.padding != "valid":
        raise Refused(f"{where}: the spec pools size x size windows at stride size, unpadded "
                      f"(here window {layer.pool_size}, strides {layer.strides}, padding "
                      f"{layer.padding!r})")
    return kind(name, size)


def _global(kind: type, layer, name: str, where: str) -> tuple[specs.LayerSpec, ...]:
    pooled = kind(name)  # keeps (C, 1, 1): without keepdims Keras flattens too
    return (pooled,) if layer.keepdims else (pooled, specs.Flatten(f"{name}_flatten"))


def _dropout(layer, name: str, where: str) -> None:
    if layer.rate:
        raise Refused(f"{where}: dropout (rate {layer.rate}) changes training; the spec has "
                      f"none (remove it, or set rate=0, to port)")


def _rescaling(layer, name: str, where: str) -> specs.Scale:
    if layer.offset:
        raise Refused(f"{where}: a rescaling with an offset is not in the spec")
    return specs.Scale(name, float(layer.scale))


# Each Keras layer class the spec expresses: (layer, spec name, where) -> spec layer(s), or
# None for the identity. Conv2D and DepthwiseConv2D, Dense and Activation are read apart
# (their activations, the padding before them).
LAYERS = {
    keras.layers.BatchNormalization: _batchnorm,
    keras.layers.ReLU: _relu,
    keras.layers.MaxPooling2D: lambda layer, name, where: _pool(specs.MaxPool, layer, name,
                                                                where),
    keras.layers.AveragePooling2D: lambda layer, name, where: _pool(specs.AvgPool, layer, name,
                                                                    where),
    keras.layers.GlobalAveragePooling2D: lambda layer, name, where: _global(
        specs.GlobalAvgPool, layer, name, where),
    keras.layers.GlobalMaxPooling2D: lambda layer, name, where: _global(
        specs.GlobalMaxPool, layer, name, where),
    keras.layers.Flatten: lambda layer, name, where: specs.Flatten(name),
    keras.layers.Activation: lambda layer, name, where: _activation(
        name, _function_name(layer), where),
    keras.layers.Dropout: _dropout,
    keras.layers.Rescaling: _rescaling,
}
CONVOLUTIONS = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)


def _graph(model: keras.Model) -> tuple[list[Node], dict[str, str], int]:
    """The model's layer graph as porting Nodes, each weighted spec layer's Keras layer name,
    and the input's channels."""
    graph = getattr(model, "_functional", None) or model  # a Sequential's own graph
    if not hasattr(graph, "_nodes_by_depth") or len(graph.inputs) != 1:
        raise Refused(f"{model.name}: a subclassed Keras model has no layer graph to read "
                      f"(save a functional or Sequential model with one input)")
    if len(graph.outputs) != 1:
        raise Refused(f"{model.name}: {len(graph.outputs)} outputs; the spec gives one")
    names = {id(graph.inputs[0]): "images"}
    nodes, sources = [Node("images", "input")], {}
    taken = {layer.name for layer in model.layers} | {"images"}
    ours = {id(node) for nodes_at in graph._nodes_by_depth.values() for node in nodes_at}
    pads: dict[str, tuple[int, str]] = {}  # a ZeroPadding2D's pixels and input, for the conv
    for depth in sorted(graph._nodes_by_depth, reverse=True):
        for node in graph._nodes_by_depth[depth]:
            layer = node.operation
            if layer is None or node.is_input:
                continue
            name, where = layer.name, f"layer {layer.name!r} ({type(layer).__name__})"
            calls = sum(1 for called in layer._inbound_nodes if id(called) in ours)
            if calls > 1:
                raise Refused(f"{where} is called {calls} times: each spec layer has its "
                              f"own weights")
            inputs = tuple(names[id(t)] for t in node.input_tensors)
            if len(node.outputs) != 1:
                raise Refused(f"{where}: gives {len(node.outputs)} tensors; spec layers one")
            names[id(node.outputs[0])] = name
            if isinstance(layer, keras.Model):
                raise Refused(f"{where}: a model inside the model; save it flattened")
            if isinstance(layer, keras.layers.Add):
                if len(inputs) != 2:
                    raise Refused(f"{where}: adds {len(inputs)} tensors; a residual adds two")
                nodes.append(Node(name, "add", inputs, where=where))
                continue
            if len(inputs) != 1:
                raise Refused(f"{where}: takes {len(inputs)} tensors; spec layers take one")
            if isinstance(layer, keras.layers.ZeroPadding2D):
                (top, bottom), (left, right) = layer.padding
                if len({top, bottom, left, right}) != 1:
                    raise Refused(f"{where}: pads {layer.padding} unevenly; the spec pads "
                                  f"every side alike")
                pads[name] = (top, inputs[0])
                continue
            if layer.weights:
                sources[name] = name
            source = inputs[0]
            if isinstance(layer, CONVOLUTIONS + (keras.layers.Dense,)):
                source, made = _weighted(layer, name, where, source, pads, taken)
            elif type(layer) in LAYERS:
                made = LAYERS[type(layer)](layer, name, where)
                made = (made,) if isinstance(made, specs.LayerSpec) else made or ()
            else:
                raise Refused(f"{where}: {type(layer).__name__} is not a spec layer kind "
                              f"(supported: Conv2D, DepthwiseConv2D, Dense, Add, ZeroPadding2D "
                              f"before a convolution, "
                              f"{', '.join(k.__name__ for k in LAYERS)})")
            if not made:
                nodes.append(Node(name, "same", (source,), where=where))
            for i, spec_layer in enumerate(made):  # a layer, then its own activation
                node_name = name if i == len(made) - 1 else f"{name}/{i}"
                nodes.append(Node(node_name, "layer", (source,), spec_layer, where))
                source = node_name
    unused = sorted(set(pads) - {n for node in nodes for n in node.inputs})
    if unused:
        raise Refused(f"layer {unused[0]!r} (ZeroPadding2D): the spec pads only inside a "
                      f"convolution, and nothing convolves what it pads")
    nodes.append(Node("logits", "output", (names[id(graph.outputs[0])],)))
    return nodes, sources, int(graph.inputs[0].shape[-1])


def _weighted(layer, name: str, where: str, source: str, pads: dict,
              taken: set[str]) -> tuple[str, list[specs.LayerSpec]]:
    """A convolution (taking in a ZeroPadding2D before it) or a dense layer, then its own
    activation: (the tensor it reads, its spec layers)."""
    padding = 0
    if source in pads:
        padding, source = pads.pop(source)
    if isinstance(layer, keras.layers.Dense):
        if len(layer.kernel.shape) != 2:
            raise Refused(f"{where}: a dense layer on a map; flatten first")
        made = specs.Dense(name, int(layer.kernel.shape[0]), layer.units, layer.use_bias)
    else:
        made = _conv(layer, name, where, padding)
    after = _activation(porting.unique_name(f"{name}_activation", taken),
                        _function_name(layer), where)
    return source, [made] + ([after] if after else [])


def read(model: keras.Model, input_shape: tuple[int, int, int] | None,
         name: str) -> porting.Reading:
    """`model` as a spec named `name` (its own input shape; `input_shape` must agree when
    given) with its weights in the canonical layout, taken through a Keras twin built from
    the spec (tf_impl.model: the same layers, so the same variables in the same order)."""
    nodes, sources, channels = _graph(model)
    layers = porting.assemble(nodes)
    height, width = (int(n) if n else 0 for n in model.inputs[0].shape[1:3])
    shape = (channels, height, width)
    if not height or not width:
        shape = tuple(input_shape or (channels, 32, 32))
    elif input_shape and tuple(input_shape) != shape:
        raise Refused(f"--input-shape {input_shape}: the model takes {shape}")
    spec = porting.spec_of(name, shape, layers, model.name)
    twin = framework_model.build_model(spec)
    for spec_name, layer_name in sources.items():
        twin.get_layer(spec_name).set_weights(model.get_layer(layer_name).get_weights())
    return porting.Reading(spec, framework_model.export_weights(twin, spec),
                           framework_model.count_parameters(model), sources)


def outputs(model: keras.Model, images: np.ndarray,
            labels: np.ndarray) -> tuple[np.ndarray, np.float64, dict]:
    """Logits (eval mode), then the cross-entropy loss and the gradients by variable path
    of one training step (train mode), in the model's precision (float64: _in_float64)."""
    x = tf.constant(images.transpose(0, 2, 3, 1), model.inputs[0].dtype)  # NCHW -> NHWC
    logits = model(x, training=False)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            tf.constant(labels), model(x, training=True), from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    return (np.asarray(logits), np.float64(float(loss)),
            dict(zip((v.path for v in model.trainable_variables), grads)))


def source_outputs(model: keras.Model, reading: porting.Reading, images: np.ndarray,
                   labels: np.ndarray) -> dict[str, np.ndarray]:
    """`outputs` of the source, gradients in the canonical layout through a twin's
    converters: each source variable paired with the twin's of the same layer and place."""
    model = _in_float64(model)
    logits, loss, grads = outputs(model, images, labels)
    twin = framework_model.build_model(reading.spec)
    by_twin_path = {}
    for spec_name, layer_name in reading.sources.items():
        for ours, theirs in zip(twin.get_layer(spec_name).trainable_weights,
                                model.get_layer(layer_name).trainable_weights):
            by_twin_path[ours.path] = np.asarray(grads[theirs.path])
    found = {"logits": logits, "loss": loss}
    canonical = framework_model.export_gradients(twin, by_twin_path, reading.spec)
    found.update({f"grad/{name}": value for name, value in canonical.items()})
    return found


def _in_float64(model: keras.Model) -> keras.Model:
    """The model rebuilt from its config with every layer's dtype policy float64, its
    weights copied (the parity check's float64 proof)."""
    def widen(node):
        if isinstance(node, dict) and node.get("class_name") == "DTypePolicy":
            return "float64"
        if isinstance(node, dict):
            return {k: "float64" if k == "dtype" and v == "float32" else widen(v)
                    for k, v in node.items()}
        return [widen(v) for v in node] if isinstance(node, list) else node
    wide = model.__class__.from_config(widen(model.get_config()))
    wide.set_weights(model.get_weights())
    return wide


def build_twin(spec: specs.ModelSpec) -> keras.Model:
    """The twin as the proof computes it: float64 (its variables, inputs and logits)."""
    keras.mixed_precision.set_global_policy("float64")
    keras.config.set_floatx("float64")
    return framework_model.build_model(spec)


if __name__ == "__main__":
    port_worker.run(sys.modules[__name__])
