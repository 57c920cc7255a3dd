"""A framework's side of the parity check (compare.experiment.parity judges the two): its
trainer driven through the plan's first batches, what it computed written as NPZ."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from compare import files
from compare.experiment import parity, specs
from compare.experiment.config import RunConfig
from compare.run.interface import ProbeTrainer


def write_probe(trainer: ProbeTrainer, config: RunConfig, path: Path, steps: int,
                perturb: bool = False) -> None:
    """Drive a framework's trainer: logits, loss and gradients on the plan's first batch,
    then the weights after `steps` SGD steps on the plan's first batches; saved as NPZ in
    the canonical layout, with what mapping the running variance between conventions takes
    (bn/<layer>: momentum, values per channel in a batch; running_variance_unbiased).
    `perturb` first moves every initial weight by one ulp of the precision the run computes
    in (float32, or bfloat16/float16 under mixed precision, where a float32 ulp would vanish
    in the cast), to measure how far rounding alone carries the same framework. The trainer
    starts from its reset state, so one that has probed before probes as a new one would."""
    initial = trainer.initial
    assert initial is not None  # the probe's configs share the initial weights (parity.py)
    if perturb:
        initial = trainer.initial = {
            name: parity.one_ulp_up(w, parity.compute_epsilon(trainer.manifest()))
            for name, w in initial.items()}
    trainer.reset()
    # the plan's batches in order, into the next epoch's where a tiny training set has
    # fewer batches than the probe takes steps
    batches = (batch for epoch in itertools.count() for batch in trainer.batches(epoch))
    first = next(batches)
    logits, loss, grads = trainer.gradients(first)
    trainer.reset()  # the probe's forward moved BatchNorm statistics
    total = trainer.steps_per_epoch * config.epochs
    for step, batch in zip(range(steps), itertools.chain([first], batches)):
        trainer.train_step(batch, parity.probe_learning_rate(config, step, total))
    out: dict[str, Any] = {
        "logits": logits, "loss": np.float64(loss),
        "running_variance_unbiased": np.bool_(trainer.unbiased_running_variance)}
    out.update({f"grad/{k}": v for k, v in grads.items()})
    out.update({f"param/{k}": v for k, v in trainer.weights().items()})
    out.update({f"init/{k}": v for k, v in initial.items()})
    out.update({f"bn/{k}": v for k, v in _batchnorm_counts(trainer.spec, config,
                                                           len(logits)).items()})
    files.write_atomic(path, lambda f: np.savez(f, **out), mode="wb")


def _batchnorm_counts(spec: specs.ModelSpec, config: RunConfig,
                      batch: int) -> dict[str, np.ndarray]:
    """Each BatchNorm layer's (momentum, values per channel in a batch of `batch`)."""
    norm = {"momentum": config.bn_momentum, "epsilon": config.bn_epsilon}
    return {layer.name: np.array([layer.settings(norm)[0],
                                  batch * int(np.prod(specs.input_shape_of(spec, layer.name)[1:]))])
            for layer in specs.walk(spec.layers) if isinstance(layer, specs.BatchNorm)}
