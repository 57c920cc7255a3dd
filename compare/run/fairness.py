"""The fairness manifest of a run: every setting both frameworks must share, as the run used it.

The half that follows from the RunConfig alone is built here, once, for both frameworks;
each framework's Trainer.manifest() adds only what it decides itself (its precision
policy, TF32 and autotuning flags, loss scaling, BatchNorm conventions, optimizer and
distribution machinery, compiler, memory layout, input pipeline, default initialisers).
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from compare.experiment import compile_state, networks, plan, specs, stages, weights
from compare.experiment.config import (
    RunConfig,
    stage_count,
    steps_per_call,
    steps_per_call_source,
)
from compare.experiment.recipe import update_rule
from compare.machine import allocator, cluster
from compare.run.interface import DeviceChoice
from compare.setup.config import ran_in

# Keys the framework half must provide (tests check both trainers against this list).
FRAMEWORK_KEYS = ("precision", "precision_policy", "tf32", "cudnn_autotune", "loss_scaling",
                  "bn_momentum_as_set", "bn_running_variance", "optimizer_implementation",
                  "distribution", "strategy", "step_batching", "input_wait", "compile",
                  "compile_default",
                  "channels_last", "pipeline", "default_init", "loss_scale_check",
                  "batchnorm_kernel", "placement", "weights_on")


def manifest(config: RunConfig, choice: DeviceChoice, replicas: int,
             framework_half: dict[str, Any], spec: Any = None) -> dict[str, Any]:
    """The whole manifest: the config's shared half merged with the framework's own."""
    missing = [k for k in FRAMEWORK_KEYS if k not in framework_half]
    if missing:
        raise ValueError(f"the framework's manifest lacks {', '.join(missing)}")
    own = dict(framework_half)
    launched = cluster.launch(config.framework)
    default_init = own.pop("default_init")
    batchnorm = networks.batchnorm_settings(spec or networks.get_spec(config.model),
                                         config.bn_momentum, config.bn_epsilon)
    return {
        # The precision resolved on this device (compare.experiment.precision_rule):
        # requested, chosen, why.
        "precision": own.pop("precision"),
        "precision_policy": own.pop("precision_policy"),
        "tf32": own.pop("tf32"),
        "cudnn_autotune": own.pop("cudnn_autotune"),
        "deterministic": config.deterministic,
        "loss_scaling": own.pop("loss_scaling"),
        # Compared in PyTorch's convention (new = (1 - m) * old + m * batch); `as_set` is
        # the number the framework was given in its own convention; `set_by`: the run's
        # --bn-momentum/--bn-epsilon, or the network's own layers (a ported network's).
        "bn_momentum": {"torch_convention": batchnorm["momentum"],
                        "as_set": own.pop("bn_momentum_as_set"),
                        "set_by": batchnorm["set_by"]},
        "bn_epsilon": batchnorm["epsilon"],
        # the network's dropout and stochastic depth (--no-dropout: none)
        "dropout": specs.dropout_text(spec or networks.run_spec(config)),
        "bn_running_variance": own.pop("bn_running_variance"),
        "bn_statistics": "per replica" if replicas > 1 else "single replica",
        "update_rule": update_rule(config),
        "optimizer_implementation": own.pop("optimizer_implementation"),
        "weight_decay_form": f"L2 {config.weight_decay} added to the gradient before momentum",
        "loss": f"mean cross-entropy, label smoothing {config.label_smoothing}",
        "lr_schedule": f"{config.schedule}, peak {config.lr}, set every step",
        "global_batch": config.batch_size,
        "per_replica_batch": config.batch_size // replicas,
        "replicas": replicas,
        "processes": choice.processes,
        "launcher": launched.launcher or "cnncompare (one process group)",
        "nodes": launched.nodes,
        "distribution": own.pop("distribution"),
        # --parallel: replicas, or the network cut into stages (compare.experiment.stages)
        "parallel": _parallel(config, spec),
        # each stage's device, in the framework's words
        "placement": (None if (stage_devices := own.pop("placement")) is None else
                      [f"stage {i}: {d}" for i, d in enumerate(stage_devices)]),
        # where each replica's or stage's weights live, read from the framework's variables
        "weights_on": own.pop("weights_on"),
        "strategy": own.pop("strategy"),  # the wrapper --strategy chose (experiment.strategy)
        # Steps per call of the step function, resolved (experiment.config.steps_per_call), and
        # how the framework batches them.
        "steps_per_call": steps_per_call(config, choice.on_gpu),
        "steps_per_call_from": steps_per_call_source(config, choice.on_gpu),
        "step_batching": own.pop("step_batching"),
        "input_wait": own.pop("input_wait"),  # where the input wait is timed
        "compile": own.pop("compile"),
        # compiled or eager, and whether that is the framework's own default on this device
        # (the framework's own answer: compare.experiment.compile_state)
        "compile_state": compile_state.resolve(
            config, choice.kind, replicas, choice.processes,
            framework_says=own.pop("compile_default")).to_dict(),
        # the compilers' caches on disk at the start: cold or warm (compare.run.compile_cache)
        "compile_cache": config.compile_cache,
        "channels_last": own.pop("channels_last"),
        "pipeline": _pipeline(config, own.pop("pipeline")),
        # Each framework's own behaviour that no setting changes (the report's notes).
        "loss_scale_check": own.pop("loss_scale_check"),
        "batchnorm_kernel": own.pop("batchnorm_kernel"),
        "init_source": _init_source(config, default_init),
        "data_plan_seed": config.seed,
        "device_kind": choice.kind,
        "device": choice.description,
        # the C library's malloc in this process, as both frameworks' host buffers meet it
        "host_allocator": allocator.describe(),
        # the Python this process runs in, and what chose it (compare.setup.config)
        "interpreter": ran_in(config.framework),
        **own,  # anything else the framework records
    }


class Parallel(TypedDict):
    """How the devices share the work (the manifest's `parallel`)."""

    kind: str  # --parallel: replicas, or the network cut into stages
    micro_batches: int
    stages: NotRequired[list[dict[str, int | str | float | None]]]  # stages.describe


def _parallel(config: RunConfig, spec: Any = None) -> Parallel:
    """How the devices share the work: the kind, the stages' cut of `spec` (the trained
    network), the micro-batches."""
    record: Parallel = {"kind": config.parallel, "micro_batches": config.micro_batches}
    if stage_count(config) > 1:
        spec = spec or networks.get_spec(config.model)
        record["stages"] = stages.describe(spec, stages.cut(spec, stage_count(config)))
    return record


def _pipeline(config: RunConfig, loader: dict[str, Any]) -> dict[str, Any]:
    """The pipeline entry: its kind, the framework's loader settings, then how the shared
    plan's augmentation was applied (by the framework's `augmented_by` ops, on the device
    where the loader says `on_device`)."""
    loader = dict(loader)
    on_device = ", on the device" if loader.pop("on_device", False) else ""
    how = plan.augmentation_note(config.augment, loader.pop("augmented_by"), config.cutout)
    return {"kind": config.pipeline.kind, **loader,
            "augmentation": how + (on_device if config.augment else "")}


def _init_source(config: RunConfig, default_init: str) -> str:
    """Where the initial weights came from, in words a reader can check."""
    if not config.shared_init:
        return default_init
    if config.init_weights:
        return (f"shared weights from {config.init_weights} (sha256 "
                f"{weights.digest(config.init_weights)[:16]}...)")
    return f"shared numpy weights (compare.experiment.weights), seed {config.seed}"
