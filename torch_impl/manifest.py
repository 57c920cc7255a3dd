"""PyTorch's half of the fairness manifest (compare.run.fairness builds the rest): what a
Trainer computes in and how, in words a reader can set beside TensorFlow's."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from compare.experiment import networks, specs
from compare.run import compile_cache
from torch_impl import data as torch_data
from torch_impl.device import FRAMEWORK
from torch_impl.optimizer import _optimizer_kind


def describe(trainer) -> dict:
    """PyTorch's half of the fairness manifest (compare.run.fairness builds the rest)."""
    scaling = None
    if trainer.scaler.is_enabled():
        scaling = (f"dynamic (torch.amp.GradScaler): initial "  # the run's, not the scale now
                   f"{trainer.config.loss_scale_initial:g}, "
                   f"x{trainer.scaler.get_growth_factor():g} after "
                   f"{trainer.scaler.get_growth_interval()} finite steps, "
                   f"x{trainer.scaler.get_backoff_factor():g} on overflow")
    backend = dist.get_backend() if dist.is_initialized() else None
    return {
        "precision_policy": trainer.numerics["policy"],
        "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                 "cudnn": torch.backends.cudnn.allow_tf32},
        "cudnn_autotune": torch.backends.cudnn.benchmark,
        "loss_scaling": scaling,
        "bn_momentum_as_set": networks.batchnorm_settings(
            trainer.spec, trainer.config.bn_momentum, trainer.config.bn_epsilon)["momentum"],
        "bn_running_variance": "unbiased (n/(n-1)) batch variance",
        "optimizer_implementation": _optimizer_kind(trainer.optimizer),
        "distribution": (f"DistributedDataParallel ({backend})" if backend
                         else "single process, no DDP") + (
            "; one replica, its stages on " + ", ".join(trainer.placement)
            + (" (a CPU: the stages share the one device)" if not trainer.choice.on_gpu
               else " (activations copied between stages, non_blocking)")
            if trainer.placement else "") + (
            " (the processes or stages share one GPU: --share-device)"
            if trainer.choice.shared_chip and trainer.choice.on_gpu else ""),
        "strategy": trainer.wrapper.to_dict(FRAMEWORK),
        "precision": trainer.numerics["resolved"].to_dict(trainer.config.precision),
        "step_batching": (f"{trainer.steps_per_call} step(s) per trainer call, each launched "
                          "from Python; " + (
                              "forward and backward replayed as CUDA graphs (torch.compile "
                              "mode reduce-overhead), loss, optimizer and scaler eager"
                              if trainer.config.cuda_graphs else "no CUDA graphs")),
        "input_wait": "host clock (time.perf_counter) around next() on the loader",
        "compile": ("torch.compile, mode reduce-overhead (CUDA graphs)"
                    if trainer.config.cuda_graphs else
                    "torch.compile" if trainer.config.compile else "off"),
        "compile_default": framework_default_compile(trainer),
        "channels_last": trainer.memory_format == torch.channels_last,
        "pipeline": torch_data.pipeline_settings(trainer.config, trainer.choice),
        "placement": trainer.placement,  # each stage's device (None: one piece)
        "weights_on": weights_on(trainer),
        "default_init": "PyTorch default initialisers",
        # What PyTorch itself does differently; no setting changes it.
        "loss_scale_check": (
            ("GradScaler with the fused SGD: the inf check and the skipped step stay on "
             "the device, no host wait per step" if "fused" in _optimizer_kind(trainer.optimizer)
             else "GradScaler: the inf check is read on the host before each step")
            if trainer.scaler.is_enabled() else None),
        "batchnorm_kernel": (
            "torch batch_norm (cuDNN on a GPU, one fused kernel)" + (
                f", on {str(trainer.numerics['autocast_dtype']).replace('torch.', '')} "
                "activations under autocast with float32 statistics"
                if trainer.numerics["autocast_dtype"] is not None else "")
            if specs.has_batchnorm(trainer.spec) else None),
    }


def weights_on(trainer) -> list[str]:
    """Where the model's parameters live, read from PyTorch (not the config): for each stage
    of a split model, or this process's replica, the devices holding its weights, as
    "cuda:0"."""
    stages = trainer.model.body if trainer.placement else [trainer.model]
    return [", ".join(sorted({str(p.device) for p in stage.parameters()})) for stage in stages]


def framework_default_compile(trainer) -> bool:
    """Whether PyTorch compiles this model by default here: never, it runs eagerly until
    torch.compile is called (Keras' twin asks Keras, whose "auto" can choose XLA)."""
    return False


def compile_cache_environment(directory: Path, gpu: bool) -> dict[str, str]:
    """Where PyTorch keeps what it compiled across processes, all in `directory`: inductor's
    caches (its FX graph cache and AOTAutograd's), Triton's kernels and autotuning, and the
    CUDA driver's PTX cache; each read where it is first used (the same on a CPU: `gpu` is
    TensorFlow's concern)."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(directory / "inductor"),
            "TRITON_CACHE_DIR": str(directory / "triton"),
            "CUDA_CACHE_PATH": str(directory / "cuda")}


def _cache_folder() -> Path | None:
    """The folder inductor caches in for this process (its variable)."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return Path(folder) if folder else None


def _counts() -> dict[str, float]:
    """torch._dynamo's process-wide counters now (graphs captured, graph breaks, frames
    compiled; inductor's FX graphs and AOTAutograd's graphs found in or missing from their
    caches) and the seconds dynamo spent compiling."""
    from torch._dynamo.utils import calculate_time_spent, counters
    return {"graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "frames": counters["frames"]["ok"],
            "fx_graph_hits": counters["inductor"]["fxgraph_cache_hit"],
            "fx_graph_misses": counters["inductor"]["fxgraph_cache_miss"],
            "aot_autograd_hits": counters["aot_autograd"]["autograd_cache_hit"],
            "aot_autograd_misses": counters["aot_autograd"]["autograd_cache_miss"],
            "compile_s": calculate_time_spent().get("total_wall_time", 0.0)}


def compile_baseline() -> dict:
    """The counters now, and inductor's cache folder as the Trainer finds it: what
    `compiled` subtracts and compares with."""
    return {"counts": _counts(), "cache": compile_cache.entries(_cache_folder())}


def compiled(trainer) -> dict:
    """What compiled of the training step so far, read from the compiler (not the config):
    dynamo's captured graphs, graph breaks and compiled frames (a frame compiled again is a
    recompile) since the Trainer was built (dynamo counts per process: a second Trainer
    compiling in the same process, Keras-free own loop included, counts here too), and what
    inductor found in its caches, with the seconds dynamo spent compiling."""
    now, before = _counts(), trainer.compile_baseline["counts"]
    found = {key: now[key] - before[key] for key in now}
    return {"compiler": "torch.compile (dynamo + inductor)", "compiled": found["graphs"] > 0,
            **{key: int(found[key]) for key in ("graphs", "graph_breaks", "frames")},
            "cache": {**compile_cache.found(trainer.compile_baseline["cache"]),
                      "hits": int(found["fx_graph_hits"]),
                      "misses": int(found["fx_graph_misses"]),
                      "aot_autograd_hits": int(found["aot_autograd_hits"]),
                      "aot_autograd_misses": int(found["aot_autograd_misses"]),
                      "compile_s": round(found["compile_s"], 3),
                      "how": "torch._dynamo's counters: inductor's FX graph cache hits and "
                             "misses, AOTAutograd's, and dynamo's compile seconds"}}
