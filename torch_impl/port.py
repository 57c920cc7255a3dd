"""`cnncompare port`, PyTorch's side: read an nn.Module through torch.fx into the spec's layer
kinds, and give a model's logits, loss and gradients on the proof batch.

    python -m torch_impl.port read FILE.py:NAME --dir STAGING   (started by `cnncompare port`)
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from compare.experiment import porting, specs
from compare.experiment.porting import Node, Refused
from compare.experiment.user_code import load_module
from compare.run import port_worker
from torch_impl import model as framework_model  # the protocol's too
from torch_impl import port_kinds as kinds

FRAMEWORK = "torch"
SOURCE_KIND = ("an nn.Module: FILE.py:NAME or package.module:NAME, a module class or a "
               "function returning a module")


def hide_gpus() -> None:
    """The proof is float64 on the CPU (porting.compare_outputs): PyTorch computes where its
    tensors are, and the port puts every one on the CPU, so it has no GPU to hide (TensorFlow's
    twin of this call hides them)."""


def load(reference: str, kwargs: dict) -> nn.Module:
    """The module that FILE.py:NAME or package.module:NAME builds with `kwargs` (NAME a module
    class or a function returning a module, torchvision.models:resnet18), or Refused in one
    line."""
    where, _, name = reference.rpartition(":")
    if not name.isidentifier() or not (
            where.endswith(".py") or all(part.isidentifier() for part in where.split("."))):
        raise Refused(f"{reference}: name a module class or function as FILE.py:NAME or "
                      f"package.module:NAME")
    try:
        module = load_module(where, "cnncompare_port")
    except ValueError as exc:
        raise Refused(str(exc)) from None
    found = getattr(module, name, None)
    if not (isinstance(found, type) and issubclass(found, nn.Module)
            or callable(found) and not isinstance(found, type)):
        raise Refused(f"{where} has no nn.Module class or function {name}")
    try:
        built = found(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's code
        raise Refused(f"{name}(**{json.dumps(kwargs)}) did not build: "
                      f"{type(exc).__name__}: {exc}") from None
    if not isinstance(built, nn.Module):
        raise Refused(f"{name}(**{json.dumps(kwargs)}) gives a {type(built).__name__}, not an "
                      f"nn.Module")
    return built


class _Tracer(torch.fx.Tracer):
    """torch.fx's tracer, calling every module kind the reader knows as one node (torch.nn's
    own, torchvision's and torch_impl/model.py's), tracing into the rest (containers)."""

    def is_leaf_module(self, m: nn.Module, qualified_name: str) -> bool:
        return kinds.kind_of(m) is not None or super().is_leaf_module(m, qualified_name)


def _is_size(node: torch.fx.Node, sizes: set[str]) -> bool:
    """A node computing a size for a reshape (x.size(0), x.shape[0], n // 2), not a tensor."""
    if node.op == "call_method" and node.target in ("size", "dim"):
        return True
    if node.op == "call_function" and node.target is getattr:
        return node.args[1] in ("shape", "ndim")
    found = [a for a in _flat(node) if isinstance(a, torch.fx.Node)]
    return node.op in ("call_function", "call_method") and bool(found) and all(
        a.name in sizes for a in found)


def _flat(node: torch.fx.Node) -> list:
    """The node's arguments in order, lists and tuples among them (torch.cat's) opened."""
    found = []
    for a in (*node.args, *node.kwargs.values()):
        found += list(a) if isinstance(a, (list, tuple)) else [a]
    return found


def _where(node: torch.fx.Node, model: nn.Module) -> str:
    """The source's words for a function node: what it calls and in which module."""
    label = getattr(node.target, "__name__", str(node.target))
    stack = list(node.meta.get("nn_module_stack", {}).values())
    inside = (f"{stack[-1][0]} ({getattr(stack[-1][1], '__name__', stack[-1][1])})" if stack
              else f"{type(model).__name__}.forward")
    return f"{label} in {inside} (node {node.name!r})"


def _graph(model: nn.Module) -> tuple[list[Node], dict[str, str]]:
    """The traced graph as porting Nodes, and each weighted spec layer's source: its module
    path, or the path of the parameter forward reads."""
    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - data-dependent forwards cannot be traced
        raise Refused(f"torch.fx cannot trace {type(model).__name__}.forward: "
                      f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    modules = dict(model.named_modules())
    nodes: list[Node] = []
    sources: dict[str, str] = {}
    called: set[str] = set()
    sizes: set[str] = set()
    layouts: dict[str, str] = {}  # each tensor's (kinds.CHANNELS_FIRST...)
    for n in graph.nodes:
        if n.op == "placeholder":
            nodes.append(Node(n.name, "input"))
            layouts[n.name] = kinds.CHANNELS_FIRST
            continue
        if n.op == "get_attr":
            continue  # a tensor forward reads: the node using it says what it is
        if n.op == "output":
            if not isinstance(n.args[0], torch.fx.Node):
                raise Refused(f"{type(model).__name__}.forward returns "
                              f"{type(n.args[0]).__name__}, not one tensor of logits")
            nodes.append(Node(n.name, "output", (n.args[0].name,)))
            continue
        if _is_size(n, sizes):
            sizes.add(n.name)
            continue
        found = [a for a in _flat(n) if isinstance(a, torch.fx.Node) and a.name not in sizes]
        inputs = tuple(a.name for a in found if a.op != "get_attr")
        read = [str(a.target) for a in found if a.op == "get_attr"]  # attribute paths
        if n.op == "call_module":
            module = modules[n.target]
            where = f"layer {n.target!r} ({type(module).__name__})"
            build = kinds.MODULES.get(kinds.kind_of(module))
            if build is None:
                raise Refused(f"{where}: {type(module).__name__} is not a spec layer kind "
                              f"(supported: {kinds.supported(kinds.MODULES)})")
            if any(True for _ in module.parameters(recurse=False)):
                read = [str(n.target)]  # a call_module node targets its module's path
        else:
            where = _where(n, model)
            build = kinds.FUNCTIONS.get(n.target)
            if build is None:
                raise Refused(f"{where}: the spec cannot express it (supported in forward: "
                              f"{kinds.supported(kinds.FUNCTIONS)})")
        if len({layouts[name] for name in inputs}) > 1:
            raise Refused(f"{where}: combines channels-first and channels-last tensors")
        at = kinds.Site(n.name, where, layouts[inputs[0]] if inputs else kinds.CHANNELS_FIRST,
                        model)
        layer = build(module if n.op == "call_module" else n, at)
        if read:
            if not isinstance(layer, specs.LayerSpec) or not layer.parameter_shapes():
                raise Refused(f"{where}: forward reads the tensor self.{read[0]} directly; "
                              f"the spec's weights belong to layers (a per-channel factor "
                              f"times the map reads as a ChannelScale)")
            if read[0] in called:
                raise Refused(f"{where} is called twice: each spec layer has its own weights")
            called.add(read[0])
            sources[n.name] = read[0]
        layouts[n.name] = at.layout
        if layer in specs.MERGES:
            if len(inputs) < 2 or (layer != "concat" and len(inputs) != 2):
                raise Refused(f"{where}: takes {len(inputs)} tensors; a merge here takes two")
            nodes.append(Node(n.name, layer, inputs, where=where))
        elif layer is None or isinstance(layer, kinds.Relayout):
            nodes.append(Node(n.name, "same", inputs[:1], where=where))
            layouts[n.name] = layer.layout if layer else at.layout
        else:
            if len(inputs) != 1:
                raise Refused(f"{where}: takes {len(inputs)} tensors; spec layers take one")
            chain = layer if isinstance(layer, tuple) else (layer,)
            names = [*(f"{n.name}.{i}" for i in range(len(chain) - 1)), n.name]
            for before, part, name in zip((inputs[0], *names), chain, names):
                nodes.append(Node(name, "layer", (before,), part, where))
            if isinstance(chain[-1], specs.Flatten):
                layouts[n.name] = kinds.VECTOR
    return nodes, sources


def _path(model: nn.Module, source: str, part: str) -> str:
    """The named parameter (or buffer) holding a spec layer's `part`: `source` is a module's
    path, or a parameter's that forward reads itself."""
    return f"{source}.{part}" if source in dict(model.named_modules()) else source


def read(model: nn.Module, input_shape: tuple[int, int, int] | None,
         name: str) -> porting.Reading:
    """`model` as a spec named `name` (input `input_shape`, (C, H, W); CIFAR-10's when None)
    with its weights in the canonical layout (PyTorch's own, reshaped where the spec's kind
    holds them so: a Linear read as a 1x1 convolution, a (C, 1, 1) layer scale as (C,)),
    checked by the spec's shapes."""
    nodes, sources = _graph(model)
    layers = porting.assemble(nodes)
    shape = tuple(input_shape or (3, 32, 32))
    spec = porting.spec_of(name, shape, layers, type(model).__name__)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    weights = {}
    for layer in specs.walk(spec.layers):
        for part, wanted in layer.parameter_shapes().items():
            value = tensors[_path(model, sources[layer.name], part)]
            weights[f"{layer.name}.{part}"] = (value.detach().float().cpu().numpy()
                                               .reshape(wanted).copy())
    return porting.Reading(spec, weights, framework_model.count_parameters(model), sources)


def outputs(model: nn.Module, images: np.ndarray,
            labels: np.ndarray) -> tuple[np.ndarray, np.float64, dict]:
    """Logits (eval mode), then the cross-entropy loss and the gradients by parameter name
    of one training step (train mode), float64 on the CPU (the parity check's proof)."""
    model = model.to(torch.float64)
    x, y = torch.from_numpy(images).to(torch.float64), torch.from_numpy(labels)
    with torch.no_grad():
        logits = model.eval()(x)
    model.train()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return (logits.numpy(), np.float64(loss.item()),
            {name: p.grad for name, p in model.named_parameters() if p.grad is not None})


def _without_dropout(model: nn.Module) -> nn.Module:
    """`model` with every dropout the reader reads at rate 0, as the twin's in the proof
    (specs.without_dropout): one function compared, not two frameworks' random masks."""
    for module in model.modules():
        kind = kinds.kind_of(module)
        if kind in (nn.Dropout, kinds.STOCHASTIC_DEPTH):
            setattr(module, "p", 0.0)  # a float attribute of these kinds, not a submodule
        elif kind is framework_model.SampleDropout:
            setattr(module, "rate", 0.0)
    return model


def source_outputs(model: nn.Module, reading: porting.Reading, images: np.ndarray,
                   labels: np.ndarray) -> dict[str, np.ndarray]:
    """`outputs` of the source (a copy: the step moves BatchNorm's statistics), dropout off,
    gradients in the canonical layout: PyTorch's own, renamed from parameter paths to spec
    names and reshaped as `read` reshapes the weights."""
    source = _without_dropout(copy.deepcopy(model).cpu())
    logits, loss, grads = outputs(source, images, labels)
    found: dict[str, Any] = {"logits": logits, "loss": loss}
    for name, value in reading.weights.items():
        layer, part = name.rsplit(".", 1)
        if specs.trainable(name):
            grad = grads[_path(model, reading.sources[layer], part)]
            found[f"grad/{name}"] = grad.numpy().reshape(value.shape).copy()
    return found


def build_twin(spec: specs.ModelSpec) -> nn.Module:
    """The twin as the proof computes it (`outputs` casts it to float64)."""
    return framework_model.build_model(spec)


if __name__ == "__main__":
    port_worker.run(sys.modules[__name__])
