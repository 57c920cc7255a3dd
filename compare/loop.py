"""The training loop and its clock, shared by both trainers.

Each framework supplies a `Trainer` (the methods in the protocol below); this module owns
the order of work, the timing, the progress display and the result files, so every
figure is measured by the same code in TensorFlow and in PyTorch.
"""

from __future__ import annotations

import csv
import io
import math
import signal
import sys
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

import numpy as np

from compare import gpu_metrics, results, specs
from compare.config import RunConfig, learning_rate
from compare.errors import (EXIT_DIVERGED, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_OOM,
                            DeviceError, Diverged, OutOfMemory)


@dataclass(frozen=True)
class DeviceChoice:
    """Where a run trains, chosen once by the framework's select_device and passed down."""

    kind: str  # "gpu" or "cpu"
    names: tuple[str, ...]  # one framework device name per replica
    description: str  # what the user is told, e.g. "GPU: NVIDIA H100 80GB HBM3"


def check_split(config: RunConfig) -> None:
    """The global batch must split evenly over the replicas."""
    if config.batch_size % config.devices:
        raise DeviceError(f"--batch-size {config.batch_size} does not split evenly over "
                          f"--devices {config.devices}")


class Trainer(Protocol):
    """What a framework provides to the loop (tf_impl.train and torch_impl.train)."""

    framework: str
    replicas: int
    is_chief: bool  # writes files and shows progress (rank 0 under DDP)
    steps_per_epoch: int
    gpu_indices: list[int] | None  # NVML indices of the GPUs used; None on CPU
    device_name: str | None  # e.g. "NVIDIA H100 80GB HBM3"; None on CPU

    def batches(self, epoch: int) -> Iterator[Any]: ...
    def train_step(self, batch: Any, lr: float) -> Any: ...  # returns the loss, not yet synced
    def losses(self, pending: list[Any]) -> list[float]: ...  # global-batch losses as floats
    def sync(self) -> None: ...  # wait for all queued device work
    def epoch_device_time(self) -> float | None: ...  # device-measured epoch time, if any
    def evaluate(self) -> tuple[float, float]: ...  # (test loss, test accuracy)
    def peak_memory(self) -> tuple[int | None, str | None]: ...  # (bytes, reason when None)
    def save_model(self, directory: Path) -> str: ...  # path written
    def is_out_of_memory(self, exc: BaseException) -> bool: ...
    def close(self) -> None: ...


