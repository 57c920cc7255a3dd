"""Each framework at its own best (`compare --best`): the fast settings each framework's own
performance guide recommends for the device, declared once with their sources. The matched
runs keep one setting for both; these runs let each side take its own advice, so the report
can give both ratios: matched, and best against best.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from compare.experiment.config import PipelineConfig, RunConfig
from compare.experiment.frameworks import FRAMEWORKS


@dataclass(frozen=True)
class Advice:
    """One recommended setting: a RunConfig field, its value, and where the advice is."""

    setting: str  # a RunConfig field, as --flag without the dashes and with underscores
    value: Any
    source: str  # the framework's own guide, with its address


_XLA = Advice("compile", True, "XLA: Keras' Model.compile defaults to jit_compile=\"auto\", "
              "which compiles with XLA where the model allows "
              "(keras.io/api/models/model_training_apis)")
_TF_AMP = Advice("precision", "mixed", "mixed_float16 on GPUs of compute capability 7.0 or "
                 "newer (tensorflow.org/guide/mixed_precision)")
_TF_TF32 = Advice("tf32", True, "TensorFloat-32 is TensorFlow's default on Ampere and newer "
                  "(tf.config.experimental.enable_tensor_float_32_execution)")
_TF_DATA = Advice("pipeline", "tuned", "parallel map and prefetch "
                  "(tensorflow.org/guide/data_performance)")
_TORCH_COMPILE = Advice("compile", True, "fuse operations with torch.compile (PyTorch "
                        "Performance Tuning Guide, pytorch.org/tutorials/recipes/recipes/"
                        "tuning_guide.html)")
_CHANNELS_LAST = Advice("channels_last", True, "channels_last memory format for computer "
                        "vision models (PyTorch Performance Tuning Guide)")
_AUTOTUNE = Advice("cudnn_benchmark", True, "enable the cuDNN auto-tuner (PyTorch "
                   "Performance Tuning Guide)")
_TORCH_AMP = Advice("precision", "mixed", "mixed precision and AMP (PyTorch Performance "
                    "Tuning Guide)")
_TORCH_TF32 = Advice("tf32", True, "TensorFloat-32 on Ampere and newer (pytorch.org/docs/"
                     "stable/notes/cuda.html, TensorFloat-32)")
_LOADER = Advice("pipeline", "tuned", "asynchronous data loading: DataLoader workers and "
                 "pinned memory (PyTorch Performance Tuning Guide)")

# (framework, device kind) -> the advice it takes. On a CPU both keep --precision auto
# (float32), as the matched runs do: bfloat16 speeds one framework up and slows the other.
BEST: dict[tuple[str, str], tuple[Advice, ...]] = {
    ("tf", "gpu"): (_XLA, _TF_AMP, _TF_TF32, _TF_DATA),
    ("tf", "cpu"): (_XLA, _TF_DATA),
    ("torch", "gpu"): (_TORCH_COMPILE, _CHANNELS_LAST, _AUTOTUNE, _TORCH_AMP, _TORCH_TF32,
                       _LOADER),
    ("torch", "cpu"): (_TORCH_COMPILE, _CHANNELS_LAST, _LOADER),
}


def best_config(config: RunConfig, framework: str, device_kind: str) -> RunConfig:
    """`config` with `framework`'s advice for `device_kind` taken, marked as a best run."""
    changes: dict[str, Any] = {"variant": "best"}
    for advice in BEST[(framework, device_kind)]:
        if advice.setting == "pipeline":
            if config.pipeline.kind != advice.value:  # a user's tuned settings stay
                changes["pipeline"] = PipelineConfig.preset(advice.value)
        else:
            changes[advice.setting] = advice.value
    return config.replace(framework=framework, **changes)


def advice_rows(device_kind: str) -> list[dict[str, str]]:
    """What each framework's best runs changed, and why: framework, setting, value, source."""
    return [{"framework": framework, "setting": a.setting, "value": str(a.value),
             "source": a.source}
            for framework in FRAMEWORKS for a in BEST[(framework, device_kind)]]


@dataclass(frozen=True)
class EpochTimes:
    """One mode's training epochs in an untimed trial at the comparison's cache state: the
    first (compiling, capturing graphs) and a steady one after it, in seconds."""

    first_s: float
    steady_s: float

    def run_s(self, epochs: int) -> float:
        """A run of `epochs` at these rates."""
        return self.first_s + (epochs - 1) * self.steady_s


@dataclass(frozen=True)
class GraphsRule:
    """Whether PyTorch's best runs replay CUDA graphs: they do where the graphs' run of the
    comparison's own length, its first epoch included, is the shorter; measured, not
    extrapolated from another cache state or another run's epochs."""

    epochs: int
    without: EpochTimes  # torch.compile alone
    with_graphs: EpochTimes  # torch.compile in reduce-overhead mode (CUDA graphs)
    cache_state: str  # the comparison's --compile-cache, which both trials ran at

    @property
    def pays(self) -> bool:
        return self.with_graphs.run_s(self.epochs) < self.without.run_s(self.epochs)

    @property
    def break_even_epochs(self) -> float | None:
        """The run length at which the graphs' costlier first epoch is repaid (None: their
        steady epochs are no faster, so never)."""
        saved = self.without.steady_s - self.with_graphs.steady_s
        if saved <= 0:
            return None
        return 1 + max(0.0, self.with_graphs.first_s - self.without.first_s) / saved

    def words(self) -> str:
        """The decision and the figures that made it."""
        even = self.break_even_epochs
        return (f"CUDA graphs {'on' if self.pays else 'off'} in PyTorch's best runs: "
                f"{self.epochs} epochs at {self.with_graphs.run_s(self.epochs):.1f} s with them "
                f"against {self.without.run_s(self.epochs):.1f} s without (first epoch "
                f"{self.with_graphs.first_s:.1f} s against {self.without.first_s:.1f} s, then "
                f"{self.with_graphs.steady_s:.2f} s against {self.without.steady_s:.2f} s an "
                f"epoch; compile caches {self.cache_state}; "
                + ("never repaid" if even is None else f"repaid from {even:.1f} epochs") + ")")

    def to_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "cache_state": self.cache_state, "pays": self.pays,
                "without": dataclasses.asdict(self.without),
                "with_graphs": dataclasses.asdict(self.with_graphs),
                "break_even_epochs": self.break_even_epochs, "words": self.words()}
