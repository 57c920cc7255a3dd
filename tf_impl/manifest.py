"""TensorFlow's half of the fairness manifest (compare.run.fairness builds the rest): what a
Trainer computes in and how, in words a reader can set beside PyTorch's."""

from __future__ import annotations

import tensorflow as tf

from compare.experiment import networks, specs, strategy
from tf_impl import data as tf_data
from tf_impl.device import FRAMEWORK


def describe(trainer) -> dict:
    """TensorFlow's half of the fairness manifest (compare.run.fairness builds the rest)."""
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    scaling = None
    if trainer.numerics["loss_scaling"]:
        scaling = (f"dynamic (keras.optimizers.LossScaleOptimizer): initial "
                   f"{trainer.config.loss_scale_initial:g}, x2 after "
                   f"{trainer.config.loss_scale_growth_interval} finite steps, /2 on overflow")
    wrapped = strategy.resolve(trainer.config.strategy, FRAMEWORK, trainer.replicas,
                               trainer.choice.processes)
    distribution = (f"MirroredStrategy over {', '.join(trainer.choice.names)}"
                    if wrapped.wrapped else
                    f"default strategy (no distribution) on {trainer.choice.names[0]}")
    if trainer.placement is not None:
        distribution = ("default strategy, one replica; its stages under tf.device of "
                        + ", ".join(trainer.placement))
    if trainer.choice.shared_chip and trainer.choice.on_gpu:
        distribution += " (logical GPUs carved from one chip: --share-device)"
    if trainer.choice.processes > 1:
        distribution = (f"MultiWorker{distribution} on each of {trainer.choice.processes} workers "
                        f"(collective {'NCCL' if trainer.choice.on_gpu else 'ring'} all-reduce)")
    return {
        "precision_policy": trainer.numerics["policy"],
        "tf32": {"matmul": tf32, "cudnn": tf32},
        "cudnn_autotune": trainer.choice.on_gpu,  # TF autotunes cuDNN convolutions by default
        "loss_scaling": scaling,
        "bn_momentum_as_set": _keras_convention(networks.batchnorm_settings(
            trainer.spec, trainer.config.bn_momentum, trainer.config.bn_epsilon)["momentum"]),
        "bn_running_variance": "biased batch variance (Keras)",
        "optimizer_implementation": "TorchFormSGD (a keras.optimizers.Optimizer, "
                                    "tf_impl/optimizer.py)",
        "distribution": distribution,
        "strategy": wrapped.to_dict(FRAMEWORK),
        "precision": trainer.numerics["resolved"].to_dict(trainer.config.precision),
        "step_batching": (f"{trainer.steps_per_call} step(s) per tf.function call, which reads "
                          "the distributed iterator inside the graph (tf.while_loop over "
                          "get_next, as Keras' steps_per_execution)" + (
                              "; --cuda-graphs is PyTorch's alone" if trainer.config.cuda_graphs
                              else "")),
        "input_wait": "tf.timestamp before and after the iterator's get_next inside the "
                      "step function (in the graph: no host next() to time)",
        "compile": (("XLA jit_compile (forward, backward and update)"
                     if trainer.compiles_update else "XLA jit_compile (forward+backward)")
                    if trainer.config.compile else "off"),
        "compile_default": framework_default_compile(trainer),
        "channels_last": True,  # Keras convolutions compute NHWC; not switchable here
        "pipeline": tf_data.pipeline_settings(trainer.config, trainer.choice),
        "placement": trainer.placement,  # each stage's device (None: one piece)
        "weights_on": weights_on(trainer),
        "default_init": "Keras default initialisers",
        # What Keras itself does differently; no setting changes it.
        "loss_scale_check": (
            "Keras LossScaleOptimizer: each step branches (tf.cond) on whether every "
            "gradient is finite; the predicate is read on the host, a device-to-host "
            "wait per step" if trainer.numerics["loss_scaling"] else None),
        "batchnorm_kernel": (
            "Keras 3 BatchNormalization: moments and normalisation as separate ops (no "
            "fused kernel), in float32" + (
                f" (inputs cast up from the {trainer.numerics['policy']} policy's compute type)"
                if trainer.numerics["policy"] != "float32" else "")
            if specs.has_batchnorm(trainer.spec) else None),
    }


def weights_on(trainer) -> list[str]:
    """Where the model's variables live, read from TensorFlow (not the config): for each
    stage of a split model, or each local replica (the components of every mirrored
    variable), the devices holding its weights, as "/gpu:1"."""
    if trainer.placement is not None:
        groups = [[w.value for w in part.weights] for part in trainer.model.parts]
    else:
        groups = []
        for variable in trainer.model.weights:
            local = trainer.strategy.experimental_local_results(variable.value)
            groups += [[] for _ in range(len(local) - len(groups))]
            for group, component in zip(groups, local):
                group.append(component)
    return [", ".join(sorted({"/" + v.device.rsplit("device:", 1)[-1].lower() for v in group}))
            for group in groups]


def framework_default_compile(trainer) -> bool:
    """Whether Keras compiles this model with XLA by default here, asked of Keras: an
    uncompiled Model's `jit_compile` resolves `"auto"` as `Model.compile` would (the visible
    devices, the strategy the model was built under, op determinism, every layer's
    supports_jit). Reading it caches the answer on the model; an unset flag is unset again
    after, so the model stays as it was built (Keras' own loop compiles it later)."""
    model = trainer.model
    unset = model._jit_compile is None  # noqa: SLF001 - set once resolved or compiled
    try:
        return bool(model.jit_compile)
    finally:
        if unset:
            model._jit_compile = None  # noqa: SLF001


def compile_baseline() -> dict[str, int]:
    """Nothing to subtract: what `compiled` reads belongs to the Trainer's own tf.function."""
    return {}


def compiled(trainer) -> dict:
    """What compiled of the training step so far, read from TensorFlow (not the config): for
    each trace of the function XLA compiles under --compile (the forward and backward, with
    the update where it compiles that too), whether XLA must compile it (its graph's
    _XlaMustCompile) and the HLO instructions XLA builds for it."""
    function = trainer._jit_part
    traced = function._list_all_concrete_functions()  # no public list of traces
    must = [c for c in traced if c.function_def.attr["_XlaMustCompile"].b]
    hlo = sum(sum(" = " in line for line in function.experimental_get_compiler_ir(
        *c.structured_input_signature[0])(stage="hlo").splitlines()) for c in must)
    return {"compiler": "XLA (jit_compile)", "compiled": bool(must) and hlo > 0,
            "traces": len(traced), "xla_traces": len(must), "hlo_instructions": hlo}


def _keras_convention(momentum):
    """PyTorch's BatchNorm momentum (the batch statistic's share) as Keras takes it (the old
    statistic's share); a list where the network's layers differ."""
    return [1.0 - m for m in momentum] if isinstance(momentum, list) else 1.0 - momentum
