"""SGD in PyTorch's form for Keras (the update both frameworks use), with the loss scaling of
mixed float16 on a GPU."""

from __future__ import annotations

from typing import Callable

import keras

from compare.experiment.config import RunConfig
from compare.run.interface import DeviceChoice


class TorchFormSGD(keras.optimizers.Optimizer):
    """SGD in PyTorch's form, so both frameworks apply the same update:
    g += wd * p; v = mu * v + g; p -= lr * (g + mu * v if nesterov else v).
    (keras.optimizers.SGD keeps v in units of lr * g, which differs once lr changes.)"""

    def __init__(self, learning_rate, momentum=0.9, nesterov=False, l2=0.0,
                 name="torch_form_sgd", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum, self.nesterov, self.l2 = momentum, nesterov, l2

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = (self.add_optimizer_variables(variables, "momentum")
                          if self.momentum else [])

    def update_step(self, gradient, variable, learning_rate):
        lr = keras.ops.cast(learning_rate, variable.dtype)
        g = keras.ops.cast(gradient, variable.dtype)
        if self.l2:
            g = g + self.l2 * variable
        if self.momentum:
            v = self.momentums[self._get_variable_index(variable)]
            self.assign(v, self.momentum * v + g)
            g = g + self.momentum * v if self.nesterov else v
        self.assign_sub(variable, lr * g)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov,
                "l2": self.l2}


def make_optimizer(model: keras.Model, config: RunConfig, choice: DeviceChoice,
                   learning_rate=None) -> keras.optimizers.Optimizer:
    """SGD in PyTorch's form; under mixed_float16 (a GPU's mixed, or --precision fp16 on any
    device) wrapped in dynamic loss scaling with the same initial scale and growth policy as
    PyTorch's GradScaler (from the config). `learning_rate`: config.lr unless given (a Keras
    schedule for Keras' own fit)."""
    optimizer = TorchFormSGD(config.lr if learning_rate is None else learning_rate,
                             config.momentum, config.nesterov, config.weight_decay)
    if keras.mixed_precision.global_policy().name == "mixed_float16":  # GPU, or fp16
        optimizer = keras.optimizers.LossScaleOptimizer(
            optimizer, initial_scale=config.loss_scale_initial,
            dynamic_growth_steps=config.loss_scale_growth_interval)
    return optimizer


def restorer(optimizer: keras.optimizers.Optimizer) -> Callable[[], None]:
    """A function that sets `optimizer` back to its state now (momentum buffers, step count,
    loss scale: its variables), so a trainer reset probes as a new one would."""
    values = [variable.numpy() for variable in optimizer.variables]

    def restore() -> None:
        for variable, value in zip(optimizer.variables, values):
            variable.assign(value)
    return restore
