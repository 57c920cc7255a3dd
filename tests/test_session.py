"""The test session itself: non-gpu tests see no GPU in any process they start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import hides_gpus, patience

from compare.machine import gpu_metrics

REPO = Path(__file__).resolve().parents[1]

# A driver with two boards, as NVML would show it on a two-GPU host (nvidia-ml-py's module
# name), put first on the child's path.
FAKE_NVML = textwrap.dedent("""\
    class NVMLError(Exception):
        pass
    def nvmlInit(): pass
    def nvmlShutdown(): pass
    def nvmlDeviceGetCount(): return 2
    def nvmlDeviceGetHandleByIndex(i): return i
    def nvmlDeviceGetCudaComputeCapability(handle): return (9, 0)
    """)

# What a process this test starts sees: the tool's count of GPUs and the precision
# `--precision auto` would choose from it before any framework starts, and, asked for, CUDA's
# devices in PyTorch and in TensorFlow (imported after torch, as the tests import them).
PROBE = textwrap.dedent("""\
    import json, os, sys
    from compare.machine import devices
    from compare.machine import precision_choice
    seen = {"env": os.environ.get("CUDA_VISIBLE_DEVICES"), "tool": devices.nvidia_gpus(),
            "auto": precision_choice.expected("auto", "auto", "lenet").precision}
    if sys.argv[1:] == ["frameworks"]:
        import torch
        import tensorflow as tf
        seen.update(torch=torch.cuda.device_count(),
                    tensorflow=len(tf.config.list_physical_devices("GPU")))
    print(json.dumps(seen))
    """)


def _child(tmp_path: Path, env: dict, *asked: str) -> dict:
    (tmp_path / "pynvml.py").write_text(FAKE_NVML)
    done = subprocess.run([sys.executable, "-c", PROBE, *asked], cwd=REPO, capture_output=True,
                          text=True, timeout=patience(300),
                          env={**env, "PYTHONPATH": f"{tmp_path}:{REPO}"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_non_gpu_tests_subprocess_sees_no_gpu_where_its_parent_would(tmp_path):
    seen = _child(tmp_path, dict(os.environ))
    assert seen == {"env": "", "tool": 0, "auto": "fp32"}
    # the same child outside the mechanism, on this (faked) two-GPU host: the tool counts
    # both boards and would choose float16 for a GPU with tensor cores (the frameworks' own
    # counts, which would look for a real driver, are the next test's question alone)
    unhidden = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    seen = _child(tmp_path, unhidden)
    assert (seen["env"], seen["tool"], seen["auto"]) == (None, 2, "mixed")


@pytest.mark.slow  # a process that imports both frameworks (7-14 s under pytest -n 2)
def test_a_non_gpu_tests_subprocess_sees_no_cuda_device_in_either_framework(tmp_path):
    """PyTorch and TensorFlow in a process a non-gpu test starts count no CUDA device (on a
    GPU host, where they would count its GPUs), beside the tool's count of none."""
    seen = _child(tmp_path, dict(os.environ), "frameworks")
    assert seen == {"env": "", "torch": 0, "tensorflow": 0, "tool": 0, "auto": "fp32"}


def test_gpu_tests_keep_the_gpus(request):
    class GpuTest:
        def get_closest_marker(self, name):
            return pytest.mark.gpu.mark if name == "gpu" else None
    assert hides_gpus(request.node) and not hides_gpus(GpuTest())


@pytest.mark.parametrize("listed, visible", [
    (None, None), ("", 0), ("-1", 0), ("0", 1), ("0,1", 2), ("1,-1,0", 1),
    ("GPU-8a1c2f,GPU-77b0", 2)])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(monkeypatch, listed, visible):
    if listed is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert gpu_metrics.cuda_visible_limit() == visible
