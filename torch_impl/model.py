"""Build a compare.experiment.specs ModelSpec as a torch nn.Module, and load the shared weights."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from compare.experiment import specs, stages


class Residual(nn.Module):
    """shortcut(x) + branch(x); an empty shortcut is the identity."""

    def __init__(self, branch: nn.Module, shortcut: nn.Module):
        super().__init__()
        self.branch, self.shortcut = branch, shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shortcut(x) + self.branch(x)


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class GlobalMaxPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=(2, 3), keepdim=True)


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=(2, 3), keepdim=True)


class Merge(nn.Module):
    """Paths from one input combined: summed, concatenated along the channels, or
    multiplied (a (N, C, 1, 1) gate broadcasts over the map)."""

    def __init__(self, op: str, paths: list[nn.Module]):
        super().__init__()
        self.op, self.paths = op, nn.ModuleList(paths)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        found = [path(x) for path in self.paths]
        if self.op == "concat":
            return torch.cat(found, dim=1)
        out = found[0]
        for other in found[1:]:
            out = out * other if self.op == "multiply" else out + other
        return out


class ChannelLayerNorm(nn.LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) map at each position (or of (N, C))."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return super().forward(x)
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ChannelScale(nn.Module):
    """Each channel times its learned factor."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight.view(-1, *([1] * (x.dim() - 2)))


class Affine(nn.Module):
    """Fixed per-channel x * scale + offset, the constants kept in float64 (a Normalization's
    1/std is no float32 number) and cast to the input's dtype where used."""

    def __init__(self, scale: np.ndarray, offset: np.ndarray):
        super().__init__()
        self.scale, self.offset = (torch.from_numpy(v).double() for v in (scale, offset))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (-1, *([1] * (x.dim() - 2)))
        return (x * self.scale.to(x.device, x.dtype).view(shape)
                + self.offset.to(x.device, x.dtype).view(shape))


class HardSigmoid02(nn.Module):
    """clip(0.2x + 0.5, 0, 1): Keras 2's hard sigmoid."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(0.2 * x + 0.5, 0.0, 1.0)


# Each activation formula (specs.FORMULAS) as a torch module: (alpha) -> module.
ACTIVATIONS = {
    "sigmoid": lambda alpha: nn.Sigmoid(),
    "tanh": lambda alpha: nn.Tanh(),
    "silu": lambda alpha: nn.SiLU(),
    "gelu": lambda alpha: nn.GELU(),
    "gelu_tanh": lambda alpha: nn.GELU(approximate="tanh"),
    "hard_sigmoid": lambda alpha: nn.Hardsigmoid(),
    "hard_sigmoid_0.2": lambda alpha: HardSigmoid02(),
    "hard_swish": lambda alpha: nn.Hardswish(),
    "leaky_relu": lambda alpha: nn.LeakyReLU(alpha),
    "elu": lambda alpha: nn.ELU(alpha),
}


class SampleDropout(nn.Module):
    """Dropout of a whole sample's tensor at `rate`, the kept ones scaled by 1 / (1 - rate)
    (stochastic depth, torchvision.ops.StochasticDepth's "row" mode; torchvision.ops is not
    imported for it: it pulls in the compiler stack)."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or not self.rate:
            return x
        keep = x.new_empty((x.shape[0], *([1] * (x.dim() - 1)))).bernoulli_(1.0 - self.rate)
        return x * keep / (1.0 - self.rate)


def _pool(layer: specs.MaxPool) -> nn.Module:
    if isinstance(layer, specs.AvgPool):
        return nn.AvgPool2d(layer.size, layer.step, layer.padding, layer.ceil_mode,
                            count_include_pad=layer.count_pad)
    return nn.MaxPool2d(layer.size, layer.step, layer.padding, ceil_mode=layer.ceil_mode)


class SpecNet(nn.Module):
    """The spec's layers in order; `named_layers` maps spec names to modules. With
    `placement` (a device per stage, --parallel model) `body` holds one Sequential per stage
    (compare.experiment.stages cuts them), each on its device, and the activations move from
    stage to stage; the logits come back to the first stage's device, where the labels are."""

    def __init__(self, spec: specs.ModelSpec, bn_momentum: float, bn_epsilon: float,
                 placement: tuple[str, ...] | None = None):
        super().__init__()
        self.spec = spec
        self.named_layers: dict[str, nn.Module] = {}
        self.channels_in = {name: shapes[0][0] for name, shapes in
                            specs.layer_shapes(spec).items()}  # for the per-channel constants
        self.placement = tuple(placement) if placement and len(placement) > 1 else None
        body = self._build(spec.layers, {"momentum": bn_momentum, "epsilon": bn_epsilon})
        if self.placement is not None:
            body = nn.Sequential(*(nn.Sequential(*body[stage.start:stage.end])
                                   for stage in stages.cut(spec, len(self.placement))))
        self.body = body

    def _build(self, layers, norm: dict) -> nn.Sequential:
        modules: list[nn.Module] = []
        for layer in layers:
            if type(layer) not in TORCH_LAYERS:
                raise TypeError(f"no torch build for {layer!r}")
            module = TORCH_LAYERS[type(layer)](layer, norm, self)
            if not modules and isinstance(module, (nn.ReLU, nn.ReLU6)):
                module.inplace = False  # a block's input feeds its shortcut too: keep it
            self.named_layers[layer.name] = module
            modules.append(module)
        return nn.Sequential(*modules)

    def place(self, device: torch.device, memory_format: torch.memory_format,
              dtype: torch.dtype = torch.float32) -> SpecNet:
        """On `device` in `dtype` (float64: the parity probe's), or each stage on its own
        device (non-blocking copies between GPUs)."""
        if self.placement is None:
            # Module.to takes memory_format beside a device and dtype; its stubs list it alone
            return self.to(device, dtype,  # type: ignore[call-overload]
                           memory_format=memory_format)
        for stage, where in zip(self.body, self.placement):
            stage.to(torch.device(where), dtype,  # type: ignore[call-overload]
                     memory_format=memory_format)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.placement is None:
            return self.body(x)
        first = x.device
        for stage, where in zip(self.body, self.placement):
            x = stage(x.to(where, non_blocking=True))
        return x.to(first, non_blocking=True)


