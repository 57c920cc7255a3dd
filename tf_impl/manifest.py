"""TensorFlow's half of the fairness manifest (compare.run.fairness builds the rest): what a
Trainer computes in and how, in words a reader can set beside PyTorch's."""

from __future__ import annotations

import os
from pathlib import Path

import tensorflow as tf

from compare.experiment import networks, specs, strategy
from compare.run import compile_cache
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


XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"  # TF_XLA_FLAGS (tensorflow/compiler/jit)


def compile_cache_environment(directory: Path, gpu: bool) -> dict[str, str]:
    """Where TensorFlow keeps what it compiled across processes, all in `directory`: XLA's
    persistent cache of compiled programs (TF_XLA_FLAGS), XLA's autotuning results per fusion
    where the run has a GPU (XLA_FLAGS) and the CUDA driver's PTX cache. Both flag sets are
    read at XLA's first compile (a flag XLA does not know aborts the process: each is
    TensorFlow 2.21's); the user's other flags stay."""
    def joined(name: str, flag: str) -> str:
        return " ".join(filter(None, (os.environ.get(name, ""), flag)))
    found = {"TF_XLA_FLAGS": joined("TF_XLA_FLAGS", f"{XLA_CACHE_FLAG}={directory / 'xla'}"),
             "CUDA_CACHE_PATH": str(directory / "cuda")}
    if gpu:  # only a GPU autotunes; an older XLA may not know the flag (and would abort)
        found["XLA_FLAGS"] = joined("XLA_FLAGS", "--xla_gpu_per_fusion_autotune_cache_dir="
                                    f"{directory / 'autotune'}")
    return found


def _xla_cache_folder() -> Path | None:
    """The persistent cache XLA writes to in this process: TF_XLA_FLAGS' last such flag."""
    flags = [flag.split("=", 1)[1] for flag in os.environ.get("TF_XLA_FLAGS", "").split()
             if flag.startswith(f"{XLA_CACHE_FLAG}=")]
    return Path(flags[-1]) if flags else None


def compile_baseline() -> dict:
    """XLA's persistent cache as the Trainer finds it (what `compiled` compares with); what
    `compiled` reads of the traces belongs to the Trainer's own tf.function."""
    return {"cache": compile_cache.entries(_xla_cache_folder())}


def compiled(trainer) -> dict:
    """What compiled of the training step so far, read from TensorFlow (not the config): for
    each trace of the function XLA compiles under --compile (the forward and backward, with
    the update where it compiles that too), whether XLA must compile it (its graph's
    _XlaMustCompile) and the HLO instructions XLA builds for it; and what XLA found in its
    persistent cache: each program it compiled afresh it saves there (a hit is read, not
    saved), whatever else of the run compiled with XLA (evaluation, Keras' `fit`) included.
    TensorFlow reports no compile time without its verbose logs: null."""
    function = trainer._jit_part
    traced = function._list_all_concrete_functions()  # no public list of traces
    must = [c for c in traced if c.function_def.attr["_XlaMustCompile"].b]
    hlo = sum(sum(" = " in line for line in function.experimental_get_compiler_ir(
        *c.structured_input_signature[0])(stage="hlo").splitlines()) for c in must)
    found = compile_cache.found(trainer.compile_baseline["cache"])
    return {"compiler": "XLA (jit_compile)", "compiled": bool(must) and hlo > 0,
            "traces": len(traced), "xla_traces": len(must), "hlo_instructions": hlo,
            "cache": {**found, "hits": found["entries_read"], "misses": found["entries_saved"],
                      "compile_s": None,
                      "how": "XLA's persistent cache: programs saved (compiled afresh) and "
                             "programs read, from the cache folder's files"}}


def _keras_convention(momentum):
    """PyTorch's BatchNorm momentum (the batch statistic's share) as Keras takes it (the old
    statistic's share); a list where the network's layers differ."""
    return [1.0 - m for m in momentum] if isinstance(momentum, list) else 1.0 - momentum
