"""`cnncompare env`: the machine, and what each framework sees (each asked in its own process)."""

from __future__ import annotations

import os
import platform
from typing import Any

from compare import runner


def nvml_devices() -> dict[str, Any]:
    """GPUs and driver as NVML reports them; an error entry where there is no NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - ImportError or NVMLError: no driver
        return {"available": False, "reason": f"NVML unavailable ({exc.__class__.__name__}: {exc})"}
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            devices.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                            "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(handle).total,
                            "power_limit_w":
                                pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0})
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040 for CUDA 12.4
        return {"available": True,
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
                "devices": devices}
    finally:
        pynvml.nvmlShutdown()


def machine() -> dict[str, Any]:
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "memory_bytes": memory, "nvml": nvml_devices()}


def collect() -> dict[str, Any]:
    return {"machine": machine(),
            "frameworks": {fw: runner.framework_environment(fw) for fw in ("tf", "torch")}}


def print_table(info: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console()
    m = info["machine"]
    table = Table(title="machine", show_header=False)
    for key in ("python", "platform", "processor", "cpu_count"):
        table.add_row(key, str(m[key]))
    table.add_row("memory", f"{m['memory_bytes'] / 2**30:.1f} GiB" if m["memory_bytes"] else "?")
    nvml = m["nvml"]
    if nvml["available"]:
        table.add_row("driver", nvml["driver"])
        for d in nvml["devices"]:
            table.add_row(f"gpu {d['index']}", f"{d['name']}, {d['memory_bytes'] / 2**30:.0f} GiB")
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


def _gpus(info: dict[str, Any]) -> str:
    gpus = info.get("gpus") or []
    return ", ".join(g["name"] for g in gpus) if gpus else "none"