# Each spec kind's module: (spec layer, BatchNorm settings, the net building it) -> module.
TORCH_LAYERS = {
    specs.Conv: lambda layer, norm, net: nn.Conv2d(
        layer.in_channels, layer.out_channels, layer.kernel, stride=layer.stride,
        padding=layer.padding, groups=layer.groups, bias=layer.bias),
    specs.BatchNorm: lambda layer, norm, net: nn.BatchNorm2d(
        layer.channels, momentum=layer.settings(norm)[0], eps=layer.settings(norm)[1]),
    specs.LayerNorm: lambda layer, norm, net: ChannelLayerNorm(layer.channels, layer.epsilon),
    specs.ReLU: lambda layer, norm, net: (nn.ReLU(inplace=True) if layer.max_value is None
                                          else nn.ReLU6(inplace=True)),
    specs.Activation: lambda layer, norm, net: ACTIVATIONS[layer.formula](layer.alpha),
    specs.MaxPool: lambda layer, norm, net: _pool(layer),
    specs.AvgPool: lambda layer, norm, net: _pool(layer),
    specs.AdaptivePool: lambda layer, norm, net: (
        nn.AdaptiveAvgPool2d if layer.op == "avg" else nn.AdaptiveMaxPool2d)(layer.output),
    specs.GlobalMaxPool: lambda layer, norm, net: GlobalMaxPool(),
    specs.GlobalAvgPool: lambda layer, norm, net: GlobalAvgPool(),
    specs.ZeroPad: lambda layer, norm, net: nn.ZeroPad2d((layer.left, layer.right, layer.top,
                                                         layer.bottom)),
    specs.Flatten: lambda layer, norm, net: nn.Flatten(),
    specs.Dense: lambda layer, norm, net: nn.Linear(layer.in_features, layer.out_features,
                                                    bias=layer.bias),
    specs.Dropout: lambda layer, norm, net: (SampleDropout(layer.rate) if layer.per_sample
                                             else nn.Dropout(layer.rate)),
    specs.Scale: lambda layer, norm, net: Scale(layer.factor),
    specs.Affine: lambda layer, norm, net: Affine(*layer.per_channel(
        net.channels_in[layer.name])),
    specs.ChannelScale: lambda layer, norm, net: ChannelScale(layer.channels),
    specs.Residual: lambda layer, norm, net: Residual(net._build(layer.layers, norm),
                                                      net._build(layer.shortcut, norm)),
    specs.Merge: lambda layer, norm, net: Merge(layer.op, [net._build(path, norm)
                                                           for path in layer.branches]),
}


def build_model(spec: specs.ModelSpec, bn_momentum: float = 0.1, bn_epsilon: float = 1e-5,
                placement: tuple[str, ...] | None = None) -> SpecNet:
    """The spec as an nn.Module (NCHW input), PyTorch's own initialisation; with `placement`
    (a device per stage, --parallel model) cut into stages (SpecNet)."""
    return SpecNet(spec, bn_momentum, bn_epsilon, placement)


def _tensor(model: SpecNet, name: str) -> torch.Tensor:
    layer_name, part = name.rsplit(".", 1)
    return getattr(model.named_layers[layer_name], part)


def load_weights(model: SpecNet, weights: dict[str, np.ndarray],
                 spec: specs.ModelSpec) -> None:
    """Copy canonical-layout weights (compare.experiment.weights) into the model: torch's
    layout is canonical."""
    with torch.no_grad():
        for name in specs.parameter_shapes(spec):
            target, value = _tensor(model, name), weights[name]
            if tuple(target.shape) != value.shape:
                raise ValueError(f"{name}: model has {tuple(target.shape)}, weights {value.shape}")
            target.copy_(torch.from_numpy(value))


def export_weights(model: SpecNet, spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """The model's weights in the canonical layout, numpy in the model's dtype (float32, or
    the parity probe's float64)."""
    return {name: _tensor(model, name).detach().cpu().numpy().copy()  # not a live view
            for name in specs.parameter_shapes(spec)}


def export_gradients(model: SpecNet, gradients: dict[str, torch.Tensor],
                     spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """Gradients keyed by the model's parameter names (named_parameters), in the canonical
    layout."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {name: gradients[names[id(_tensor(model, name))]].detach().cpu().numpy().copy()
            for name in specs.parameter_shapes(spec) if specs.trainable(name)}


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe_model(spec: specs.ModelSpec) -> dict:
    """The spec as this framework builds it: its trainable parameters, counted by the
    framework (`cnncompare models`)."""
    return {"parameters": count_parameters(build_model(spec))}
