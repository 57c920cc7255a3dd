"""Resume: a checkpoint after every epoch, and the saved config a resumed run continues with.

A checkpoint is written in two steps. First the framework's state (weights, BatchNorm
statistics, optimizer state with its momentum buffers, the loss scale) goes into a fresh
directory `checkpoint/epoch-NNNN/` (the Trainer's save_checkpoint); then `checkpoint.json`,
written atomically, names that directory and holds the rest: the next epoch's index and the
epoch records, steps, timing windows and sessions recorded so far. A stop at any moment
leaves `checkpoint.json` naming a complete directory. The data plan is a pure function of
the seed and the epoch (compare.experiment.plan), so the next epoch's index is the whole position in
the data. A completed run's checkpoint is removed: the result and model file remain.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

from compare import files, schema
from compare.errors import UserError
from compare.experiment.config import RunConfig
from compare.run.interface import Trainer

SCHEMA_VERSION = 1
# Settings that do not change what is computed: a resumed run may differ in these.
# precision_resolved: each command resolves --precision on its machine again (a resume too);
# own_loop_beside: a resumed run's own loop trains in a process of its own;
# turns: a resumed run works alone
NOT_COMPARED = ("out", "quiet", "debug", "precision_resolved", "own_loop_beside", "turns",
                "compile_cache_dir")  # a location: a moved comparison resumes


def save(out: Path, trainer: Trainer, config: RunConfig, epochs_done: int,
         recorded: schema.RecordsSoFar) -> None:
    """The checkpoint after `epochs_done` epochs; `recorded`: the recorder's resume_state()."""
    run = files.RunDir(out)
    directory = run.checkpoint_states / f"epoch-{epochs_done:04d}"
    if directory.exists():  # left by a write that was cut short
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    state_file = trainer.save_checkpoint(directory)
    files.write_json(run.checkpoint, {
        "schema_version": SCHEMA_VERSION, "framework": trainer.framework,
        "next_epoch": epochs_done,  # 0-based index of the epoch to train next
        "state": f"{directory.relative_to(out)}/{state_file}", "config": config.to_dict(),
        **recorded})
    for old in run.checkpoint_states.iterdir():
        if old != directory:
            shutil.rmtree(old, ignore_errors=True)


def load(config: RunConfig) -> schema.Checkpoint | None:
    """The checkpoint in config.out, checked against `config`; None when there is none."""
    out, run = Path(config.out), files.RunDir(Path(config.out))
    if not run.checkpoint.exists():
        return None
    try:
        state = files.read_json(run.checkpoint)
    except files.Unreadable as exc:
        raise UserError(f"cannot read the checkpoint: {exc}") from None
    if state.get("schema_version") != SCHEMA_VERSION:
        raise UserError(f"{run.checkpoint} has schema version "
                        f"{state.get('schema_version')}, not {SCHEMA_VERSION}: start afresh")
    saved, wanted = _compared(state["config"]), _compared(config.to_dict())
    changed = sorted(k for k in wanted if saved.get(k) != wanted[k])
    if changed or state["framework"] != config.framework:
        raise UserError(f"the checkpoint in {out} was made with other settings "
                        f"({', '.join(changed) or 'framework'}): resume with its config.json")
    return cast(schema.Checkpoint, state)  # its version and settings checked above


def state_directory(config: RunConfig, state: schema.Checkpoint) -> Path:
    """The directory the Trainer's load_checkpoint reads."""
    return (Path(config.out) / state["state"]).parent


def remove(out: Path) -> None:
    """Delete the checkpoint in `out` (a completed run, or a fresh start in an old directory)."""
    run = files.RunDir(out)
    run.checkpoint.unlink(missing_ok=True)
    shutil.rmtree(run.checkpoint_states, ignore_errors=True)


def saved_config(directory: Path) -> RunConfig:
    """The config of the run in `directory`, to resume it there (wherever it was started)."""
    path = files.RunDir(directory).config
    try:
        config = RunConfig.from_json(path.read_text())
    except FileNotFoundError:
        raise UserError(f"--resume {directory}: no {path.name} there, so it is not a run "
                        f"directory") from None
    except (OSError, ValueError, TypeError) as exc:
        raise UserError(f"--resume {directory}: cannot read {path}: {exc}") from None
    return config.replace(out=str(directory))


def _compared(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NOT_COMPARED}
