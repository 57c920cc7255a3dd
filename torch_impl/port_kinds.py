"""`cnncompare port`'s PyTorch reader, kind by kind: each module class (MODULES) and each
function or tensor method of a traced forward (FUNCTIONS) that the spec expresses, and the spec
layers it reads as. torch_impl/port.py walks the traced graph and calls these."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from compare.experiment import porting, specs
from compare.experiment.porting import Refused
from torch_impl import model as framework_model

# The layout of a tensor in the traced forward: a (N, C, H, W) map, the same map permuted to
# channels-last (ConvNeXt's blocks: LayerNorm and Linear act on the last axis there), or a
# (N, features) vector after a flatten.
CHANNELS_FIRST, CHANNELS_LAST, VECTOR = "channels-first", "channels-last", "vector"


@dataclass(frozen=True)
class Site:
    """Where a reader reads: the spec layer's name, the source's words for it (for
    refusals), the layout of its input, and the source model (for parameters forward reads)."""

    name: str
    where: str
    layout: str
    model: nn.Module


@dataclass(frozen=True)
class Relayout:
    """A permute between channels-first and channels-last: no layer, a new layout."""

    layout: str


def _conv(m: nn.Conv2d, at: Site) -> specs.Conv:
    kernel = porting.square(m.kernel_size, "kernel", at.where)
    stride = porting.square(m.stride, "stride", at.where)
    if porting.square(m.dilation, "dilation", at.where) != 1 or m.padding_mode != "zeros":
        raise Refused(f"{at.where}: dilated or {m.padding_mode}-padded convolutions are not "
                      f"in the spec")
    if m.padding == "same":
        if stride != 1 or kernel % 2 == 0:
            raise Refused(f"{at.where}: padding 'same' with an even kernel pads unevenly")
        padding = kernel // 2
    else:
        padding = (0 if isinstance(m.padding, str)  # "valid"; "same" is read above
                   else porting.square(m.padding, "padding", at.where))
    return specs.Conv(at.name, m.in_channels, m.out_channels, kernel, padding,
                      m.bias is not None, stride, m.groups)


def _batchnorm(m: nn.BatchNorm2d, at: Site) -> specs.BatchNorm:
    if not (m.affine and m.track_running_stats) or m.momentum is None:
        raise Refused(f"{at.where}: BatchNorm without scale and shift, running statistics or "
                      f"a momentum is not in the spec")
    return specs.BatchNorm(at.name, m.num_features, epsilon=float(m.eps),
                           momentum=float(m.momentum))


def _layer_norm(m: nn.LayerNorm, at: Site) -> specs.LayerNorm:
    """nn.LayerNorm normalises the last axis: the channels on a channels-last map."""
    if len(m.normalized_shape) != 1 or not m.elementwise_affine or m.bias is None:
        raise Refused(f"{at.where}: LayerNorm over {tuple(m.normalized_shape)} without a "
                      f"learned scale and shift is not in the spec (over the channels, both)")
    if at.layout == CHANNELS_FIRST:
        raise Refused(f"{at.where}: LayerNorm on a (N, C, H, W) map normalises each row; the "
                      f"spec's normalises the channels (permute to channels-last first)")
    return specs.LayerNorm(at.name, m.normalized_shape[0], float(m.eps))


def _channel_norm(m: nn.LayerNorm, at: Site) -> specs.LayerNorm:
    """LayerNorm over the channels of a (N, C, H, W) map (torchvision's LayerNorm2d)."""
    if at.layout == CHANNELS_LAST:
        raise Refused(f"{at.where}: normalises axis 1 of a channels-last map (its rows)")
    return specs.LayerNorm(at.name, m.normalized_shape[0], float(m.eps))


def _pool(kind: type, kernel, stride, padding, at: Site, ceil_mode: bool = False,
          dilation=1, count_pad: bool = True) -> specs.MaxPool | specs.AvgPool:
    size = porting.square(kernel, "window", at.where)
    step = porting.square(stride if stride not in (None, ()) else kernel, "stride", at.where)
    if porting.square(dilation, "dilation", at.where) != 1:
        raise Refused(f"{at.where}: dilated pooling is not in the spec")
    pad = porting.square(padding, "padding", at.where)
    stride_or_none = None if step == size else step
    if kind is specs.AvgPool:
        return specs.AvgPool(at.name, size, stride=stride_or_none, padding=pad,
                             ceil_mode=bool(ceil_mode), count_pad=bool(count_pad))
    return specs.MaxPool(at.name, size, stride=stride_or_none, padding=pad,
                         ceil_mode=bool(ceil_mode))


def _avg_pool(m: nn.AvgPool2d, at: Site) -> specs.MaxPool | specs.AvgPool:
    if m.divisor_override is not None:
        raise Refused(f"{at.where}: a divisor_override is not in the spec")
    return _pool(specs.AvgPool, m.kernel_size, m.stride, m.padding, at, m.ceil_mode,
                 count_pad=m.count_include_pad)


def _adaptive(op: str, output_size, at: Site) -> specs.LayerSpec:
    output = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if None in output or len(output) != 2:
        raise Refused(f"{at.where}: adaptive pooling to {output_size} (keeping a side) is not "
                      f"in the spec")
    if output == (1, 1):
        return (specs.GlobalAvgPool if op == "avg" else specs.GlobalMaxPool)(at.name)
    height, width = map(int, output)
    return specs.AdaptivePool(at.name, (height, width), op)


def _linear(m: nn.Linear, at: Site) -> specs.LayerSpec:
    """A dense layer; on a channels-last map, the same per position: a 1x1 convolution."""
    if at.layout == CHANNELS_LAST:
        return specs.Conv(at.name, m.in_features, m.out_features, 1, bias=m.bias is not None)
    return specs.Dense(at.name, m.in_features, m.out_features, m.bias is not None)


def _dropout(rate: float, at: Site, per_sample: bool = False) -> specs.Dropout | None:
    return specs.Dropout(at.name, float(rate), per_sample) if rate else None


def _stochastic_depth(m: nn.Module, at: Site) -> specs.Dropout | None:
    if m.mode != "row":
        raise Refused(f"{at.where}: stochastic depth in {m.mode!r} mode (one draw for the "
                      f"whole batch) is not in the spec; 'row' mode is")
    return _dropout(float(getattr(m, "p")), at, per_sample=True)  # torchvision's float


def _functional_dropout(node: torch.fx.Node, at: Site) -> None:
    rate = _arg(node, 1, "p", 0.5) if _arg(node, 2, "training", True) else 0.0
    if rate:
        raise Refused(f"{at.where}: dropout as a function (p={rate}) cannot be switched off "
                      f"for the proof; nn.Dropout can (use it to port)")


def _flatten(start: int, end: int, at: Site) -> specs.Flatten:
    if start != 1 or end != -1 or at.layout == CHANNELS_LAST:
        raise Refused(f"{at.where}: flattens dimensions {start}..{end} of a {at.layout} "
                      f"tensor; the spec flattens all but the batch of a channels-first map")
    return specs.Flatten(at.name)


def _reshape(node: torch.fx.Node, at: Site) -> specs.Flatten:
    """x.view(x.size(0), -1), x.view(-1, N) and the like: a flatten of all but the batch (a
    wrong N shows as the next layer's misfit)."""
    sizes = node.args[1:] or (node.kwargs.get("shape", ()),)
    shape = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) \
        else tuple(sizes)
    if len(shape) != 2 or -1 not in shape:
        raise Refused(f"{at.where}: reshapes to a {len(shape)}-dimensional tensor; the spec "
                      f"flattens all but the batch (x.view(x.size(0), -1)) and has no "
                      f"regrouping of channels (a channel shuffle)")
    return _flatten(1, -1, at)


