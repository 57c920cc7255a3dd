"""SGD in PyTorch's form (the update both frameworks use), fused on a GPU."""

from __future__ import annotations

import copy
import inspect
from typing import Callable

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
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=config.momentum,
                                nesterov=config.nesterov, weight_decay=config.weight_decay,
                                **({"fused": True} if fused else {}))
    if fused and config.momentum:
        _start_momentum_at_zero(optimizer)
    return optimizer


def restorer(optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    """A function that sets `optimizer` back to its state now (its momentum buffers: none
    yet, or zeros), so a trainer reset probes as a new one would. The copy waits in host
    memory: on a GPU it would count in every run's peak memory."""
    state = optimizer.state_dict()  # its tensors are the live buffers: copied
    state = {**state, "state": {index: {name: value.detach().to("cpu", copy=True)
                                        for name, value in buffers.items()}
                                for index, buffers in state["state"].items()}}

    def restore() -> None:  # load_state_dict moves each tensor to its parameter's device
        optimizer.load_state_dict(copy.deepcopy(state))  # loaded tensors become live ones
    return restore


def _start_momentum_at_zero(optimizer: torch.optim.SGD) -> None:
    """Every momentum buffer made now, as zeros. The fused SGD makes missing buffers with
    torch.empty_like on its first step and, when GradScaler found an overflow there, skips
    writing them: they keep uninitialised memory (values up to 1e37 seen), and the next step
    moves the weights by it (torch 2.11 to 2.14; the loss scale then halved on every step of
    the H200's float16 test). From zero, the first step is the stock one: v = mu * 0 + g = g."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param)


def _optimizer_kind(optimizer: torch.optim.Optimizer) -> str:
    kind = ("fused" if optimizer.defaults.get("fused")
            else "foreach" if optimizer.defaults.get("foreach") is not False else "for-loop")
    return f"torch.optim.SGD (dampening 0, {kind} implementation)"
