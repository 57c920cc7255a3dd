"""SGD in PyTorch's form (the update both frameworks use), fused on a GPU."""

from __future__ import annotations

import inspect

import torch

from compare.experiment.config import RunConfig
from compare.run.interface import DeviceChoice


def make_optimizer(model: torch.nn.Module, config: RunConfig, choice: DeviceChoice,
                   learning_rate=None) -> torch.optim.Optimizer:
    """SGD in PyTorch's form (the one both frameworks use): g += wd * p; v = mu * v + g;
    p -= lr * (g + mu * v if nesterov else v). On a GPU the fused kernel, which also takes
    GradScaler's inf check on the device instead of a host sync per step.
    `learning_rate`: config.lr unless given (an lr_scheduler may set it each step)."""
    fused = choice.on_gpu and "fused" in inspect.signature(torch.optim.SGD).parameters
    lr = config.lr if learning_rate is None else learning_rate
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=config.momentum,
                           nesterov=config.nesterov, weight_decay=config.weight_decay,
                           **({"fused": True} if fused else {}))


def _optimizer_kind(optimizer: torch.optim.Optimizer) -> str:
    kind = ("fused" if optimizer.defaults.get("fused")
            else "foreach" if optimizer.defaults.get("foreach") is not False else "for-loop")
    return f"torch.optim.SGD (dampening 0, {kind} implementation)"
