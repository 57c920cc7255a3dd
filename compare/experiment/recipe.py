"""The recipe's formulas, one piece of code for both frameworks: the learning rate of every
optimizer step, and the SGD update rule both apply (in PyTorch's form) in words."""

from __future__ import annotations

import math

from compare.experiment.config import RunConfig


def learning_rate(config: RunConfig, step: int, total_steps: int) -> float:
    """The learning rate for optimizer step `step` (0-based), the same in both frameworks."""
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "onecycle":
        rise = max(1, math.ceil(config.warmup_fraction * total_steps))
        if step < rise:
            return config.lr * (step + 1) / rise
        fall = max(1, total_steps - rise)
        return config.lr * max(0.0, (total_steps - step) / fall)
    raise ValueError(f"unknown schedule {config.schedule!r}")


def update_rule(config: RunConfig) -> str:
    """The SGD update both frameworks apply (PyTorch's form), with this config's numbers."""
    step = "g + mu*v" if config.nesterov else "v"
    return (f"g = grad + {config.weight_decay}*w; v = mu*v + g (mu={config.momentum}, v0 = 0); "
            f"w -= lr*({step})")