class Recorder:
    """Holds the result of one run and writes it atomically after every epoch."""

    def __init__(self, config: RunConfig, trainer: Trainer, spec: specs.ModelSpec,
                 environment: dict, fairness: dict, data_info: dict):
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.device_name = trainer.device_name
        self.math_mode = gpu_metrics.math_mode(trainer.gpu_indices is not None, config.precision, config.tf32)
        self.windows: list[dict[str, float]] = []  # synchronised timing windows
        self.steps: list[tuple[int, int, float, float]] = []  # (global step, epoch, lr, loss)
        self.result: dict[str, Any] = {
            "schema_version": results.SCHEMA_VERSION,
            "framework": trainer.framework,
            "model": specs.describe(spec),
            "config": config.to_dict(),
            "data": data_info,
            "environment": environment,
            "fairness": fairness,
            "measurement": results.MEASUREMENT,
            "epochs": [],
            "summary": results.empty_summary(trainer.replicas, specs.train_flops(spec)),
            "files": {"result": "result.json", "steps": "steps.csv", "windows": "windows.csv"},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "error": None,
        }

    def add_window(self, epoch: int, first_step: int, steps: int, seconds: float, wait_s: float) -> None:
        self.windows.append({"epoch": epoch, "first_step": first_step, "steps": steps,
                             "seconds": seconds, "input_wait_s": wait_s})

    def add_epoch(self, record: dict[str, Any]) -> None:
        self.result["epochs"].append(record)

    def summarise(self, status: str, peak_memory: tuple[int | None, str | None]) -> None:
        epochs = self.result["epochs"]
        summary = self.result["summary"]
        summary["status"] = status
        summary["train_time_s"] = sum(e["train_time_s"] for e in epochs)
        summary["eval_time_s"] = sum(e["eval_time_s"] for e in epochs)
        summary["peak_device_memory_bytes"], summary["peak_device_memory_note"] = peak_memory
        summary["epochs_completed"] = len(epochs)
        summary["host_peak_rss_bytes"] = host_peak_rss()
        if not epochs:
            return
        accuracies = [e["test_accuracy"] for e in epochs]
        summary["final_test_accuracy"] = accuracies[-1]
        summary["best_test_accuracy"] = max(accuracies)
        summary["warmup_time_s"] = epochs[0]["train_time_s"]
        steady = epochs[1:] if len(epochs) > 1 else epochs
        steady_time = sum(e["train_time_s"] for e in steady)
        images = sum(e["images"] for e in steady)
        summary["images_per_s"] = images / steady_time if steady_time > 0 else None
        wait = sum(e["input_wait_s"] for e in steady)
        summary["input_wait_fraction"] = min(1.0, wait / steady_time) if steady_time > 0 else None
        steady_epochs = {e["epoch"] for e in steady}
        windows = [w for w in self.windows if w["epoch"] in steady_epochs]
        if len(epochs) == 1:
            windows = windows[1:]  # the first window carries tracing/compilation
        per_step_ms = np.array([1000.0 * w["seconds"] / w["steps"] for w in windows])
        summary["steady_step_time_ms"] = {
            "median": float(np.median(per_step_ms)) if per_step_ms.size else None,
            "p90": float(np.percentile(per_step_ms, 90)) if per_step_ms.size else None,
            "windows": int(per_step_ms.size), "steps_per_window": self.config.timing_window}
        flops = summary["train_flops_per_image"]
        summary["achieved_flops_per_s"] = (flops * summary["images_per_s"]
                                           if summary["images_per_s"] else None)
        summary.update(gpu_metrics.mfu(summary["achieved_flops_per_s"], self.device_name, self.math_mode,
                                       summary["replicas"]))
        energies = [e["gpu"].get("energy_j") for e in epochs]
        summary["energy_j"] = sum(energies) if all(v is not None for v in energies) else None
        summary["energy_per_image_j"] = (summary["energy_j"] / sum(e["images"] for e in epochs)
                                         if summary["energy_j"] is not None else None)
        summary["energy_note"] = epochs[-1]["gpu"].get("note") or epochs[-1]["gpu"].get("energy_source")
        target = self.config.target_accuracy
        summary["target_accuracy"] = target
        summary["time_to_target_s"] = None
        if target is not None:
            elapsed = 0.0
            for e in epochs:
                elapsed += e["train_time_s"]
                if e["test_accuracy"] >= target:
                    summary["time_to_target_s"] = elapsed
                    summary["epochs_to_target"] = e["epoch"]
                    break

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.result["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        results.write_json_atomic(self.out / "result.json", self.result)
        self._write_csv("steps.csv", ("global_step", "epoch", "lr", "loss"), self.steps)
        self._write_csv("windows.csv", ("epoch", "first_step", "steps", "seconds", "input_wait_s"),
                        [tuple(w.values()) for w in self.windows])

    def _write_csv(self, name: str, header: tuple[str, ...], rows: list) -> None:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows(rows)
        results.write_atomic(self.out / name, lambda f: f.write(buffer.getvalue()))


class Display:
    """A rich progress bar with live img/s, loss and accuracy; one line per epoch when quiet."""

    def __init__(self, config: RunConfig, framework: str, steps_per_epoch: int, enabled: bool):
        self.enabled = enabled
        self.epochs = config.epochs
        self.label = f"{framework}"
        self.accuracy: float | None = None  # the last epoch's test accuracy, shown live
        self.progress = None
        if enabled and not config.quiet:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)
            self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
                                     TimeElapsedColumn(), refresh_per_second=4)
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=steps_per_epoch, stats="")

    def start_epoch(self, epoch: int) -> None:
        if self.progress:
            self.progress.reset(self.task, description=f"{self.label} epoch {epoch}/{self.epochs}",
                                stats="")

    def window(self, done: int, images_per_s: float, loss: float) -> None:
        if self.progress:
            acc = f"  test acc {self.accuracy:.3f}" if self.accuracy is not None else ""
            self.progress.update(self.task, completed=done,
                                 stats=f"{images_per_s:,.0f} img/s  loss {loss:.4f}{acc}")

    def end_epoch(self, record: dict[str, Any]) -> None:
        self.accuracy = record["test_accuracy"]
        line = (f"{self.label} epoch {record['epoch']}/{self.epochs}  "
                f"train_loss {record['train_loss']:.4f}  test_loss {record['test_loss']:.4f}  "
                f"test_acc {record['test_accuracy']:.4f}  train {record['train_time_s']:.2f}s  "
                f"eval {record['eval_time_s']:.2f}s  {record['images_per_s']:,.0f} img/s")
        if self.progress:
            self.progress.console.print(line)
        elif self.enabled:
            print(line, flush=True)

    def close(self) -> None:
        if self.progress:
            self.progress.stop()
            self.progress = None


