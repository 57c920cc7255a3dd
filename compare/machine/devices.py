"""The devices a run trains on: the kind a framework's environment shows, the NVIDIA GPUs
NVML sees, and how the device and the machine are described and labelled in results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compare.machine import gpu_metrics
from compare.machine.cpu import cpu_description


def device_kind(environment: dict, requested: str) -> tuple[str, str]:
    """(kind, what the framework sees) for a --device request, from its --env description."""
    if "error" in environment:
        return "unknown", environment["error"]
    gpus = [g.get("name") or "GPU" for g in environment.get("gpus") or []]
    seen = ", ".join(gpus) if gpus else "no GPU"
    if requested == "cpu":
        return "cpu", seen
    return ("gpu" if gpus else "cpu"), seen


def nvidia_gpus() -> int:
    """The NVIDIA GPUs the driver shows (NVML) and CUDA_VISIBLE_DEVICES leaves visible; 0
    without a driver or the library."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver
        return 0
    try:
        return gpu_metrics.visible_gpu_count(pynvml)
    except Exception:  # noqa: BLE001
        return 0
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def description(gpu_name: str | None, count: int, requested: str, units: str,
                where: str = "", shared: bool = False) -> str:
    """What the user is told of where a process trains: "GPU: <name>, <name>" for `count`
    GPUs, "GPU: <name> shared by <count> devices" for devices carved from one (`shared`), or
    "CPU (why), <count> <units>" (units: the framework's word for its CPU replicas); `where`
    adds the processes' layout over machines."""
    if gpu_name is not None and shared:
        return f"GPU: {gpu_name} shared by {count} devices{where}"
    if gpu_name is not None:
        return f"GPU: {', '.join([gpu_name] * count)}{where}"
    why = "no GPU found" if requested == "auto" else "--device cpu"
    return f"CPU ({why}), {count} {units}{where}"


def hardware(kind: str, model: str | None, replicas: int, nodes: int,
             shared_chip: bool = False) -> dict:
    """The machine a run trained on, recorded the same way by both frameworks: the device
    kind, model and count (every replica over every process and machine) and the machines.
    `label` is what reports group runs by (with the host platform): on a GPU the model and
    count, e.g. "GPU: 8x NVIDIA H100 80GB HBM3"; on a CPU only "CPU" (the logical devices or
    processes a CPU run is split into are a setting, not the machine). `named` is what a
    reader is told: the label, on a CPU with its model, cores and instructions. The machines are
    recorded, not labelled: the launchers count them differently (torchrun its node groups,
    TF_CONFIG its hosts). `shared_chip`: the devices are carved from one chip (--share-device;
    a CPU's logical devices or processes), recorded so that no reader takes their time for a
    multi-device speed-up; on a GPU the label says so, and such runs group apart."""
    if kind != "gpu":
        label = "CPU"
    elif shared_chip and replicas > 1:
        label = f"GPU: {model} shared by {replicas} devices"
    else:
        label = f"GPU: {replicas}x {model}" if replicas > 1 else f"GPU: {model}"
    return {"device_kind": kind, "device_model": model, "device_count": replicas,
            "shared_chip": shared_chip, "nodes": nodes, "label": label,
            "named": label if kind == "gpu" else f"CPU: {cpu_description()}"}


def label_of(environment: Mapping[str, Any] | None) -> str | None:
    """A result environment's hardware label (see `hardware`); for results written before it
    was recorded, derived from the framework's own words in `device_used`."""
    environment = environment or {}
    if (environment.get("hardware") or {}).get("label"):
        return environment["hardware"]["label"]
    used = environment.get("device_used")
    if not used:
        return None
    if not used.startswith("GPU"):
        return "CPU"
    names = used[len("GPU: "):].split(", worker")[0].split(" on ")[0].split(", ")
    return f"GPU: {len(names)}x {names[0]}" if len(names) > 1 else f"GPU: {names[0]}"
