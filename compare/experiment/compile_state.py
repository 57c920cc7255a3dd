"""Each framework's compile state, and whether it is that framework's own default.

A framework's default is part of fairness: Keras' `Model.compile` defaults to
`jit_compile="auto"`, which Keras resolves to XLA where a GPU is visible, the model is not
under a distribution strategy, op determinism is off and every layer supports XLA
(`Trainer._resolve_auto_jit_compile` and `model_supports_jit` in
keras/src/trainers/trainer.py); PyTorch runs eagerly unless `torch.compile` is called. So
on a GPU the matched runs (both eager unless `--compile`) hold TensorFlow/Keras below its
own default, and `compare` also trains each framework at its own defaults there
(compare.process.comparison). This module states the rule for planning and words; each
framework's process asks its framework for the same answer on the built model
(tf_impl/manifest.py, torch_impl/manifest.py) and the run records that answer
(compare.run.fairness); tests/test_compile_state.py holds the two to agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compare.experiment import strategy
from compare.experiment.config import FRAMEWORK_NAMES, RunConfig, data_replicas

COMPILERS = {"tf": "XLA", "torch": "torch.compile"}
DEFAULT_NAMES = {"tf": "Keras", "torch": "PyTorch"}  # who sets the default, in the words


@dataclass(frozen=True)
class Default:
    """A framework's own compile default for one run, and the rule that gave it."""

    compiled: bool
    rule: str  # why, in the framework's terms


def framework_default(framework: str, device_kind: str, wrapped: bool, deterministic: bool,
                      layers_support_jit: bool = True) -> Default:
    """What `framework` compiles with when its user leaves the compiler at its default, on
    `device_kind` ("gpu" or "cpu"), under a distribution wrapper or not, with op determinism
    on or off, for a model whose layers all support XLA or not (Keras' rule, read above)."""
    if framework == "torch":
        return Default(False, "PyTorch runs eagerly; torch.compile is opt-in")
    if device_kind != "gpu":
        return Default(False, "Keras' jit_compile=\"auto\" leaves XLA off where no GPU is "
                              "visible")
    if wrapped:
        return Default(False, "Keras' jit_compile=\"auto\" leaves XLA off under a "
                              "tf.distribute strategy")
    if deterministic:
        return Default(False, "Keras' jit_compile=\"auto\" leaves XLA off with op "
                              "determinism enabled")
    if not layers_support_jit:
        return Default(False, "Keras' jit_compile=\"auto\" leaves XLA off for a model with a "
                              "layer XLA cannot compile")
    return Default(True, "Keras' jit_compile=\"auto\" compiles with XLA on a GPU without a "
                         "distribution strategy")


def run_compiles(config: RunConfig) -> bool:
    """Whether the run compiles its training step: --compile, or PyTorch's --cuda-graphs
    (torch.compile in reduce-overhead mode); TensorFlow ignores --cuda-graphs."""
    return config.compile or (config.framework == "torch" and config.cuda_graphs)


@dataclass(frozen=True)
class CompileState:
    """One framework's compile state in a run: what it compiled with, what its framework
    would have by default there, and why."""

    framework: str
    compiled: bool
    default: bool
    rule: str  # Default.rule
    device_kind: str

    @property
    def is_default(self) -> bool:
        return self.compiled == self.default

    @property
    def below_default(self) -> bool:
        """Eager where the framework itself would compile."""
        return self.default and not self.compiled

    def how(self) -> str:
        """'without XLA', 'with XLA', 'eager' or 'with torch.compile'."""
        compiler = COMPILERS[self.framework]
        if self.framework == "torch":
            return f"with {compiler}" if self.compiled else "eager"
        return f"{'with' if self.compiled else 'without'} {compiler}"

    def state_words(self) -> str:
        """'TensorFlow/Keras without XLA', 'PyTorch eager', ..."""
        return f"{FRAMEWORK_NAMES[self.framework]} {self.how()}"

    def default_words(self) -> str:
        """Whether the state is the framework's default on this device, as a clause:
        ", which Keras uses by default on this GPU" after 'without XLA'."""
        who, device = DEFAULT_NAMES[self.framework], self.device_kind.upper()
        if self.framework == "torch":
            return ", its default" if self.is_default else ", above its default (eager)"
        if self.is_default:
            return f", {who}' default on this {device}"
        if self.below_default:
            return f", which {who} uses by default on this {device}"
        return f", which {who} does not use by default on this {device}"

    def phrase(self) -> str:
        """The state and whether it is the framework's default on this device, e.g.
        'TensorFlow/Keras without XLA, which Keras uses by default on this GPU'."""
        return self.state_words() + self.default_words()

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "compiled": self.compiled, "default": self.default,
                "is_default": self.is_default, "rule": self.rule,
                "device_kind": self.device_kind, "words": self.phrase()}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> CompileState:
        return cls(record["framework"], bool(record["compiled"]), bool(record["default"]),
                   record["rule"], record["device_kind"])


def resolve(config: RunConfig, device_kind: str, replicas: int | None = None,
            processes: int = 1, framework_says: bool | None = None) -> CompileState:
    """The compile state of a run of `config` on `device_kind`: its default by the rule above,
    or, where the framework's process asked its framework (`framework_says`), that answer,
    the rule's words kept when they agree."""
    wrapped = config.parallel == "data" and strategy.resolve(
        config.strategy, config.framework,
        data_replicas(config) if replicas is None else replicas, processes).wrapped
    default = framework_default(config.framework, device_kind, wrapped, config.deterministic)
    if framework_says is not None and framework_says != default.compiled:
        default = Default(framework_says, f"{DEFAULT_NAMES[config.framework]}'s own resolution "
                                          f"for this model on this device")
    return CompileState(config.framework, run_compiles(config), default.compiled, default.rule,
                        device_kind)


def at_default(config: RunConfig, device_kind: str) -> RunConfig | None:
    """`config` with the framework's compile state set to its own default on `device_kind`,
    marked as a defaults run; None when the config already runs at it (the matched run is
    then that framework's defaults run too), or cannot: --parallel model's stages run
    uncompiled in both frameworks (compare.run.validate.check_parallel)."""
    state = resolve(config, device_kind)
    if state.is_default or config.parallel == "model":
        return None
    at = config.replace(variant="defaults", compile=state.default)
    return at.replace(cuda_graphs=False) if config.framework == "torch" else at
