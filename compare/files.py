"""Where every file the tool writes lives, and how it is written and read: atomically, as JSON
without NaN, refused in one line when it cannot be read. Nothing else names these files.

A run directory (`cnncompare run --out`, or `DIR/runs/<framework>-seed<N>` of a comparison)
and a comparison directory (`cnncompare compare --out`) are described once, here; the
schema of what the JSON files hold is compare.schema's.
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

RESULT = "result.json"  # a run's result (compare.schema.Result)
# A comparison's untimed runs (the compile caches' warm-up, the CUDA graphs trials): never
# read as its runs by a report
WARM_UP, GRAPHS_TRIAL = "warm-up", "cuda-graphs-trial"
OWN_LOOP = "own-loop.json"  # a framework's own loop on a run's recipe (records.OwnLoopRecord)
SUMMARY = "summary.json"  # one comparison's summary (compare.schema.Summary)
COMBINED = "combined.json"  # several comparisons side by side
SWEEP = "sweep.json"
REPORT_PAGES = ("report.md", "report.html")
SWEEP_PAGES = ("sweep.md", "sweep.html")


UMASK = os.umask(0o022)  # read once (it can only be read by setting it), then put back
os.umask(UMASK)


class Unreadable(ValueError):
    """A file that cannot be used: missing, torn, another schema, lacking fields. Its message
    is one line that names the file."""


@dataclass(frozen=True)
class RunDir:
    """The files of one training run."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    result = property(lambda self: self.path / RESULT)
    own_loop = property(lambda self: self.path / OWN_LOOP)  # instead of a result: `--own-loop`
    steps = property(lambda self: self.path / "steps.csv")  # one row per optimizer step
    windows = property(lambda self: self.path / "windows.csv")  # one row per timing window
    config = property(lambda self: self.path / "config.json")  # the RunConfig it started with
    log = property(lambda self: self.path / "log.txt")  # what the framework process printed
    checkpoint = property(lambda self: self.path / "checkpoint.json")  # names the state below
    checkpoint_states = property(lambda self: self.path / "checkpoint")
    profile = property(lambda self: self.path / "profile")  # the profiler's own trace
    tensorboard = property(lambda self: self.path / "tensorboard")

    def worker(self, rank: int) -> RunDir:
        """Where a process other than rank 0 of a multi-process launch keeps its config and
        log (only rank 0 writes the result)."""
        return RunDir(self.path / "workers" / f"rank-{rank}")


@dataclass(frozen=True)
class ComparisonDir:
    """The files of one `compare` directory."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    comparison = property(lambda self: self.path / "compare.json")  # what --resume needs
    parity_dir = property(lambda self: self.path / "parity")  # the probes' NPZ files
    parity = property(lambda self: self.path / "parity" / "parity.json")
    summary = property(lambda self: self.path / SUMMARY)
    combined = property(lambda self: self.path / COMBINED)
    pages = property(lambda self: [self.path / name for name in REPORT_PAGES])
    runs = property(lambda self: self.path / "runs")
    own_loops = property(lambda self: self.path / "own-loops")  # each framework's own loop
    best = property(lambda self: self.path / "best")  # compare --best: a comparison of its own
    # on a GPU, each framework at its own defaults where the matched runs are not: the same
    defaults = property(lambda self: self.path / "defaults")
    tensorboard = property(lambda self: self.path / "tensorboard")
    earlier = property(lambda self: self.path / "earlier")  # fuller reports kept aside
    warm_up = property(lambda self: self.path / WARM_UP)  # untimed: the caches' warm-up
    graphs_trial = property(lambda self: self.path / "best" / GRAPHS_TRIAL)  # untimed trials

    def run(self, framework: str, seed: int) -> RunDir:
        return RunDir(self.runs / f"{framework}-seed{seed}")

    def own_loop(self, framework: str, seed: int) -> RunDir:
        """The framework's own loop on seed `seed`'s recipe (compare.run.own_loop)."""
        return RunDir(self.own_loops / f"{framework}-seed{seed}")

    @staticmethod
    def of(result_path: Path) -> Path:
        """The comparison directory a result belongs to (DIR/runs/<run>/result.json), else the
        run's own directory."""
        run_dir = Path(result_path).parent
        return run_dir.parent.parent if run_dir.parent.name == "runs" else run_dir


@dataclass(frozen=True)
class SweepDir:
    path: Path

    sweep = property(lambda self: Path(self.path) / SWEEP)
    pages = property(lambda self: [Path(self.path) / name for name in SWEEP_PAGES])

    def run(self, slug: str) -> RunDir:
        return RunDir(Path(self.path) / "runs" / slug)


@dataclass(frozen=True)
class PortDir:
    """What `cnncompare port --out` writes: the twin's spec (for --model), the source's
    weights (for --init-weights) and the proof (compare.schema.PortRecord)."""

    path: Path

    spec = property(lambda self: Path(self.path) / "spec.py")
    weights = property(lambda self: Path(self.path) / "weights.npz")
    record = property(lambda self: Path(self.path) / "port.json")
    kept = ("spec.py", "weights.npz", "port.json")  # the rest of the staging is scratch


def results_under(root: Path) -> list[Path]:
    """Every result file at or below `root` (a result file itself, or a directory), less a
    comparison's untimed runs below it (WARM_UP, GRAPHS_TRIAL)."""
    root = Path(root)
    if root.is_file():
        return [root] if root.name == RESULT else []
    if not root.is_dir():
        return []
    return sorted(path for path in root.rglob(RESULT)
                  if not {WARM_UP, GRAPHS_TRIAL} & set(path.relative_to(root).parts))


def write_atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str = "w") -> Path:
    """Write through `write(file)` to a temporary file beside `path`, then rename over it.

    A kill at any moment leaves either the previous file or the new one, never a torn one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)  # as open() would make it (mkstemp's are private)
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | os.PathLike, text: str) -> Path:
    """`text` into `path`, atomically (write_atomic)."""
    return write_atomic(path, lambda f: f.write(text))


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """JSON, atomically; NaN and infinities (which JSON lacks) as null."""
    return write_atomic(path, lambda f: json.dump(_finite(obj), f, indent=2, sort_keys=False))


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object in `path`, or Unreadable saying why in one line."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise Unreadable(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise Unreadable(f"{path}: cannot read it ({exc.__class__.__name__})") from None
    except json.JSONDecodeError as exc:
        raise Unreadable(f"{path}: not valid JSON (torn?): {exc.msg} at line {exc.lineno}") \
            from None
    if not isinstance(data, dict):
        raise Unreadable(f"{path}: not a JSON object")
    return data


def read_json_or_empty(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object in `path`; {} where there is none to read (an optional file)."""
    try:
        return read_json(path)
    except Unreadable:
        return {}


def read_csv(path: Path) -> dict:
    """A numeric CSV a run writes (steps.csv, windows.csv), with its header, as {column:
    numpy array}; empty when missing or unreadable."""
    import numpy as np
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}
    if not rows:
        return {}
    try:
        return {key: np.array([float(row[key]) for row in rows]) for key in rows[0]}
    except (TypeError, ValueError):  # a torn last line of a killed run
        return {}
