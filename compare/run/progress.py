"""What a training process shows: a rich progress bar with live img/s, loss and accuracy,
or one line per epoch with --quiet (the parent of a comparison reads those lines, and asks
for one more per timing window to show the run's live img/s on its own progress line)."""

from __future__ import annotations

from compare.experiment.config import RunConfig
from compare.schema import Epoch

# A comparison's parent (compare.process.runner) starts its quiet children with
# --window-lines: each then prints a WINDOW_PREFIX line per timing window (window_line), which
# the parent shows live and keeps off the terminal and the run's log.
WINDOW_PREFIX = "cnncompare-window: "
_window_lines_asked = False


def ask_for_window_lines() -> None:
    """This process's quiet run also prints a line per timing window (the worker's
    --window-lines)."""
    global _window_lines_asked
    _window_lines_asked = True


class ProgressDisplay:
    """Live progress of one run on the chief; silent elsewhere."""

    def __init__(self, config: RunConfig, framework: str, steps_per_epoch: int, enabled: bool):
        self.enabled = enabled
        self.epochs, self.epoch, self.steps_per_epoch = config.epochs, 0, steps_per_epoch
        self.window_lines = enabled and config.quiet and _window_lines_asked
        self.label = framework
        self.accuracy: float | None = None  # the last epoch's test accuracy, shown live
        self.progress = None
        if enabled and not config.quiet:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )
            self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
                                     TimeElapsedColumn(), refresh_per_second=4)
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=steps_per_epoch, stats="")

    def start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self.progress:
            self.progress.reset(self.task, description=f"{self.label} epoch {epoch}/{self.epochs}",
                                stats="")

    def window(self, steps_done: int, images_per_s: float, mean_loss: float) -> None:
        if self.progress:
            accuracy = f"  test acc {self.accuracy:.3f}" if self.accuracy is not None else ""
            self.progress.update(self.task, completed=steps_done,
                                 stats=f"{images_per_s:,.0f} img/s  loss {mean_loss:.4f}{accuracy}")
        elif self.window_lines:
            print(window_line(self.epoch, self.epochs, steps_done, self.steps_per_epoch,
                              images_per_s, mean_loss), flush=True)

    def end_epoch(self, record: Epoch) -> None:
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


def window_line(epoch: int, epochs: int, step: int, steps: int, images_per_s: float,
                mean_loss: float) -> str:
    """The line a quiet child prints after a timing window (ask_for_window_lines)."""
    return (f"{WINDOW_PREFIX}epoch {epoch}/{epochs}  step {step}/{steps}  "
            f"{images_per_s:,.0f} img/s  loss {mean_loss:.4f}")


def window_text(line: str) -> str | None:
    """What a window line says, for the parent's progress line; None for any other line."""
    return line[len(WINDOW_PREFIX):].strip() if line.startswith(WINDOW_PREFIX) else None
