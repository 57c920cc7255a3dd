"""The training loop and its clock, shared by both frameworks.

Each framework supplies a `compare.run.interface.Trainer`; this module owns the order of work
and the timing, so every figure is measured by the same code in TensorFlow and in PyTorch.
The result files are compare.run.recorder's, the live display compare.run.progress's.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from compare.errors import (
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OOM,
    Diverged,
    OutOfMemory,
)
from compare.experiment.config import RunConfig
from compare.experiment.datasets.dataset import DataInfo
from compare.experiment.recipe import learning_rate
from compare.schema import Epoch
from compare.machine import cluster, devices, gpu_metrics
from compare.run import checkpoint, fairness, phases, shutdown
from compare.run.interface import Trainer
from compare.run.progress import ProgressDisplay
from compare.run.recorder import Recorder
from compare.run.schedule import Schedule


def train_and_record(trainer: Trainer, config: RunConfig, environment: dict,
                     data_info: DataInfo, schedule: Schedule, resume: bool = False) -> int:
    """Train with a Recorder on the chief process, without one elsewhere, between the
    windows what `schedule` says; an exit code.

    With `resume`, continue from the checkpoint in config.out when there is one
    (compare.run.checkpoint): every process loads it, the chief restores its records.
    """
    state = checkpoint.load(config) if resume else None
    if state is not None:
        trainer.load_checkpoint(checkpoint.state_directory(config, state))
    recorder = None
    environment = {**environment, "hardware": devices.hardware(
        trainer.choice.kind, trainer.choice.name, trainer.replicas,
        cluster.launch(trainer.framework).nodes, trainer.choice.shared_chip)}
    if trainer.choice.is_chief:
        if state is None:  # a fresh start must not leave an older run's checkpoint behind
            checkpoint.remove(Path(config.out))
        manifest = fairness.manifest(config, trainer.choice, trainer.replicas, trainer.manifest(),
                                     trainer.spec)
        recorder = Recorder(config, trainer, trainer.spec, environment, manifest, data_info)
        if state is not None:
            recorder.restore(state)
        recorder.write()  # a valid result exists from the start
    try:
        return train_epochs(trainer, config, recorder, state["next_epoch"] if state else 0,
                            schedule)
    finally:
        schedule.close()
        trainer.close()


def train_epochs(trainer: Trainer, config: RunConfig, recorder: Recorder | None,
                 first_epoch: int = 0, schedule: Schedule | None = None) -> int:
    """Train epochs first_epoch + 1 .. config.epochs (1-based), measuring as
    compare.schema.MEASUREMENT says, on `schedule` (None: the run alone), with a checkpoint
    after each; returns an exit code.

    Whatever happens (Ctrl-C, SIGTERM, SIGHUP, the parent's death, NaN loss, out of memory,
    a crash), the finished epochs are written with the matching status before returning.
    """
    schedule = schedule or Schedule(config, trainer)
    chief = recorder is not None
    display = ProgressDisplay(config, trainer.framework, trainer.steps_per_epoch, enabled=chief)
    outputs = Outputs(recorder, display, config.batch_size)
    total_steps = trainer.steps_per_epoch * config.epochs
    global_step = trainer.steps_per_epoch * first_epoch  # the schedule goes on where it stopped
    status, code = "completed", EXIT_OK
    nvml = (gpu_metrics.sampler(trainer.gpu_indices) if chief
            else gpu_metrics.NoSampler("not the chief process"))
    with shutdown.shielded():  # from here on a stop cannot cut the writing of the result short
        try:
            with shutdown.interruptible():  # ... but it ends the epochs at once
                for epoch in range(first_epoch + 1, config.epochs + 1):
                    display.start_epoch(epoch)
                    record, global_step = _train_epoch(trainer, config, outputs, schedule, nvml,
                                                       epoch, global_step, total_steps)
                    if recorder is not None:  # the chief
                        with shutdown.shielded():  # result, model and checkpoint agree
                            recorder.add_epoch(record, trainer.save_model(recorder.out))
                            checkpoint.save(recorder.out, trainer, config, epoch,
                                            recorder.resume_state())
                            recorder.summarise("running")
                            recorder.write()
                    display.end_epoch(record)
                    schedule.after_epoch()
                schedule.finish()
                if config.profile_steps and first_epoch < config.epochs:
                    profile_phases(trainer, config, recorder, global_step)
        except KeyboardInterrupt as exc:
            status, code = "interrupted", getattr(exc, "exit_code", EXIT_INTERRUPTED)
            _interrupted(trainer, recorder, str(exc))
            schedule.stop(exc)
        except Diverged as exc:
            status, code = "diverged", EXIT_DIVERGED
            _note(recorder, str(exc))
        except Exception as exc:  # noqa: BLE001 - every failure must still leave a valid result
            status, code = "failed", EXIT_FAILED
            stopped_by = shutdown.stop_received()
            if stopped_by is not None:  # a DDP peer or loader worker stopped first
                status, code = "interrupted", 128 + stopped_by
                _interrupted(trainer, recorder, f"{exc.__class__.__name__} after a stop signal")
            elif trainer.is_out_of_memory(exc):
                smaller = max(trainer.replicas, config.batch_size // 2)
                code = EXIT_OOM
                _note(recorder, str(OutOfMemory(
                    f"out of device memory at --batch-size {config.batch_size} "
                    f"({config.batch_size // trainer.replicas} per replica); "
                    f"try --batch-size {smaller}")))
            else:
                _note(recorder, f"{exc.__class__.__name__}: {exc}")
                _peers(trainer, recorder, exc)
                if config.debug:
                    display.close()
                    if recorder is not None:
                        recorder.finish(status)
                    raise
        finally:
            display.close()
            nvml.close()
        if recorder is not None:
            recorder.finish(status)
            if status == "completed":
                checkpoint.remove(recorder.out)
    return code


def _train_epoch(trainer: Trainer, config: RunConfig, outputs: Outputs, schedule: Schedule,
                 nvml: gpu_metrics.NvmlSampler | gpu_metrics.NoSampler, epoch: int,
                 global_step: int, total_steps: int) -> tuple[Epoch, int]:
    """One epoch's training in calls of trainer.steps_per_call steps (the last call takes
    what is left), timed in synchronised windows of whole calls, then its evaluation.
    Between two windows, and before the first, what the schedule says runs outside the
    epoch's clock (the twin's window, the other framework's turn)."""
    batches = trainer.batches(epoch - 1)
    steps = trainer.steps_per_epoch
    epoch_losses: list[float] = []
    wait_s = 0.0
    away_s = 0.0  # in the schedule's work between windows: in no clock
    schedule.open_epoch()
    trainer.sync()  # nothing queued from before may land in this epoch's clock
    nvml.begin_epoch()
    start = window_start = time.perf_counter()
    pending: list[Any] = []  # the window's train_steps handles, read once when it ends
    lrs: list[float] = []
    step_ms: list[float] = []  # this process's milliseconds per step, one per window
    calls, step, first_in_window = 0, 0, global_step
    while step < steps:
        count = min(trainer.steps_per_call, steps - step)
        # The schedule stays per step: each step of the call gets its own learning rate.
        call_lrs = [learning_rate(config, global_step + i, total_steps) for i in range(count)]
        pending.append(trainer.train_steps(batches, call_lrs))
        lrs.extend(call_lrs)
        step, global_step, calls = step + count, global_step + count, calls + 1
        if calls == schedule.calls or step == steps:
            trainer.sync()  # the window ends when the device has finished its work
            seconds = time.perf_counter() - window_start
            losses, waited = trainer.read_steps(pending)  # one transfer per window
            wait_s += waited
            outputs.record_window(epoch, first_in_window, lrs, losses, seconds, waited)
            bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
            if bad is not None:
                raise Diverged(f"the training loss became {losses[bad]} at epoch {epoch}, "
                               f"step {first_in_window + bad + 1}: lower --lr (now {config.lr}) "
                               f"or use --precision fp32")
            epoch_losses.extend(losses)
            outputs.show_window(step, len(lrs), seconds, float(np.mean(epoch_losses)))
            step_ms.append(1000.0 * seconds / len(lrs))
            left = time.perf_counter()
            schedule.between_windows(seconds, calls, len(lrs), global_step / total_steps,
                                     epoch_goes_on=step < steps)
            away_s += time.perf_counter() - left
            pending, lrs, calls, first_in_window = [], [], 0, global_step
            window_start = time.perf_counter()
    trainer.sync()
    train_time = time.perf_counter() - start - away_s
    schedule.end_epoch_training()
    device_time = trainer.epoch_device_time()
    gpu = nvml.end_epoch()  # energy and utilisation of the training part of the epoch
    peak_bytes, _ = trainer.peak_memory()  # this epoch's training (epoch 1: with its warm-up)
    eval_start = time.perf_counter()
    test_loss, test_accuracy = trainer.evaluate()  # returns host floats: synchronised
    eval_time = time.perf_counter() - eval_start
    trainer.reset_peak_memory()  # the next epoch's peak is its own
    images = steps * config.batch_size
    record: Epoch = {
        "epoch": epoch, "train_loss": float(np.mean(epoch_losses)),
        "test_loss": test_loss, "test_accuracy": test_accuracy,
        "train_time_s": train_time, "eval_time_s": eval_time,
        "images_per_s": images / train_time, "images": images,
        "input_wait_s": wait_s, "steps": steps,
        "device_time_s": device_time, "peak_device_memory_bytes": peak_bytes,
        "host_rss_bytes": host_rss(), "gpu": gpu, "loss_scale": trainer.loss_scale()}
    if trainer.choice.processes > 1:  # a collective: every process gets here each epoch
        record["processes"] = per_process(trainer, train_time, wait_s, step_ms)
    return record, global_step


