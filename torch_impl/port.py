"""`cnncompare port`, PyTorch's side: read an nn.Module through torch.fx into the spec's layer
kinds, and give a model's logits, loss and gradients on the proof batch.

    python -m torch_impl.port read FILE.py:CLASS --dir STAGING   (started by `cnncompare port`)
"""

from __future__ import annotations

import copy
import importlib.util
import json
import operator
import sys
from pathlib import Path

from compare.run import port_worker

port_worker.quiet_framework_logs()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.fx  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from compare.experiment import porting, specs  # noqa: E402
from compare.experiment.porting import Node, Refused  # noqa: E402
from torch_impl import model as framework_model  # noqa: E402 - the protocol's too

FRAMEWORK = "torch"
SOURCE_KIND = "a PyTorch nn.Module class in FILE.py:CLASS"


def load(reference: str, kwargs: dict) -> nn.Module:
    """The module class FILE.py:CLASS built with `kwargs`, or Refused in one line."""
    where, _, name = reference.rpartition(":")
    if not where.endswith(".py") or not name.isidentifier():
        raise Refused(f"{reference}: name a module class as FILE.py:CLASS")
    path = Path(where).expanduser().resolve()
    if not path.is_file():
        raise Refused(f"{where}: no such file")
    try:
        loader = importlib.util.spec_from_file_location(f"cnncompare_port_{path.stem}", path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[loader.name] = module  # torch.fx and dataclasses look classes up here
        loader.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is one line
        raise Refused(f"{where} did not load: {type(exc).__name__}: {exc}") from None
    found = getattr(module, name, None)
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        raise Refused(f"{where} has no nn.Module class {name}")
    try:
        return found(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's code
        raise Refused(f"{name}(**{json.dumps(kwargs)}) did not build: "
                      f"{type(exc).__name__}: {exc}") from None


def _conv(m: nn.Conv2d, name: str, where: str) -> specs.Conv:
    kernel = porting.square(m.kernel_size, "kernel", where)
    stride = porting.square(m.stride, "stride", where)
    if porting.square(m.dilation, "dilation", where) != 1 or m.padding_mode != "zeros":
        raise Refused(f"{where}: dilated or {m.padding_mode}-padded convolutions are not "
                      f"in the spec")
    if m.padding == "same":
        if stride != 1 or kernel % 2 == 0:
            raise Refused(f"{where}: padding 'same' with an even kernel pads unevenly")
        padding = kernel // 2
    else:
        padding = 0 if m.padding == "valid" else porting.square(m.padding, "padding", where)
    return specs.Conv(name, m.in_channels, m.out_channels, kernel, padding, m.bias is not None,
                      stride, m.groups)


def _batchnorm(m: nn.BatchNorm2d, name: str, where: str) -> specs.BatchNorm:
    if not (m.affine and m.track_running_stats) or m.momentum is None:
        raise Refused(f"{where}: BatchNorm without scale and shift, running statistics or "
                      f"a momentum is not in the spec")
    return specs.BatchNorm(name, m.num_features, epsilon=float(m.eps),
                           momentum=float(m.momentum))


def _pool(kind: type, kernel, stride, padding, where: str, name: str,
          ceil_mode: bool = False, dilation=1) -> specs.MaxPool:
    size = porting.square(kernel, "window", where)
    if (porting.square(stride if stride not in (None, ()) else kernel, "stride", where) != size
            or porting.square(padding, "padding", where) or ceil_mode
            or porting.square(dilation, "dilation", where) != 1):
        raise Refused(f"{where}: the spec pools size x size windows at stride size, unpadded "
                      f"(here window {kernel}, stride {stride}, padding {padding})")
    return kind(name, size)


def _global(kind: type, output_size, where: str, name: str) -> specs.LayerSpec:
    if porting.square(output_size, "output size", where) != 1:
        raise Refused(f"{where}: adaptive pooling to {output_size} is not in the spec "
                      f"(to 1: global pooling)")
    return kind(name)


def _linear(m: nn.Linear, name: str, where: str) -> specs.Dense:
    return specs.Dense(name, m.in_features, m.out_features, m.bias is not None)


def _dropout(rate: float, where: str) -> None:
    if rate:
        raise Refused(f"{where}: dropout (p={rate}) changes training; the spec has none "
                      f"(remove it, or set p=0, to port)")
    return None  # the identity


def _flatten(start: int, end: int, where: str, name: str) -> specs.Flatten:
    if start != 1 or end != -1:
        raise Refused(f"{where}: flattens dimensions {start}..{end}; the spec flattens all "
                      f"but the batch")
    return specs.Flatten(name)


# Each module kind the spec expresses: (module, spec name, where) -> spec layer, or None for
# the identity. Weighted kinds are the ones with parameters.
MODULES = {
    nn.Conv2d: _conv,
    nn.BatchNorm2d: _batchnorm,
    nn.ReLU: lambda m, name, where: specs.ReLU(name),
    nn.ReLU6: lambda m, name, where: specs.ReLU(name, 6.0),
    nn.MaxPool2d: lambda m, name, where: _pool(specs.MaxPool, m.kernel_size, m.stride,
                                               m.padding, where, name, m.ceil_mode,
                                               m.dilation),
    nn.AvgPool2d: lambda m, name, where: _pool(specs.AvgPool, m.kernel_size, m.stride,
                                               m.padding, where, name, m.ceil_mode),
    nn.AdaptiveAvgPool2d: lambda m, name, where: _global(specs.GlobalAvgPool, m.output_size,
                                                         where, name),
    nn.AdaptiveMaxPool2d: lambda m, name, where: _global(specs.GlobalMaxPool, m.output_size,
                                                         where, name),
    nn.Flatten: lambda m, name, where: _flatten(m.start_dim, m.end_dim, where, name),
    nn.Linear: _linear,
    nn.Identity: lambda m, name, where: None,
    nn.Dropout: lambda m, name, where: _dropout(m.p, where),
}


def _arg(node: torch.fx.Node, index: int, key: str, default=None):
    return node.args[index] if len(node.args) > index else node.kwargs.get(key, default)


# Each function or tensor method the spec expresses: (fx node, spec name, where) -> spec
# layer, None for the identity, or "add".
FUNCTIONS = {
    F.relu: lambda n, name, where: specs.ReLU(name),
    torch.relu: lambda n, name, where: specs.ReLU(name),
    "relu": lambda n, name, where: specs.ReLU(name),
    "relu_": lambda n, name, where: specs.ReLU(name),
    F.relu6: lambda n, name, where: specs.ReLU(name, 6.0),
    F.max_pool2d: lambda n, name, where: _pool(
        specs.MaxPool, _arg(n, 1, "kernel_size"), _arg(n, 2, "stride"), _arg(n, 3, "padding", 0),
        where, name, _arg(n, 5, "ceil_mode", False), _arg(n, 4, "dilation", 1)),
    F.avg_pool2d: lambda n, name, where: _pool(
        specs.AvgPool, _arg(n, 1, "kernel_size"), _arg(n, 2, "stride"), _arg(n, 3, "padding", 0),
        where, name, _arg(n, 4, "ceil_mode", False)),
    F.adaptive_avg_pool2d: lambda n, name, where: _global(
        specs.GlobalAvgPool, _arg(n, 1, "output_size"), where, name),
    F.adaptive_max_pool2d: lambda n, name, where: _global(
        specs.GlobalMaxPool, _arg(n, 1, "output_size"), where, name),
    torch.flatten: lambda n, name, where: _flatten(_arg(n, 1, "start_dim", 0),
                                                   _arg(n, 2, "end_dim", -1), where, name),
    "flatten": lambda n, name, where: _flatten(_arg(n, 1, "start_dim", 0),
                                               _arg(n, 2, "end_dim", -1), where, name),
    "view": lambda n, name, where: _reshape(n, name, where),
    "reshape": lambda n, name, where: _reshape(n, name, where),
    torch.reshape: lambda n, name, where: _reshape(n, name, where),
    "contiguous": lambda n, name, where: None,
    operator.add: lambda n, name, where: "add",
    operator.iadd: lambda n, name, where: "add",
    torch.add: lambda n, name, where: "add",
    "add": lambda n, name, where: "add",
    "add_": lambda n, name, where: "add",
    F.dropout: lambda n, name, where: _dropout(
        _arg(n, 1, "p", 0.5) if _arg(n, 2, "training", True) else 0.0, where),
}


def _reshape(node: torch.fx.Node, name: str, where: str) -> specs.Flatten:
    """x.view(x.size(0), -1), x.view(-1, N) and the like: a flatten of all but the batch (a
    wrong N shows as the next layer's misfit)."""
    sizes = node.args[1:] or (node.kwargs.get("shape", ()),)
    shape = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) \
        else tuple(sizes)
    if len(shape) != 2 or -1 not in shape:
        raise Refused(f"{where}: reshapes to {shape}; the spec flattens all but the batch "
                      f"(x.view(x.size(0), -1))")
    return specs.Flatten(name)


def _is_size(node: torch.fx.Node) -> bool:
    """A node computing a size for a reshape (x.size(0), x.shape[0]), not a tensor."""
    return ((node.op == "call_method" and node.target == "size")
            or (node.op == "call_function" and node.target in (getattr, operator.getitem)))


def _tensor_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    return [a for a in (*node.args, *node.kwargs.values())
            if isinstance(a, torch.fx.Node) and not _is_size(a)]


def _graph(model: nn.Module) -> tuple[list[Node], dict[str, str]]:
    """The traced graph as porting Nodes, and each weighted spec layer's module path."""
    try:
        traced = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 - data-dependent forwards cannot be traced
        raise Refused(f"torch.fx cannot trace {type(model).__name__}.forward: "
                      f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    modules = dict(traced.named_modules())
    nodes, sources, called = [], {}, set()
    for n in traced.graph.nodes:
        inputs = tuple(a.name for a in _tensor_inputs(n))
        if n.op == "placeholder":
            nodes.append(Node(n.name, "input"))
            continue
        if n.op == "output":
            if not isinstance(n.args[0], torch.fx.Node):
                raise Refused(f"{type(model).__name__}.forward returns "
                              f"{type(n.args[0]).__name__}, not one tensor of logits")
            nodes.append(Node(n.name, "output", (n.args[0].name,)))
            continue
        if _is_size(n):
            continue  # a size for a reshape
        if n.op == "get_attr":
            raise Refused(f"node {n.name!r}: forward reads the tensor self.{n.target} "
                          f"directly; the spec's weights belong to layers")
        if n.op == "call_module":
            module = modules[n.target]
            where = f"layer {n.target!r} ({type(module).__name__})"
            build = MODULES.get(type(module))
            if build is None:
                raise Refused(f"{where}: {type(module).__name__} is not a spec layer kind "
                              f"(supported: {', '.join(k.__name__ for k in MODULES)})")
            if any(True for _ in module.parameters(recurse=False)):
                if n.target in called:
                    raise Refused(f"{where} is called twice: each spec layer has its own "
                                  f"weights")
                called.add(n.target)
                sources[n.name] = n.target
            layer = build(module, n.name, where)
        else:
            label = getattr(n.target, "__name__", str(n.target))
            where = f"{label} in forward (node {n.name!r})"
            build = FUNCTIONS.get(n.target)
            if build is None:
                raise Refused(f"{where}: the spec cannot express it (supported in forward: "
                              f"relu, relu6, max/avg/adaptive pooling, flatten, view(n, -1), "
                              f"residual +)")
            layer = build(n, n.name, where)
        if layer == "add":
            if len(inputs) != 2:
                raise Refused(f"{where}: adds {len(inputs)} tensors; a residual adds two")
            nodes.append(Node(n.name, "add", inputs, where=where))
        elif layer is None:
            nodes.append(Node(n.name, "same", inputs[:1], where=where))
        else:
            if len(inputs) != 1:
                raise Refused(f"{where}: takes {len(inputs)} tensors; spec layers take one")
            nodes.append(Node(n.name, "layer", inputs, layer, where))
    return nodes, sources


def read(model: nn.Module, input_shape: tuple[int, int, int] | None,
         name: str) -> porting.Reading:
    """`model` as a spec named `name` (input `input_shape`, (C, H, W); CIFAR-10's when None)
    with its weights in the canonical layout (PyTorch's own), checked by the spec's shapes."""
    nodes, sources = _graph(model)
    layers = porting.assemble(nodes)
    shape = tuple(input_shape or (3, 32, 32))
    spec = porting.spec_of(name, shape, layers, type(model).__name__)
    modules = dict(model.named_modules())
    weights = {}
    for layer in specs.walk(spec.layers):
        for part in layer.parameter_shapes():
            value = getattr(modules[sources[layer.name]], part)
            weights[f"{layer.name}.{part}"] = value.detach().float().cpu().numpy().copy()
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


def source_outputs(model: nn.Module, reading: porting.Reading, images: np.ndarray,
                   labels: np.ndarray) -> dict[str, np.ndarray]:
    """`outputs` of the source (a copy: the step moves BatchNorm's statistics), gradients in
    the canonical layout: PyTorch's own, renamed from module paths to spec names."""
    logits, loss, grads = outputs(copy.deepcopy(model).cpu(), images, labels)
    found = {"logits": logits, "loss": loss}
    for name in reading.weights:
        layer, part = name.rsplit(".", 1)
        if specs.trainable(name):
            found[f"grad/{name}"] = grads[f"{reading.sources[layer]}.{part}"].numpy().copy()
    return found


def build_twin(spec: specs.ModelSpec) -> nn.Module:
    """The twin as the proof computes it (`outputs` casts it to float64)."""
    return framework_model.build_model(spec)


if __name__ == "__main__":
    port_worker.run(sys.modules[__name__])