def _dims(node: torch.fx.Node) -> tuple[Any, ...]:
    """The dimensions a permute or transpose node names, each in 0..3 where an int."""
    found: Sequence[Any] = node.args[1:] or (node.kwargs.get("dims", node.kwargs.get("dim", ())),)
    if len(found) == 1 and isinstance(found[0], (tuple, list)):
        found = found[0]
    return tuple(d % 4 if isinstance(d, int) else d for d in found)


def _permute(node: torch.fx.Node, at: Site) -> Relayout:
    dims = _dims(node)
    if dims == (0, 2, 3, 1) and at.layout == CHANNELS_FIRST:
        return Relayout(CHANNELS_LAST)
    if dims == (0, 3, 1, 2) and at.layout == CHANNELS_LAST:
        return Relayout(CHANNELS_FIRST)
    raise Refused(f"{at.where}: permutes a {at.layout} tensor by {dims}; the spec reads "
                  f"channels-first to channels-last (0, 2, 3, 1) and back (0, 3, 1, 2)")


def _mean(node: torch.fx.Node, at: Site) -> tuple[specs.LayerSpec, ...]:
    """x.mean([2, 3]): global average pooling, flattened unless keepdim."""
    dims = _arg(node, 1, "dim")
    dims = tuple(sorted(d % 4 for d in ((dims,) if isinstance(dims, int) else dims or ())))
    if dims != (2, 3) or at.layout != CHANNELS_FIRST:
        raise Refused(f"{at.where}: a mean over dimensions {dims} of a {at.layout} tensor; "
                      f"the spec averages a channels-first map's (2, 3)")
    pool = specs.GlobalAvgPool(at.name)
    if _arg(node, 2, "keepdim", False):
        return (pool,)
    return (pool, _flatten(1, -1, Site(f"{at.name}_flatten", at.where, at.layout, at.model)))


