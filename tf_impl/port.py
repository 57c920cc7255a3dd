"""`cnncompare port`, TensorFlow's side: read a saved Keras model through its layer graph into
the spec's layer kinds, and give a model's logits, loss and gradients on the proof batch.

    python -m tf_impl.port read MODEL.keras --dir STAGING   (started by `cnncompare port`)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from compare.experiment import porting, specs
from compare.experiment.porting import Node, Refused
from compare.run import port_worker
from tf_impl import model as framework_model  # the protocol's too
from tf_impl import port_kinds as kinds

FRAMEWORK = "tf"
SOURCE_KIND = "a saved Keras model, MODEL.keras (or .h5)"


def hide_gpus() -> None:
    """The proof is float64 on the CPU (porting.compare_outputs), as PyTorch's side computes it:
    on a GPU host TensorFlow would otherwise compute it there, in TF32 convolutions by default.
    Called where the port's process starts, before TensorFlow places anything."""
    tf.config.set_visible_devices([], "GPU")


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


class _Graph:
    """A Keras model's graph as porting Nodes, read through Keras' public API: a functional
    model's config (each layer's inbound tensors) and `operations`, a Sequential's `layers`;
    a model inside the model read as its layers. Each layer by its reader (port_kinds)."""

    def __init__(self, model: keras.Model):
        self.nodes: list[Node] = [Node("images", "input")]
        self.sources: dict[str, str] = {}  # each weighted spec layer -> its Keras layer's name
        self.layers: dict[str, keras.layers.Layer] = _layers_by_name(model)
        self.changes: list[str] = []  # what the twin leaves out, in words (port.json)
        self.taken = set(self.layers) | {"images"}
        self.pads: dict[str, tuple[int, str]] = {}  # a lone even padding: (pixels, input)
        self.flattened: dict[str, str] = {}  # a global pool's implicit flatten -> the pool
        self.optional: set[str] = set()  # nodes dropped where nothing reads them
        if len(model.inputs) != 1 or len(model.outputs) != 1:
            raise Refused(f"{model.name}: {len(model.inputs)} inputs and {len(model.outputs)} "
                          f"outputs; the spec takes one image and gives one output")
        shape = tuple(int(n) if n else 0 for n in model.inputs[0].shape[1:])
        out = self.model(model, "images", shape, final=True)
        read = {name for node in self.nodes for name in node.inputs} | {out}
        self.nodes = [n for n in self.nodes if n.name not in self.optional or n.name in read]
        self.nodes.append(Node("logits", "output", (out,)))

    def model(self, model: keras.Model, source: str, shape: tuple, final: bool) -> str:
        """The nodes of `model` called on `source`; the node of its output."""
        if isinstance(model, keras.Sequential):
            for i, layer in enumerate(model.layers):
                last = i == len(model.layers) - 1
                source = self.operation(layer, layer.name, [source], [shape], [],
                                        final and last, readers=1)
                shape = tuple(layer.compute_output_shape((None, *shape))[1:])
            return source
        config = model.get_config()
        if not isinstance(config, dict) or "input_layers" not in config:
            raise Refused(f"{model.name}: a subclassed Keras model has no layer graph to read "
                          f"(save a functional or Sequential model)")
        operations = {op.name: op for op in model.operations}
        inputs, outputs = (_tensor_keys(config[key]) for key in ("input_layers", "output_layers"))
        if len(inputs) != 1 or len(outputs) != 1:
            raise Refused(f"{model.name}: {len(inputs)} inputs, {len(outputs)} outputs; the "
                          f"spec takes one image and gives one output")
        names = {inputs[0]: source}
        entries = [e for e in config["layers"] if e["name"] != inputs[0][0]]
        readers: dict[str, int] = {}  # how many calls read each layer's output
        for entry in entries:
            for node in entry["inbound_nodes"]:
                for key, _, _ in _tensors(node.get("args", [])):
                    readers[key[0]] = readers.get(key[0], 0) + 1
        for entry in entries:
            name, called = entry["name"], entry["inbound_nodes"]
            where = f"layer {name!r} ({entry['class_name']})"
            if len(called) > 1:
                raise Refused(f"{where} is called {len(called)} times: each spec layer has "
                              f"its own weights")
            if not called:
                continue
            found = _tensors(called[0].get("args", [])) + _tensors(called[0].get("kwargs", {}))
            for key, _, _ in found:
                if key not in names:
                    raise Refused(f"{where} reads tensor {key} of another layer's outputs; "
                                  f"the spec's layers give one each")
            constants = _constants(called[0].get("args", []))
            names[(name, 0, 0)] = self.operation(
                operations[name], name, [names[key] for key, _, _ in found],
                [shape for _, shape, _ in found], constants, final and (name, 0, 0) in outputs,
                readers.get(name, 0), first=bool(found) and found[0][2] == 0)
        return names[outputs[0]]

    def operation(self, op, name: str, inputs: list[str], shapes: list[tuple],
                  constants: list, final: bool, readers: int, first: bool = True) -> str:
        """The nodes of one layer or operation reading `inputs`; the node of its output."""
        where = f"layer {name!r} ({type(op).__name__})"
        if isinstance(op, keras.Model):
            if len(inputs) != 1:
                raise Refused(f"{where}: a model inside the model takes {len(inputs)} tensors")
            return self.model(op, inputs[0], shapes[0], final)
        if type(op) in kinds.MERGES:
            if type(op) is keras.layers.Concatenate and op.axis not in (-1, len(shapes[0])):
                raise Refused(f"{where}: concatenates on axis {op.axis}; the spec on the "
                              f"channels")
            self.nodes.append(Node(name, kinds.MERGES[type(op)], tuple(inputs), where=where))
            return name
        if not isinstance(op, keras.layers.Layer):  # a raw operation: `x + 3.0`, `a + b`
            return self.raw(op, name, where, inputs, constants, first)
        if len(inputs) != 1:
            raise Refused(f"{where}: takes {len(inputs)} tensors; spec layers take one")
        if type(op) not in kinds.LAYERS:
            raise Refused(f"{where}: {type(op).__name__} is not a spec layer kind (the reader "
                          f"reads {kinds.readable()})")
        site = kinds.Site(name, where, shapes[0], final, self.taken, self.changes,
                          source=inputs[0], pad=self.pads.get(inputs[0]),
                          unflatten=self.flattened.get(inputs[0]))
        made = kinds.LAYERS[type(op)](op, site)
        if any(layer.parameter_shapes() for layer in made):
            self.sources[name] = name
        if isinstance(op, keras.layers.ZeroPadding2D) and readers == 1:
            (top, bottom), (left, right) = op.padding
            if len({top, bottom, left, right}) == 1:  # a convolution after it may take it in
                self.pads[name] = (top, inputs[0])
                self.optional.add(name)
        return self.chain(name, site.source, made, site.implicit, where)

    def raw(self, op, name: str, where: str, inputs: list[str], constants: list,
            first: bool) -> str:
        merge, scaled = kinds.OPERATIONS.get(type(op).__name__, (None, None))
        made = None
        if len(inputs) == 2 and not constants and merge:
            self.nodes.append(Node(name, merge, tuple(inputs), where=where))
            return name
        if len(inputs) == 1 and len(constants) == 1 and scaled:
            made = scaled(name, float(constants[0]), first)
        if made is None:
            raise Refused(f"{where}: the operation {type(op).__name__} of {len(inputs)} "
                          f"tensors and {len(constants)} numbers is not a spec layer kind "
                          f"(the reader reads {kinds.readable()})")
        return self.chain(name, inputs[0], (made,), set(), where)

    def chain(self, name: str, source: str, made: tuple, implicit: set[int], where: str) -> str:
        """Nodes for `made` in order from `source` (the last named `name`); none: `name` is
        `source` unchanged."""
        if not made:
            self.nodes.append(Node(name, "same", (source,), where=where))
        for i, spec_layer in enumerate(made):  # e.g. a layer, then its own activation
            node_name = name if i == len(made) - 1 else f"{name}/{i}"
            self.nodes.append(Node(node_name, "layer", (source,), spec_layer, where))
            if id(spec_layer) in implicit:
                self.optional.add(node_name)
                self.flattened[node_name] = source
            source = node_name
        return name


