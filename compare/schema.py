"""The result contract both trainers write, its validation, and atomic file writes."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

SCHEMA_VERSION = 1
STATUSES = ("running", "completed", "interrupted", "diverged", "failed")

EPOCH_KEYS = ("epoch", "train_loss", "test_loss", "test_accuracy", "train_time_s",
              "eval_time_s", "images_per_s")
SUMMARY_KEYS = ("final_test_accuracy", "best_test_accuracy", "train_time_s", "warmup_time_s",
                "steady_step_time_ms", "images_per_s", "input_wait_fraction",
                "peak_device_memory_bytes", "replicas", "train_flops_per_image", "status")
TOP_KEYS = ("schema_version", "framework", "model", "config", "environment", "fairness",
            "epochs", "summary", "measurement")

# How each figure is measured; copied into every result so a report can quote it.
MEASUREMENT = {
    "train_time_s": "sum of per-epoch training times; each epoch timed from a device "
                    "synchronisation before its first step to one after its last step",
    "eval_time_s": "test-set pass after each epoch, timed apart, synchronised at both ends",
    "warmup_time_s": "training time of the first epoch (tracing, XLA/torch.compile, cuDNN "
                     "autotuning, allocator growth all land there)",
    "steady_step_time_ms": "median and p90 over synchronised timing windows (time of the "
                           "window / its steps), epochs after the first (after a resume, "
                           "also after the first of each session: it warms up again); a "
                           "one-epoch run uses its windows after the first. A window holds "
                           "whole calls of `steps_per_call` steps and lasts about "
                           "`window_target_s` (sized from the first epoch's calls), or "
                           "`timing_window` steps when that is set; `steps_per_window` is "
                           "the median steps of the windows used",
    "images_per_s": "images trained / training time, over all replicas, epochs after the "
                    "first of each session (the only epoch for a one-epoch run)",
    "input_wait_fraction": "time the training steps blocked waiting for their next batch / "
                           "training time, same epochs as images_per_s. Timed where each "
                           "framework takes its batches: PyTorch on the host clock around "
                           "next() on its loader; TensorFlow inside its step function "
                           "(tf.timestamp before and after the iterator's get_next, which "
                           "runs in the graph: no host next() to time)",
    "peak_device_memory_bytes": "the framework allocator's peak (tf get_memory_info "
                                "'peak', torch max_memory_allocated) during training, reset "
                                "after each epoch's evaluation, highest over the epochs after "
                                "the first; the first epoch's (initialisation, cuDNN/XLA "
                                "autotuning) is warmup_peak_device_memory_bytes; null on CPU",
    "test_accuracy": "fraction of the test set classified correctly (0..1)",
    "test_loss": "mean cross-entropy on the test set, without label smoothing",
    "train_loss": "mean of the epoch's per-step training losses (with label smoothing)",
}


class SchemaError(ValueError):
    """A result file does not follow the contract."""


def validate_result(result: dict[str, Any]) -> dict[str, Any]:
    """Check a result dict against the contract; returns it or raises SchemaError."""
    missing = [k for k in TOP_KEYS if k not in result]
    if missing:
        raise SchemaError(f"result lacks {', '.join(missing)}")
    if result["framework"] not in ("tf", "torch"):
        raise SchemaError(f"unknown framework {result['framework']!r}")
    for i, epoch in enumerate(result["epochs"]):
        lacking = [k for k in EPOCH_KEYS if k not in epoch]
        if lacking:
            raise SchemaError(f"epoch {i + 1} lacks {', '.join(lacking)}")
        _fraction(epoch["test_accuracy"], f"epoch {i + 1} test_accuracy")
    summary = result["summary"]
    lacking = [k for k in SUMMARY_KEYS if k not in summary]
    if lacking:
        raise SchemaError(f"summary lacks {', '.join(lacking)}")
    if summary["status"] not in STATUSES:
        raise SchemaError(f"summary.status {summary['status']!r} is not one of {STATUSES}")
    for key in ("final_test_accuracy", "best_test_accuracy"):
        if summary[key] is not None:
            _fraction(summary[key], f"summary.{key}")
    step = summary["steady_step_time_ms"]
    if not isinstance(step, dict) or set(step) < {"median", "p90"}:
        raise SchemaError("summary.steady_step_time_ms must hold median and p90")
    return result


def _fraction(value: Any, what: str) -> None:
    if not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise SchemaError(f"{what} must be a fraction in [0, 1], got {value!r}")


def write_atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "w") -> Path:
    """Write through `write(file)` to a temporary file beside `path`, then rename over it.

    A kill at any moment leaves either the previous file or the new one, never a torn one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    return write_atomic(path, lambda f: json.dump(_finite(obj), f, indent=2, sort_keys=False))


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def mark_failed(path: str | os.PathLike, error: str, exit_record: dict[str, Any]) -> None:
    """Rewrite a result its trainer left 'running' as failed: the error, and how the process
    ended (`exit`: code, reason, the last lines of its log). Its epochs stay as written."""
    result = read_result(path)
    if result["summary"].get("status") != "running":
        return
    result["summary"]["status"] = "failed"
    result["error"] = error if not result.get("error") else f"{result['error']}; {error}"
    result["exit"] = exit_record
    write_json_atomic(path, result)


def read_result(path: str | os.PathLike) -> dict[str, Any]:
    """Load and validate a result.json."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"cannot read {path}: {exc}") from exc
    return validate_result(data)