def _concat(node: torch.fx.Node, at: Site) -> str | None:
    tensors, dim = _arg(node, 0, "tensors"), _arg(node, 1, "dim", 0)
    if at.layout != CHANNELS_FIRST or dim not in (1, -3):
        raise Refused(f"{at.where}: concatenates along dimension {dim} of a {at.layout} "
                      f"tensor; the spec concatenates a channels-first map's channels")
    return "concat" if len(tensors) > 1 else None  # one tensor: itself


def _multiply(node: torch.fx.Node, at: Site) -> specs.LayerSpec | str:
    """Two tensors: a gate (squeeze-and-excitation); a number: a Scale; a parameter forward
    reads (ConvNeXt's layer scale, (C, 1, 1), or (C,) channels-last): a ChannelScale."""
    operands = [a for a in node.args if not (isinstance(a, torch.fx.Node) and a.op == "get_attr")]
    numbers = [a for a in operands if isinstance(a, (int, float))]
    if numbers and len(operands) == 2:
        return specs.Scale(at.name, float(numbers[0]))
    read = [a for a in node.args if isinstance(a, torch.fx.Node) and a.op == "get_attr"]
    if not read:
        return "multiply"
    value = (dict(at.model.named_parameters()).get(str(read[0].target)) if len(read) == 1
             else None)
    wanted = (1, 1) if at.layout == CHANNELS_FIRST else ()
    if value is None or value.dim() < 1 or tuple(value.shape[1:]) != wanted:
        raise Refused(f"{at.where}: multiplies by self.{read[0].target}; the spec's learned "
                      f"factors are one per channel ({'(C, 1, 1)' if wanted else '(C,)'})")
    return specs.ChannelScale(at.name, value.shape[0])


def _arg(node: torch.fx.Node, index: int, key: str, default=None):
    return node.args[index] if len(node.args) > index else node.kwargs.get(key, default)


def _activation(formula: str, alpha: float | None = None):
    return lambda source, at: specs.Activation(at.name, formula, alpha)


