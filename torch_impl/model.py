"""Build a compare.experiment.specs ModelSpec as a torch nn.Module, and load the shared weights."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from compare.experiment import specs


class Residual(nn.Module):
    """x + branch(x)."""

    def __init__(self, branch: nn.Module):
        super().__init__()
        self.branch = branch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)


class Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class GlobalMaxPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=(2, 3), keepdim=True)


class SpecNet(nn.Module):
    """The spec's layers in order; `named_layers` maps spec names to modules."""

    def __init__(self, spec: specs.ModelSpec, bn_momentum: float, bn_epsilon: float):
        super().__init__()
        self.spec = spec
        self.named_layers: dict[str, nn.Module] = {}
        self.body = self._build(spec.layers, {"momentum": bn_momentum, "epsilon": bn_epsilon})

    def _build(self, layers, norm: dict) -> nn.Sequential:
        modules = []
        for layer in layers:
            if type(layer) not in TORCH_LAYERS:
                raise TypeError(f"no torch build for {layer!r}")
            module = TORCH_LAYERS[type(layer)](layer, norm, self)
            self.named_layers[layer.name] = module
            modules.append(module)
        return nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


# Each spec kind's module: (spec layer, BatchNorm settings, the net building it) -> module.
TORCH_LAYERS = {
    specs.Conv: lambda layer, norm, net: nn.Conv2d(
        layer.in_channels, layer.out_channels, layer.kernel, padding=layer.padding,
        bias=layer.bias),
    specs.BatchNorm: lambda layer, norm, net: nn.BatchNorm2d(
        layer.channels, momentum=norm["momentum"], eps=norm["epsilon"]),
    specs.ReLU: lambda layer, norm, net: nn.ReLU(inplace=True),
    specs.MaxPool: lambda layer, norm, net: nn.MaxPool2d(layer.size),
    specs.GlobalMaxPool: lambda layer, norm, net: GlobalMaxPool(),
    specs.Flatten: lambda layer, norm, net: nn.Flatten(),
    specs.Dense: lambda layer, norm, net: nn.Linear(layer.in_features, layer.out_features,
                                                    bias=layer.bias),
    specs.Scale: lambda layer, norm, net: Scale(layer.factor),
    specs.Residual: lambda layer, norm, net: Residual(net._build(layer.layers, norm)),
}


def build_model(spec: specs.ModelSpec, bn_momentum: float = 0.1,
                bn_epsilon: float = 1e-5) -> SpecNet:
    """The spec as an nn.Module (NCHW input), PyTorch's own initialisation."""
    return SpecNet(spec, bn_momentum, bn_epsilon)


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
    """The model's weights in the canonical layout, float32 numpy."""
    return {name: _tensor(model, name).detach().float().cpu().numpy().copy()  # not a live view
            for name in specs.parameter_shapes(spec)}


def export_gradients(model: SpecNet, gradients: dict[str, torch.Tensor],
                     spec: specs.ModelSpec) -> dict[str, np.ndarray]:
    """Gradients keyed by the model's parameter names (named_parameters), in the canonical
    layout."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {name: gradients[names[id(_tensor(model, name))]].detach().float().cpu().numpy().copy()
            for name in specs.parameter_shapes(spec) if specs.trainable(name)}


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