def _tensors(value, at: int = 0) -> list[tuple[tuple, tuple, int]]:
    """Each Keras tensor in a serialized call's arguments: (its key (layer, node, index),
    its per-sample shape, the position of the argument holding it)."""
    if isinstance(value, dict) and value.get("class_name") == "__keras_tensor__":
        history = value["config"]["keras_history"]
        return [((history[0], history[1], history[2]),
                 tuple(int(n) if n else 0 for n in value["config"]["shape"][1:]), at)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v, at)]
    if isinstance(value, (list, tuple)):
        return [t for i, v in enumerate(value) for t in _tensors(v, i if at == 0 else at)]
    return []


def _constants(args: list) -> list:
    """The plain numbers among a raw operation's arguments (`x + 3.0`: 3.0)."""
    return [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]


def _tensor_keys(value) -> list[tuple]:
    """A functional config's input_layers / output_layers as keys: one [name, node, index]
    or a list of them."""
    items = [value] if value and isinstance(value[0], str) else value
    return [(item[0], item[1], item[2]) for item in items]


def _layers_by_name(model: keras.Model) -> dict[str, keras.layers.Layer]:
    """Every layer by name, those of models inside the model too (their names must differ:
    the spec names layers by them)."""
    found: dict[str, keras.layers.Layer] = {}
    for layer in model.layers:
        inner = _layers_by_name(layer) if isinstance(layer, keras.Model) else {}
        for name, each in {layer.name: layer, **inner}.items():
            if name in found:
                raise Refused(f"two layers are called {name!r}; the spec names layers by "
                              f"their names")
            found[name] = each
    return found