def _gelu(approximate: str, at: Site) -> specs.Activation:
    return specs.Activation(at.name, {"none": "gelu", "tanh": "gelu_tanh"}[approximate])


def _relu(source, at: Site) -> specs.ReLU:
    return specs.ReLU(at.name)


def _relu6(source, at: Site) -> specs.ReLU:
    return specs.ReLU(at.name, 6.0)


def _identity(source, at: Site) -> None:
    return None


def _add(source, at: Site) -> str:
    return "add"


def _affine(m: framework_model.Affine, at: Site) -> specs.Affine:
    scale, offset = (tuple(float(v) for v in t.flatten()) for t in (m.scale, m.offset))
    return specs.Affine(at.name, *(values[:1] if len(set(values)) == 1 else values
                                   for values in (scale, offset)))  # one value: every channel


# Modules named by "module.Class", read without importing their package (torchvision pulls
# in the compiler stack); traced as one call each, as torch.nn's own are.
STOCHASTIC_DEPTH = "torchvision.ops.stochastic_depth.StochasticDepth"
LAYER_NORM_2D = "torchvision.models.convnext.LayerNorm2d"

# Each module kind the spec expresses: (module, Site) -> spec layer(s), None for the identity.
# Weighted kinds are the ones with parameters. torch_impl/model.py's own modules are read so
# that a twin ports back.
MODULES = {
    nn.Conv2d: _conv,
    nn.BatchNorm2d: _batchnorm,
    nn.LayerNorm: _layer_norm,
    LAYER_NORM_2D: _channel_norm,
    framework_model.ChannelLayerNorm: _channel_norm,
    nn.ReLU: _relu,
    nn.ReLU6: _relu6,
    nn.Sigmoid: _activation("sigmoid"),
    nn.Tanh: _activation("tanh"),
    nn.SiLU: _activation("silu"),
    nn.GELU: lambda m, at: _gelu(m.approximate, at),
    nn.Hardsigmoid: _activation("hard_sigmoid"),
    framework_model.HardSigmoid02: _activation("hard_sigmoid_0.2"),
    nn.Hardswish: _activation("hard_swish"),
    nn.LeakyReLU: lambda m, at: specs.Activation(at.name, "leaky_relu", m.negative_slope),
    nn.ELU: lambda m, at: specs.Activation(at.name, "elu", float(m.alpha)),
    nn.MaxPool2d: lambda m, at: _pool(specs.MaxPool, m.kernel_size, m.stride, m.padding, at,
                                      m.ceil_mode, m.dilation),
    nn.AvgPool2d: _avg_pool,
    nn.AdaptiveAvgPool2d: lambda m, at: _adaptive("avg", m.output_size, at),
    nn.AdaptiveMaxPool2d: lambda m, at: _adaptive("max", m.output_size, at),
    framework_model.GlobalAvgPool: lambda m, at: specs.GlobalAvgPool(at.name),
    framework_model.GlobalMaxPool: lambda m, at: specs.GlobalMaxPool(at.name),
    nn.ZeroPad2d: lambda m, at: specs.ZeroPad(at.name, *(m.padding[i] for i in (2, 3, 0, 1))),
    nn.Flatten: lambda m, at: _flatten(m.start_dim, m.end_dim, at),
    nn.Linear: _linear,
    nn.Identity: _identity,
    nn.Dropout: lambda m, at: _dropout(m.p, at),
    STOCHASTIC_DEPTH: _stochastic_depth,
    framework_model.SampleDropout: lambda m, at: _dropout(m.rate, at, per_sample=True),
    framework_model.Scale: lambda m, at: specs.Scale(at.name, float(m.factor)),
    framework_model.Affine: _affine,
    framework_model.ChannelScale: lambda m, at: specs.ChannelScale(at.name, m.weight.shape[0]),
}


