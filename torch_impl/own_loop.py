"""PyTorch's own loop: the plain loop of the PyTorch tutorials (`for images, labels in
loader:` autocast, backward, scaler step, zero_grad, scheduler step) on the run's model,
initial weights, DataLoader and recipe (compare.run.own_loop drives it and writes what it
measured). Its twin is tf_impl/own_loop.py.
"""

from __future__ import annotations

from contextlib import nullcontext
from collections.abc import Iterator
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from compare.experiment.config import RunConfig
from compare.experiment.datasets import Dataset
from compare.run.own_loop import WindowClock


class Trainer(Protocol):
    """What the plain loop uses of the run's Trainer (torch_impl.train.Trainer, whose module
    imports this one: named here, not imported, so the two import one way)."""

    train_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Any  # torch.amp.GradScaler (disabled where no float16 scaling is needed)
    numerics: dict[str, Any]
    device: torch.device
    non_blocking: bool
    memory_format: torch.memory_format
    steps_per_call: int
    train_batches: Any  # torch_impl.data's loader over the plan's batches


LOOP = ("plain PyTorch loop: for batch in DataLoader, autocast, backward, GradScaler step, "
        "LambdaLR step")


def own_loop(trainer: Trainer, config: RunConfig, dataset: Dataset, lrs: list[float],
             clock: WindowClock, mean_losses: list[list[float]]) -> Iterator[float | None]:
    """Train config.epochs epochs of the trainer's model (DDP- or compile-wrapped as the run
    is) with the plain loop, as far as the caller asks: the trainer's optimizer, loss scaler
    and DataLoader, the per-step learning rates `lrs` through LambdaLR, the run's loss, timed
    by `clock` (a synchronised window after each window's last step). Yields None after each
    window (the caller's work until the next `next` is in no clock) and each epoch's
    training seconds at its end (the device synchronised at both ends); fills `mean_losses`,
    over the first epoch, with the running mean of the loss after each of the run's calls
    ([steps, mean] pairs, as Keras' fit reports them). Losses stay on the device until the
    epoch ends: no step waits for a read."""
    model, optimizer, scaler = trainer.train_model, trainer.optimizer, trainer.scaler
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lrs[min(step, len(lrs) - 1)] / config.lr)
    dtype = trainer.numerics["autocast_dtype"]
    autocast = (lambda: torch.autocast(trainer.device.type, dtype=dtype)) if dtype else nullcontext
    for epoch in range(config.epochs):
        clock.begin_epoch(epoch)
        model.train()
        losses = []
        for images, labels in trainer.train_batches.epoch(epoch):
            images = images.to(trainer.device, non_blocking=trainer.non_blocking,
                               memory_format=trainer.memory_format)
            labels = labels.to(trainer.device, non_blocking=trainer.non_blocking)
            with autocast():
                loss = F.cross_entropy(model(images).float(), labels,
                                       label_smoothing=config.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            losses.append(loss.detach())
            if clock.steps_done(1):
                with clock.away():
                    yield None
        seconds = clock.end_epoch()
        if epoch == 0:
            mean_losses[:] = _running_means(torch.stack(losses).float().cpu().tolist(),
                                            trainer.steps_per_call)
        yield seconds


def _running_means(losses: list[float], every: int) -> list[list[float]]:
    """[steps, mean of the first `steps` losses] after each `every` steps and at the end."""
    means, total = [], 0.0
    for step, loss in enumerate(losses, 1):
        total += loss
        if step % every == 0 or step == len(losses):
            means.append([step, total / step])
    return means