class Outputs:
    """Where the loop's figures go: the chief's files (no recorder elsewhere) and its live
    display."""

    def __init__(self, recorder: Recorder | None, display: ProgressDisplay, batch_size: int):
        self.recorder, self.display, self.batch_size = recorder, display, batch_size

    def record_window(self, epoch: int, first_step: int, lrs: list[float], losses: list[float],
                      seconds: float, waited: float) -> None:
        """A timing window of len(lrs) steps closed after `seconds`: its row and its steps'
        rows, whatever their losses (a diverged run keeps the step that diverged)."""
        if self.recorder is not None:
            self.recorder.add_window(epoch, first_step, len(lrs), seconds, waited)
            self.recorder.add_steps(first_step, epoch, lrs, losses)

    def show_window(self, steps_done: int, steps: int, seconds: float, mean_loss: float) -> None:
        """The display's live images per second and mean loss, after a window of finite
        losses."""
        self.display.window(steps_done, steps * self.batch_size / seconds, mean_loss)


PROCESS_FIGURES = ("train_time_s", "input_wait_s", "median_step_ms")


def per_process(trainer: Trainer, train_time_s: float, input_wait_s: float,
                step_ms: list[float]) -> list[dict[str, float]]:
    """Every process's own clock for this epoch, gathered through the framework's collective
    (DDP ranks, MultiWorkerMirroredStrategy workers): one row per rank, in rank order. The
    slowest process sets the pace of all, so the spread shows where time goes."""
    own = [train_time_s, input_wait_s, float(np.median(step_ms)) if step_ms else math.nan]
    rows = trainer.gather_figures(own)
    return [{"rank": rank, **dict(zip(PROCESS_FIGURES, row))} for rank, row in enumerate(rows)]