def _max_pool(n: torch.fx.Node, at: Site) -> specs.MaxPool:
    return _pool(specs.MaxPool, _arg(n, 1, "kernel_size"), _arg(n, 2, "stride"),
                 _arg(n, 3, "padding", 0), at, _arg(n, 5, "ceil_mode", False),
                 _arg(n, 4, "dilation", 1))


def _avg_pool_function(n: torch.fx.Node, at: Site) -> specs.MaxPool | specs.AvgPool:
    if _arg(n, 6, "divisor_override") is not None:
        raise Refused(f"{at.where}: a divisor_override is not in the spec")
    return _pool(specs.AvgPool, _arg(n, 1, "kernel_size"), _arg(n, 2, "stride"),
                 _arg(n, 3, "padding", 0), at, _arg(n, 4, "ceil_mode", False),
                 count_pad=_arg(n, 5, "count_include_pad", True))


def _flatten_function(n: torch.fx.Node, at: Site) -> specs.Flatten:
    return _flatten(_arg(n, 1, "start_dim", 0), _arg(n, 2, "end_dim", -1), at)


def _forms(forms: tuple, reader) -> dict:
    """`reader` under each of a function's forms: torch.X, F.X, the tensor methods."""
    return dict.fromkeys(forms, reader)


# Each function or tensor method the spec expresses: (fx node, Site) -> spec layer(s), None
# for the identity, a merge of its tensor inputs (specs.MERGES) or a Relayout.
FUNCTIONS = {
    **_forms((F.relu, torch.relu, "relu", "relu_"), _relu),
    **_forms((F.relu6,), _relu6),
    **_forms((F.sigmoid, torch.sigmoid, "sigmoid", "sigmoid_"), _activation("sigmoid")),
    **_forms((F.tanh, torch.tanh, "tanh", "tanh_"), _activation("tanh")),
    **_forms((F.silu,), _activation("silu")),
    F.gelu: lambda n, at: _gelu(_arg(n, 1, "approximate", "none"), at),
    **_forms((F.hardsigmoid,), _activation("hard_sigmoid")),
    **_forms((F.hardswish,), _activation("hard_swish")),
    F.leaky_relu: lambda n, at: specs.Activation(at.name, "leaky_relu",
                                                 float(_arg(n, 1, "negative_slope", 0.01))),
    F.elu: lambda n, at: specs.Activation(at.name, "elu", float(_arg(n, 1, "alpha", 1.0))),
    F.max_pool2d: _max_pool,
    F.avg_pool2d: _avg_pool_function,
    F.adaptive_avg_pool2d: lambda n, at: _adaptive("avg", _arg(n, 1, "output_size"), at),
    F.adaptive_max_pool2d: lambda n, at: _adaptive("max", _arg(n, 1, "output_size"), at),
    **_forms((torch.mean, "mean"), _mean),
    **_forms((torch.flatten, "flatten"), _flatten_function),
    **_forms(("view", "reshape", torch.reshape), _reshape),
    **_forms((torch.permute, "permute"), _permute),
    **_forms(("contiguous",), _identity),
    **_forms((operator.add, operator.iadd, torch.add, "add", "add_"), _add),
    **_forms((torch.cat, torch.concat), _concat),
    **_forms((operator.mul, operator.imul, torch.mul, "mul", "mul_"), _multiply),
    F.dropout: _functional_dropout,
}


def kind_of(module: nn.Module):
    """`module`'s key in MODULES (its class, or "module.Class"), or None where not a kind."""
    if type(module) in MODULES:
        return type(module)
    named = f"{type(module).__module__}.{type(module).__qualname__}"
    return named if named in MODULES else None


def supported(table: dict) -> str:
    """The kinds a table reads, by name, for a refusal's list."""
    names = {key.rsplit(".", 1)[-1] if isinstance(key, str) else key.__name__
             for key in table}
    return ", ".join(sorted(names, key=str.lower))
