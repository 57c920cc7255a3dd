"""`cnncompare env`'s view of the machine: NVML's GPUs and driver, the host; and the table that
shows it beside what each framework sees (asked in its own process by compare.cli.env)."""

from __future__ import annotations

import os
import platform
from typing import Any, Callable, TypedDict

from compare.machine import gpu_metrics
from compare.schema import FrameworkEnvironment, GpuDevice, Machine, Nvml


def nvml_devices() -> Nvml:
    """GPUs and driver as NVML reports them; an error entry where there is no NVML. Each
    field is asked on its own: one the device refuses (as virtual machines often do) is
    null, with the reason under `unavailable`."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - ImportError or NVMLError: no driver
        return {"available": False, "reason": f"NVML unavailable ({exc.__class__.__name__}: {exc})"}
    unavailable: dict[str, str] = {}

    def ask(field: str, query: Callable[[], Any]) -> Any:
        try:
            value = query()
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and its kin
            unavailable[field] = gpu_metrics.nvml_reason(exc)
            return None
        return value.decode() if isinstance(value, bytes) else value

    try:
        devices: list[GpuDevice] = []
        for i in range(ask("count", pynvml.nvmlDeviceGetCount) or 0):
            handle = ask(f"gpu {i}", lambda: pynvml.nvmlDeviceGetHandleByIndex(i))
            if handle is None:
                continue
            memory = ask(f"gpu {i} memory", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            limit = ask(f"gpu {i} power limit",
                        lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle))
            devices.append({"index": i, "name": ask(f"gpu {i} name",
                                                    lambda: pynvml.nvmlDeviceGetName(handle)),
                            "memory_bytes": memory,
                            "power_limit_w": limit / 1000.0 if limit is not None else None})
        cuda = ask("cuda driver version", pynvml.nvmlSystemGetCudaDriverVersion)  # 12040: 12.4
        found: Nvml = {"available": True,
                       "driver": ask("driver", pynvml.nvmlSystemGetDriverVersion),
                       "cuda_driver_version": (f"{cuda // 1000}.{cuda % 1000 // 10}"
                                               if cuda is not None else None),
                       "devices": devices}
        if unavailable:
            found["unavailable"] = unavailable
        return found
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - nothing left to release
            pass


def machine() -> Machine:
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "memory_bytes": memory, "nvml": nvml_devices()}


class EnvReport(TypedDict):
    """`cnncompare env`: the machine, and what each framework's process sees."""

    machine: Machine
    frameworks: dict[str, FrameworkEnvironment]


def print_table(info: EnvReport) -> None:
    from rich.table import Table

    from compare.console import console as make_console
    console = make_console()
    m = info["machine"]
    table = Table(title="machine", show_header=False)
    for key in ("python", "platform", "processor", "cpu_count"):
        table.add_row(key, str(m[key]))
    table.add_row("memory", f"{m['memory_bytes'] / 2**30:.1f} GiB" if m["memory_bytes"] else "?")
    nvml = m["nvml"]
    if nvml["available"]:
        table.add_row("driver", str(nvml["driver"]))
        for d in nvml["devices"]:
            memory = (f", {d['memory_bytes'] / 2**30:.0f} GiB" if d["memory_bytes"] is not None
                      else "")
            table.add_row(f"gpu {d['index']}", f"{d['name']}{memory}")
        for field, why in (nvml.get("unavailable") or {}).items():
            table.add_row(f"{field} (NVML)", f"not given: {why}")
    else:
        table.add_row("gpus (NVML)", nvml["reason"])
    console.print(table)
    fw = Table(title="frameworks")
    fw.add_column("")
    fw.add_column("TensorFlow/Keras")
    fw.add_column("PyTorch")
    tf, torch = info["frameworks"]["tf"], info["frameworks"]["torch"]
    rows = [("version", f"tf {tf.get('tensorflow')} / keras {tf.get('keras')}",
             f"torch {torch.get('torch')} / torchvision {torch.get('torchvision')}"),
            ("GPUs", _gpus(tf), _gpus(torch)),
            ("CUDA / cuDNN", f"{tf.get('cuda')} / {tf.get('cudnn')}",
             f"{torch.get('cuda')} / {torch.get('cudnn')}"),
            ("TF32 by default", str(tf.get("tf32_default")), str(torch.get("tf32_default"))),
            ("mixed precision", str(tf.get("mixed_precision")), str(torch.get("mixed_precision")))]
    for key, a, b in rows:
        fw.add_row(key, tf.get("error", a) if "error" in tf else a,
                   torch.get("error", b) if "error" in torch else b)
    console.print(fw)


def _gpus(info: FrameworkEnvironment) -> str:
    gpus = info.get("gpus") or []
    return ", ".join(str(g["name"]) for g in gpus) if gpus else "none"