def profile_phases(trainer: Trainer, config: RunConfig, recorder: Recorder | None,
                   global_step: int) -> None:
    """`--profile N`: after the last epoch, N more training steps (whole calls, and at most
    an epoch's less one warm call) under the framework's own profiler, split into the step's
    phases (compare.run.phases) into result["profile"]. They take the data plan's next epoch of
    batches, after one unrecorded warm call that starts its pipeline, at the last step's
    learning rate; an epoch of fewer than two calls is all warm-up, and the profile takes
    the epoch after it. Every process runs every step, profiled or not, so that the collectives
    pair up; the chief alone records. They count in no other figure: the result's epochs
    and model were final before them. A profiler that fails, or a stop during the profile,
    leaves a note in result["profile"], not a failed or interrupted run."""
    per_call, steps = trainer.steps_per_call, trainer.steps_per_epoch
    whole_calls = steps // per_call
    wanted_calls = math.ceil(config.profile_steps / per_call)
    if whole_calls >= 2:  # whole calls of the traced length, one left for the warm call
        warm_steps = per_call
        profiled = per_call * max(1, min(wanted_calls, whole_calls - 1))
    else:  # fewer than two calls an epoch: warm up on a whole epoch, which traces every call
        # length the profile takes, then profile the next epoch's calls (never a cold one)
        warm_steps = steps
        profiled = per_call * min(wanted_calls, whole_calls) if whole_calls else steps
    total = steps * config.epochs
    lr = learning_rate(config, min(global_step, total) - 1, total)

    def run(batches: Any, count: int) -> None:
        done = 0
        while done < count:
            size = min(per_call, count - done)
            trainer.train_steps(batches, [lr] * size)  # losses unread: no figure uses them
            done += size

    failure: Exception | str | None = None
    capture, started = None, False
    try:
        batches = trainer.batches(config.epochs)  # 0-based: the epoch after the last
        run(batches, warm_steps)
        if warm_steps == steps:  # the warm call took the whole epoch: the next one
            batches = trainer.batches(config.epochs + 1)
        trainer.sync()
        if recorder is not None:
            try:
                trainer.start_profile(recorder.files.profile)
                started = True
            except Exception as exc:  # noqa: BLE001 - the steps still run: peers wait on them
                failure = exc
        start = time.perf_counter()
        run(batches, profiled)
        trainer.sync()
        wall_s = time.perf_counter() - start
        if started:
            capture = trainer.stop_profile()
            split = phases.split(capture, profiled, wall_s)
    except KeyboardInterrupt:  # the epochs are final: a stop ends the extra steps only
        failure = "interrupted"
    except Exception as exc:  # noqa: BLE001 - the epochs are final: a profile is extra
        failure = exc
    if started and capture is None:  # a profiler left running records all that follows
        try:
            trainer.stop_profile()
        except Exception:  # noqa: BLE001 - the failure above is the one to report
            pass
    if recorder is None:
        return
    if failure is not None or capture is None:
        why = failure if isinstance(failure, str) else f"{failure.__class__.__name__}: {failure}"
        recorder.result["profile"] = {"error": why}
        _say(True, f"{trainer.framework}: the phase profile failed ({why}); "
                   "the run's figures are unaffected")
        return
    recorder.result["files"]["profile"] = capture.files
    recorder.result["profile"] = {"warm_steps": warm_steps, **split}


