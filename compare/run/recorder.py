"""The files of one run (compare.files.RunDir): its result, every step and every timing
window, written atomically.

Only the chief process records. The files are rewritten after every epoch and once more
when the run ends, so a run stopped at any moment keeps every finished epoch.
"""

from __future__ import annotations

import csv
import io
import os
import resource
import socket
import time
from pathlib import Path
from typing import Any, Callable

from compare import files, schema
from compare.experiment import specs
from compare.experiment.config import RunConfig
from compare.experiment.datasets.dataset import DataInfo
from compare.machine.doctor import loaded_cuda_libraries
from compare.run.interface import ScalarWriter, Trainer
from compare.run.summary import summarise_run

STEP_COLUMNS = ("global_step", "epoch", "lr", "loss")
# The scalars every run writes for TensorBoard, the same tags in both frameworks.
TENSORBOARD_TAGS = ("train/loss", "train/lr", "train/step_time_ms", "train/images_per_s",
                    "test/accuracy", "test/loss")
WINDOW_COLUMNS = ("epoch", "first_step", "steps", "seconds", "input_wait_s")


class Recorder:
    """Holds the result of one run and writes it atomically."""

    def __init__(self, config: RunConfig, trainer: Trainer, spec: specs.ModelSpec,
                 environment: dict, fairness: dict, data_info: DataInfo):
        self.out = Path(config.out)
        self.files = files.RunDir(self.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.trainer = trainer
        self.train_flops_per_image = specs.train_flops(spec)
        # the framework's TensorBoard writer, made at the first epoch
        self.scalars: ScalarWriter | None = None
        self.windows: list[schema.Window] = []  # synchronised timing windows
        self.steps: list[list[Any]] = []  # [global step, epoch, lr, loss] per optimizer step
        self.result: dict[str, Any] = {
            "schema_version": schema.RESULT_VERSION,
            "framework": trainer.framework,
            "model": specs.describe(spec),
            "config": config.to_dict(),
            "data": data_info,
            "environment": environment,
            "fairness": fairness,
            "measurement": schema.MEASUREMENT,
            "epochs": [],
            "summary": {},
            "files": {role: getattr(self.files, role).name
                      for role in ("result", "steps", "windows")},
            "started_at": _now(),
            # The processes that trained this run: one, or one more per resume; each epoch
            # record names its session, so every timing says which process measured it.
            "sessions": [_session(0, first_epoch=1)],
            "error": None,
        }
        self.summarise("running")

    def resume_state(self) -> schema.RecordsSoFar:
        """What a resumed run restores (compare.run.checkpoint keeps it beside the weights)."""
        return {"epochs": self.epochs, "steps": self.steps, "windows": self.windows,
                "sessions": self.result["sessions"], "started_at": self.result["started_at"],
                "files": self.result["files"]}

    def restore(self, state: schema.RecordsSoFar) -> None:
        """Continue a checkpointed run: its records so far, and this process as a new session."""
        self.result["epochs"] = list(state["epochs"])
        self.steps = [list(row) for row in state["steps"]]
        self.windows = list(state["windows"])
        sessions = list(state["sessions"])
        self.result["sessions"] = sessions + [_session(len(sessions), len(self.epochs) + 1)]
        self.result["started_at"] = state["started_at"]
        self.result["files"] = dict(state["files"])
        self.summarise("running")

    @property
    def epochs(self) -> list[schema.Epoch]:
        return self.result["epochs"]

    def add_steps(self, first_step: int, epoch: int, lrs: list[float], losses: list[float]) -> None:
        for i, (lr, loss) in enumerate(zip(lrs, losses)):
            self.steps.append([first_step + i, epoch, lr, loss])

    def add_window(self, epoch: int, first_step: int, steps: int, seconds: float,
                   input_wait_s: float) -> None:
        self.windows.append({"epoch": epoch, "first_step": first_step, "steps": steps,
                             "seconds": seconds, "input_wait_s": input_wait_s})

    def add_epoch(self, record: schema.Epoch, model_file: str) -> None:
        self.epochs.append({**record, "session": len(self.result["sessions"]) - 1})
        self.result["files"]["model"] = model_file
        self._log_epoch(record["epoch"])

    def _log_epoch(self, epoch: int) -> None:
        """The epoch's scalars as TensorBoard events, written by the framework's own writer
        after the epoch's clock stopped (same tags in both frameworks: TENSORBOARD_TAGS),
        each tag's series in one call."""
        if self.scalars is None:
            directory = tensorboard_directory(self.config)
            self.scalars = self.trainer.scalar_writer(directory)
            self.result["files"]["tensorboard"] = str(directory)
        steps = _tail(self.steps, lambda row: row[1] == epoch)  # this epoch's rows are last
        at = [row[0] for row in steps]
        self.scalars.scalars("train/loss", [row[3] for row in steps], at)
        self.scalars.scalars("train/lr", [row[2] for row in steps], at)
        windows = _tail(self.windows, lambda w: w["epoch"] == epoch)
        last = [w["first_step"] + w["steps"] - 1 for w in windows]  # each window's last step
        self.scalars.scalars("train/step_time_ms",
                             [1000.0 * w["seconds"] / w["steps"] for w in windows], last)
        self.scalars.scalars("train/images_per_s",
                             [w["steps"] * self.config.batch_size / w["seconds"] for w in windows],
                             last)
        record = self.epochs[-1]
        end = steps[-1][0] if steps else 0
        self.scalars.scalars("test/accuracy", [record["test_accuracy"]], [end])
        self.scalars.scalars("test/loss", [record["test_loss"]], [end])
        self.scalars.flush()

    def note_error(self, message: str) -> None:
        self.result["error"] = message

    def summarise(self, status: str) -> None:
        trainer = self.trainer
        self.summary = summarise_run(
            self.config, self.epochs, self.windows, status=status, replicas=trainer.replicas,
            train_flops_per_image=self.train_flops_per_image, device_name=trainer.choice.name,
            on_gpu=trainer.choice.on_gpu, peak_memory_note=trainer.peak_memory()[1],
            precision=resolved_precision(trainer),
            host_peak_rss_bytes=host_peak_rss(), steps_per_call=trainer.steps_per_call)
        self.result["summary"] = self.summary.to_dict()

    def finish(self, status: str) -> None:
        if self.scalars is not None:
            self.scalars.close()
            self.scalars = None
        self.result["finished_at"] = _now()
        # the CUDA libraries the run used, read once all of them are loaded (cuDNN loads at
        # the first convolution)
        self.result["fairness"]["cuda_libraries"] = {
            "loaded": loaded_cuda_libraries(),
            "chosen_by": os.environ.get("CNNCOMPARE_TF_CUDNN")}
        try:
            self.result["compilation"] = self.trainer.compilation()
        except Exception as exc:  # noqa: BLE001 - a compiler's API must not cost the result
            self.result["compilation"] = {"error": f"{exc.__class__.__name__}: {exc}"}
        self.summarise(status)
        self.write()

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.result["updated_at"] = _now()
        files.write_json(self.files.result, self.result)
        _write_csv(self.files.steps, STEP_COLUMNS, self.steps)
        _write_csv(self.files.windows, WINDOW_COLUMNS,
                   [[dict(w)[c] for c in WINDOW_COLUMNS] for w in self.windows])


def resolved_precision(trainer: Trainer) -> str:
    """The precision the trainer computes in ("mixed" or "fp32"), as its framework resolved it."""
    return trainer.numerics["resolved"].precision


def _tail(rows: list, belongs: Callable[[Any], bool]) -> list:
    """The trailing run of `rows` for which `belongs` holds, without scanning the rest."""
    start = len(rows)
    while start and belongs(rows[start - 1]):
        start -= 1
    return rows[start:]


def tensorboard_directory(config: RunConfig) -> Path:
    """Where a run's TensorBoard events go: <tensorboard_dir or out/tensorboard>/<fw>-seed<N>,
    so `tensorboard --logdir DIR/tensorboard` overlays the two frameworks of a comparison."""
    root = (Path(config.tensorboard_dir) if config.tensorboard_dir
            else files.RunDir(Path(config.out)).tensorboard)
    return root / f"{config.framework}-seed{config.seed}"


def _write_csv(path: Path, header: tuple[str, ...], rows: list) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    files.write_atomic(path, lambda f: f.write(buffer.getvalue()))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _session(index: int, first_epoch: int) -> schema.Session:
    """This process as one session of the run: it trains from epoch `first_epoch` (1-based)."""
    return {"session": index, "pid": os.getpid(), "host": socket.gethostname(),
            "started_at": _now(), "first_epoch": first_epoch}


def host_peak_rss() -> int:
    """Peak resident memory of this process, bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