def _copy(source: keras.layers.Layer, twin: keras.layers.Layer) -> None:
    """The source layer's weights into the twin's layer of the same place, each reshaped to
    the twin's (a Dense on a map is a 1x1 convolution: its kernel gains two axes)."""
    found = source.get_weights()
    if len(found) != len(twin.weights):
        raise RuntimeError(f"{source.name}: {len(found)} weights, its twin "
                           f"{len(twin.weights)}")
    twin.set_weights([np.reshape(w, tuple(v.shape)) for w, v in zip(found, twin.weights)])


def read(model: keras.Model, input_shape: tuple[int, int, int] | None,
         name: str) -> porting.Reading:
    """`model` as a spec named `name` (its own input shape; `input_shape` must agree when
    given) with its weights in the canonical layout, taken through a Keras twin built from
    the spec (tf_impl.model: the same layers, so the same variables in the same order)."""
    graph = _Graph(model)
    layers = porting.assemble(graph.nodes)
    height, width, channels = (int(n) if n else 0 for n in model.inputs[0].shape[1:4])
    shape = (channels, height, width)
    if not height or not width:
        shape = input_shape or (channels, 32, 32)
    elif input_shape and tuple(input_shape) != shape:
        raise Refused(f"--input-shape {input_shape}: the model takes {shape}")
    spec = porting.spec_of(name, shape, layers, model.name)
    twin = framework_model.build_model(spec)
    for spec_name, layer_name in graph.sources.items():
        _copy(graph.layers[layer_name], twin.get_layer(spec_name))
    return porting.Reading(spec, framework_model.export_weights(twin, spec),
                           framework_model.count_parameters(model), graph.sources,
                           tuple(graph.changes))


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
    """`outputs` of the source as the proof runs it (_for_proof), gradients in the canonical
    layout through a twin's converters: each source variable paired with the twin's of the
    same layer and place (reshaped as _copy reshapes the weights)."""
    model = _for_proof(model)
    logits, loss, grads = outputs(model, images, labels)
    twin = framework_model.build_model(reading.spec)
    layers = _layers_by_name(model)
    by_twin_path = {}
    for spec_name, layer_name in reading.sources.items():
        for ours, theirs in zip(twin.get_layer(spec_name).trainable_weights,
                                layers[layer_name].trainable_weights):
            by_twin_path[ours.path] = np.reshape(grads[theirs.path], tuple(ours.shape))
    found: dict[str, Any] = {"logits": logits, "loss": loss}
    canonical = framework_model.export_gradients(twin, by_twin_path, reading.spec)
    found.update({f"grad/{name}": value for name, value in canonical.items()})
    return found


# Keras' dropout layers by class name, with the setting of their rate.
DROPOUT_RATES = {"Dropout": "rate", "StochasticDepth": "drop_path_rate"}


def _for_proof(model: keras.Model) -> keras.Model:
    """The model rebuilt from its config as the proof runs it, its weights copied: every
    layer's dtype policy float64 (the parity check's float64 proof), every dropout's rate 0
    (the twin's is: specs.without_dropout), and a final softmax left out (the twin gives
    logits: port_kinds' activations)."""
    config = model.get_config()
    last = ({name for name, _, _ in _tensor_keys(config["output_layers"])}
            if "output_layers" in config else {config["layers"][-1]["config"]["name"]})

    def widen(node):
        if isinstance(node, dict) and node.get("class_name") == "DTypePolicy":
            return "float64"
        if isinstance(node, dict) and node.get("class_name") in DROPOUT_RATES:
            node = {**node, "config": {**node["config"],
                                       DROPOUT_RATES[node["class_name"]]: 0.0}}
        if (isinstance(node, dict) and node.get("name", node.get("config", {}).get("name"))
                in last and node.get("config", {}).get("activation") == "softmax"):
            node = {**node, "config": {**node["config"], "activation": "linear"}}
        if isinstance(node, dict):
            return {k: "float64" if k == "dtype" and v == "float32" else widen(v)
                    for k, v in node.items()}
        return [widen(v) for v in node] if isinstance(node, list) else node
    wide = model.__class__.from_config(widen(config))
    wide.set_weights(model.get_weights())
    return wide


def build_twin(spec: specs.ModelSpec) -> keras.Model:
    """The twin as the proof computes it: float64 (its variables, inputs and logits)."""
    keras.mixed_precision.set_global_policy("float64")
    keras.config.set_floatx("float64")
    return framework_model.build_model(spec)


if __name__ == "__main__":
    port_worker.run(sys.modules[__name__])
