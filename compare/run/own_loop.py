"""A framework's own idiomatic loop on a run's recipe: the answer to "is the shared loop
handicapping my framework?".

`python -m tf_impl.train CONFIG --own-loop` (or torch_impl) builds the run's Trainer (the
same model, shared initial weights, data plan, optimizer, precision and distribution), then
trains it with the framework's own loop instead of compare.run.loop: Keras' compile + fit
(tf_impl/own_loop.py) or the plain PyTorch loop (torch_impl/own_loop.py). Each epoch is timed
as the shared loop times it (the device synchronised at both ends, evaluation apart); the
test set is evaluated once, at the end. What it measured is written to own-loop.json
(compare.records.OwnLoopRecord) beside nothing else: no checkpoint, no per-step files.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType

from compare import files, schema
from compare.errors import EXIT_OK, UserError
from compare.experiment.config import RunConfig
from compare.experiment.datasets import Dataset
from compare.experiment.recipe import learning_rate
from compare.records import OwnLoopRecord
from compare.run import shutdown, wall_time
from compare.run.summary import steady_step_times
from compare.run.windows import WindowClock


def run(impl: ModuleType, config: RunConfig, dataset: Dataset) -> int:
    """Train `config` with `impl`'s own loop and write own-loop.json into config.out; an exit
    code. A stop signal ends it at once; a failure or stop is written, then raised on
    (compare.run.worker reports it in one line). `impl` holds its framework's `own_loop`
    module (compare.run.interface.OwnLoopModule)."""
    choice = impl.select_device(config)
    if choice.processes > 1:
        raise UserError(f"own loops train in one process; this run's {impl.FRAMEWORK} side "
                        f"spans {choice.processes} processes")
    path = files.RunDir(Path(config.out)).own_loop
    path.parent.mkdir(parents=True, exist_ok=True)
    record = OwnLoopRecord(schema_version=schema.OWN_LOOP_VERSION, framework=impl.FRAMEWORK,
                           seed=config.seed, status="running", config=config.to_dict(),
                           device_used=choice.description)
    files.write_json(path, record.to_dict())
    trainer = None
    try:
        with shutdown.interruptible():
            trainer = impl.Trainer(config, dataset, choice)
            wall_time.mark("built")
            total = trainer.steps_per_epoch * config.epochs
            lrs = [learning_rate(config, step, total) for step in range(total)]
            record.steps_per_epoch = trainer.steps_per_epoch
            record.steps_per_call = trainer.steps_per_call

            def on_epoch(epoch: int, seconds: float) -> None:
                record.epoch_times_s.append(seconds)  # the loop keeps its own list too
                print(f"{impl.FRAMEWORK} own loop  epoch {epoch + 1}/{config.epochs}  "
                      f"train {seconds:.2f} s  test_acc at the end", flush=True)

            clock = WindowClock(config, trainer.steps_per_call, trainer.sync)
            done = impl.own_loop.own_loop(trainer, config, dataset, lrs, clock, on_epoch)
            test_loss, test_accuracy = trainer.evaluate()
        epochs = [{"epoch": number} for number in range(1, len(done["epoch_times_s"]) + 1)]
        record = dataclasses.replace(
            record, loop=done["loop"], epoch_times_s=done["epoch_times_s"],
            windows=clock.windows, steady_step_time_ms=steady_step_times(epochs, clock.windows),
            mean_losses=done["mean_losses"], final_test_accuracy=test_accuracy,
            final_test_loss=test_loss, status="completed")
        print(f"{impl.FRAMEWORK} own loop: {steady_seconds(record.epoch_times_s):.2f} s "
              f"after the first epoch, test_acc {test_accuracy:.4f}", flush=True)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - recorded, then one line
        stopped = isinstance(exc, KeyboardInterrupt)
        record.status = "interrupted" if stopped else "failed"
        record.error = str(exc) or type(exc).__name__
        files.write_json(path, record.to_dict())
        raise
    finally:
        if trainer is not None:
            trainer.close()
    files.write_json(path, record.to_dict())
    return EXIT_OK


def steady_seconds(epoch_times_s: list[float]) -> float:
    """Training time of the epochs after the first (the first carries tracing, compilation
    and autotuning), or of the only epoch: the same rule as the shared loop's figures."""
    return sum(epoch_times_s[1:]) if len(epoch_times_s) > 1 else sum(epoch_times_s)


def running_means(losses: list[float], steps: list[int]) -> list[float]:
    """The running mean of `losses` (one per step, in order) after each count in `steps`:
    the shared loop's per-step losses in the form the own loops report theirs."""
    means, total, done = [], 0.0, 0
    for count in steps:
        total += sum(losses[done:count])
        done = count
        means.append(total / count)
    return means