def train_and_record(trainer: Trainer, config: RunConfig, spec: specs.ModelSpec, environment: dict,
                     fairness: dict, data_info: dict) -> int:
    """Run `trainer` with a Recorder on the chief (rank 0), the others without; an exit code."""
    recorder = None
    if trainer.is_chief:
        recorder = Recorder(config, trainer, spec, environment, fairness, data_info)
        recorder.write()  # a valid result exists from the start
    try:
        return run(trainer, config, recorder)
    finally:
        trainer.close()


def run(trainer: Trainer, config: RunConfig, recorder: Recorder | None) -> int:
    """Train for config.epochs, measuring as results.MEASUREMENT says; returns an exit code.

    Whatever happens (Ctrl-C, NaN loss, out of memory, a crash), the finished epochs are
    written with the matching status before returning.
    """
    chief = trainer.is_chief and recorder is not None
    display = Display(config, trainer.framework, trainer.steps_per_epoch, enabled=chief)
    total_steps = trainer.steps_per_epoch * config.epochs
    global_batch = config.batch_size
    global_step = 0
    status, code = "completed", EXIT_OK
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_interrupt) if chief else None
    nvml = gpu_metrics.sampler(trainer.gpu_indices) if chief else gpu_metrics.NoSampler("not rank 0")
    try:
        for epoch in range(1, config.epochs + 1):
            display.start_epoch(epoch)
            batches = trainer.batches(epoch - 1)
            epoch_losses: list[float] = []
            wait_s = window_wait = 0.0
            trainer.sync()  # nothing queued from before may land in this epoch's clock
            nvml.begin_epoch()
            start = window_start = time.perf_counter()
            pending: list[Any] = []
            first_in_window = global_step
            for step in range(trainer.steps_per_epoch):
                before = time.perf_counter()
                batch = next(batches)  # blocks only when the pipeline has nothing ready
                waited = time.perf_counter() - before
                wait_s += waited
                window_wait += waited
                lr = learning_rate(config, global_step, total_steps)
                pending.append(trainer.train_step(batch, lr))
                if chief:
                    recorder.steps.append((global_step, epoch, lr, math.nan))
                global_step += 1
                if len(pending) == config.timing_window or step == trainer.steps_per_epoch - 1:
                    trainer.sync()  # the window ends when the device has finished its work
                    now = time.perf_counter()
                    losses = trainer.losses(pending)
                    if chief:
                        recorder.add_window(epoch, first_in_window, len(pending), now - window_start,
                                            window_wait)
                        for i, loss in enumerate(losses):
                            g, e, r, _ = recorder.steps[first_in_window + i]
                            recorder.steps[first_in_window + i] = (g, e, r, loss)
                    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
                    if bad is not None:
                        raise Diverged(f"the training loss became {losses[bad]} at epoch {epoch}, "
                                       f"step {first_in_window + bad + 1}: lower --lr (now {config.lr}) "
                                       f"or use --precision fp32")
                    epoch_losses.extend(losses)
                    display.window(step + 1, len(pending) * global_batch / (now - window_start),
                                   float(np.mean(epoch_losses)))
                    pending, first_in_window = [], global_step
                    window_start, window_wait = time.perf_counter(), 0.0
            trainer.sync()
            train_time = time.perf_counter() - start
            device_time = trainer.epoch_device_time()
            gpu = nvml.end_epoch()  # energy and utilisation of the training part of the epoch
            eval_start = time.perf_counter()
            test_loss, test_accuracy = trainer.evaluate()  # returns host floats: synchronised
            eval_time = time.perf_counter() - eval_start
            images = trainer.steps_per_epoch * global_batch
            record = {"epoch": epoch, "train_loss": float(np.mean(epoch_losses)),
                      "test_loss": test_loss, "test_accuracy": test_accuracy,
                      "train_time_s": train_time, "eval_time_s": eval_time,
                      "images_per_s": images / train_time, "images": images,
                      "input_wait_s": wait_s, "steps": trainer.steps_per_epoch,
                      "device_time_s": device_time, "host_rss_bytes": host_rss(), "gpu": gpu}
            if chief:
                recorder.add_epoch(record)
                recorder.summarise("running", trainer.peak_memory())
                recorder.result["files"]["model"] = trainer.save_model(recorder.out)
                recorder.write()
            display.end_epoch(record)
    except KeyboardInterrupt:
        status, code = "interrupted", EXIT_INTERRUPTED
        _say(chief, f"{trainer.framework}: interrupted; keeping the "
                    f"{len(recorder.result['epochs']) if chief else 0} finished epoch(s)")
    except Diverged as exc:
        status, code = "diverged", EXIT_DIVERGED
        _note(recorder, chief, str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure must still leave a valid result
        if trainer.is_out_of_memory(exc):
            smaller = max(trainer.replicas, config.batch_size // 2)
            message = (f"out of device memory at --batch-size {config.batch_size} "
                       f"({config.per_replica_batch} per replica); try --batch-size {smaller}")
            status, code = "failed", EXIT_OOM
            _note(recorder, chief, message)
            exc = OutOfMemory(message)
        else:
            status, code = "failed", EXIT_FAILED
            _note(recorder, chief, f"{exc.__class__.__name__}: {exc}")
            if config.debug:
                display.close()
                if chief:
                    recorder.summarise(status, trainer.peak_memory())
                    recorder.write()
                raise
    finally:
        display.close()
        nvml.close()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    if chief:
        recorder.result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        recorder.summarise(status, trainer.peak_memory())
        recorder.write()
    return code


def host_rss() -> int | None:
    """Resident memory of this process now, bytes (Linux /proc; None elsewhere)."""
    try:
        import os
        pages = int(open("/proc/self/statm").read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def host_peak_rss() -> int:
    """Peak resident memory of this process, bytes (Linux reports KiB)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _raise_interrupt(signum, frame):  # SIGTERM is handled like Ctrl-C: finish writing, then stop
    raise KeyboardInterrupt


def _say(chief: bool, message: str) -> None:
    if chief:
        print(message, file=sys.stderr, flush=True)


def _note(recorder: Recorder | None, chief: bool, message: str) -> None:
    if chief and recorder is not None:
        recorder.result["error"] = message
    _say(chief, f"error: {message}")
