"""`cnncompare doctor`'s questions to one framework's process (compare.process.doctor asks
them of each): a few real steps of the chosen model in float32 and in mixed precision, timed,
and which CUDA, cuBLAS and cuDNN libraries the process actually loaded; and why a framework
sees no GPU on a machine that has one.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from compare.experiment import datasets
from compare.experiment.config import RunConfig
from compare.machine import precision_choice
from compare.schema import FrameworkEnvironment, Machine

if TYPE_CHECKING:  # annotations only
    from types import ModuleType

TIMED_STEPS = 3  # steps timed after one warm-up step (tracing, autotuning)
LIBRARY = re.compile(r"/(lib(?:cudart|cublas|cublasLt|cudnn|nccl|cufft|cusparse)"
                     r"[^/]*\.so[.0-9]*)$")


class PrecisionSteps(TypedDict):
    """A few real steps in one precision: whether their losses were finite, and their time."""

    ok: bool
    step_ms: NotRequired[float]  # ms per step, after one warm-up step
    losses: NotRequired[list[float]]
    policy: NotRequired[str]  # the framework's precision policy, in its words
    error: NotRequired[str]


class DoctorSteps(TypedDict):
    """One framework process's answer to the doctor (its --doctor file)."""

    framework: str
    device: str
    device_kind: str
    device_name: str | None
    model: str
    batch_size: int
    precisions: dict[str, PrecisionSteps]  # fp32, mixed
    libraries: NotRequired[dict[str, str]]  # CUDA libraries loaded: file name -> path
    error: NotRequired[str]  # the process gave no answer: why (no precisions then)


def loaded_cuda_libraries() -> dict[str, str]:
    """The CUDA libraries this process has loaded: file name -> path (Linux /proc/self/maps)."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                match = LIBRARY.search(line.strip())
                if match:
                    found.setdefault(match.group(1), line.split()[-1])
    except OSError:
        pass
    return dict(sorted(found.items()))


def find_library(name: str) -> str | None:
    """Where a CUDA library would come from: the system loader's path, or an NVIDIA pip
    wheel's lib/ folder (where tensorflow[and-cuda] and PyTorch's wheels put them); None."""
    import ctypes
    import sys
    try:
        ctypes.CDLL(name)
        return f"{name} (system loader)"
    except OSError:
        pass
    for entry in sys.path:
        for candidate in sorted(Path(entry).glob(f"nvidia/*/lib/{name}")):
            return str(candidate)
    return None


def train_steps(impl: ModuleType, config: RunConfig) -> DoctorSteps:
    """In a framework process: a few real steps per precision on this config's device; the
    loaded CUDA libraries. Called by compare.run.worker for `--doctor`."""
    choice = impl.select_device(config)
    batch = config.batch_size
    dataset = datasets.synthetic(batch * (TIMED_STEPS + 1), batch)
    record: DoctorSteps = {"framework": impl.FRAMEWORK, "device": choice.description,
                           "device_kind": choice.kind, "device_name": choice.name,
                           "model": config.model, "batch_size": batch, "precisions": {}}
    for mode in ("fp32", "mixed"):
        # each precision in turn: its config is made here, so it is resolved here, once
        run_config = precision_choice.carry(config.replace(precision=mode))
        try:
            trainer = impl.Trainer(run_config, dataset, choice)
            batches = trainer.batches(0)
            trainer.losses([trainer.train_step(next(batches), config.lr)])  # warm-up
            trainer.sync()
            start = time.perf_counter()
            pending = [trainer.train_step(next(batches), config.lr) for _ in range(TIMED_STEPS)]
            trainer.sync()
            step_ms = 1000.0 * (time.perf_counter() - start) / TIMED_STEPS
            losses = trainer.losses(pending)
            record["precisions"][mode] = {
                "ok": all(math.isfinite(v) for v in losses), "step_ms": step_ms,
                "losses": losses, "policy": trainer.manifest()["precision_policy"]}
            trainer.close()
        except Exception as exc:  # noqa: BLE001 - the doctor reports every failure
            record["precisions"][mode] = {"ok": False,
                                          "error": f"{exc.__class__.__name__}: {exc}"}
    record["libraries"] = loaded_cuda_libraries()
    return record


def gpu_diagnosis(framework_env: FrameworkEnvironment, machine: Machine) -> str | None:
    """Why a framework sees no GPU on this machine (None when it sees one, or none exists)."""
    if framework_env.get("gpus"):
        return None
    nvml = machine["nvml"]
    if not nvml["available"]:
        return None  # no NVIDIA driver: a CPU machine, nothing to explain
    if framework_env.get("cuda") in (None, "", "False"):
        return "this build has no CUDA support (a CPU-only build)"
    visible = framework_env.get("cuda_visible_devices")
    if visible is not None:
        return (f"CUDA_VISIBLE_DEVICES={visible!r} hides the GPUs from it: unset it, or name "
                f"a GPU that exists (nvidia-smi -L lists them)")
    missing = [lib for lib, where in (framework_env.get("gpu_libraries") or {}).items()
               if where is None]
    if missing:
        return (f"CUDA libraries not installed: {', '.join(missing)} not found "
                f"(pip install -e '.[gpu]' installs tensorflow[and-cuda])")
    driver = nvml.get("cuda_driver_version")
    built = framework_env.get("cuda")
    if driver and built and _major(built) > _major(driver):
        return (f"the NVIDIA driver is too old: it supports CUDA {driver}, this build needs "
                f"CUDA {built}")
    return "unknown: the GPU is there and the libraries load; run with --debug for its log"


def _major(version: str) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0