def host_rss() -> int | None:
    """Resident memory of this process now, bytes (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _say(chief: bool, message: str) -> None:
    if chief:
        print(message, file=sys.stderr, flush=True)


def _interrupted(trainer: Trainer, recorder: Recorder | None, reason: str) -> None:
    finished = len(recorder.epochs) if recorder is not None else 0
    if recorder is not None:
        recorder.note_error(f"interrupted ({reason})" if reason else "interrupted")
    _say(recorder is not None, f"{trainer.framework}: interrupted"
         + (f" ({reason})" if reason else "") + f"; keeping the {finished} finished epoch(s)")


def _peers(trainer: Trainer, recorder: Recorder | None, exc: BaseException) -> None:
    """A multi-process run that failed: the chief's result says which ranks failed and how
    (Trainer.peer_failures); every process takes part, so the others' reasons reach it."""
    if trainer.choice.processes == 1:
        return
    failures = trainer.peer_failures(exc)
    if recorder is not None and failures:
        recorder.result["peer_failures"] = {str(rank): why for rank, why in failures.items()}
        silent = [r for r, why in failures.items() if why.startswith("no answer")]
        named = ", ".join(str(r) for r in (silent or failures))
        _note(recorder, f"{recorder.result.get('error')}; rank(s) {named} of "
                        f"{trainer.choice.processes} failed " + (
                            "(no answer: killed or hung, or its machine was lost)" if silent
                            else f"({failures[next(iter(failures))]})"))


def _note(recorder: Recorder | None, message: str) -> None:
    if recorder is not None:
        recorder.note_error(message)
    _say(recorder is not None, f"error: {message}")
