"""A run's compile caches on disk: the folder its framework's compilers keep them in, in the
state the run asks for, and what the run found there.

Cold (the default): a folder of the run's own, empty at its start and removed at its end, so
a compiled run pays what a user's first run pays and inherits nothing from earlier runs.
Warm: the folder an untimed run of the same configuration filled (compare's warm-up, in the
comparison's folder), or, for `run`, cnncompare's own per framework. Each framework's module
says which variables point its compilers at the folder (`compile_cache_environment`) and
reads what its compilers found (`compiled`); the folder's entries are read here, alike for
both.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from compare.experiment.config import RunConfig
from compare.experiment.datasets.cache import COMPILE_CACHES, home


class CacheModule(Protocol):
    """What a framework's module says of its compile caches."""

    def compile_cache_environment(self, directory: Path, gpu: bool) -> dict[str, str]: ...


def warm_folder(config: RunConfig) -> Path | None:
    """The folder a warm run reads and fills: the one its command names, else cnncompare's
    own for the framework; None for a cold run."""
    if config.compile_cache != "warm":
        return None
    if config.compile_cache_dir:
        return Path(config.compile_cache_dir)
    return home() / COMPILE_CACHES / config.framework


@contextmanager
def in_place(module: CacheModule, config: RunConfig, gpu: bool = False) -> Iterator[Path]:
    """The run's cache folder, its framework's compilers pointed at it through the process's
    environment (read at each compiler's first use: nothing has compiled yet in a framework
    process, a fork server's child included) for the length of the block, the environment as
    it was after; a cold folder is removed after. `gpu`: the run has one (its autotuning)."""
    warm = warm_folder(config)
    folder = warm or Path(tempfile.mkdtemp(prefix=f"cnncompare-{config.framework}-cold-cache-"))
    folder.mkdir(parents=True, exist_ok=True)
    variables = module.compile_cache_environment(folder, gpu)
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield folder
    finally:  # as it was: a process that runs more than this (a test's) points nowhere stale
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if warm is None:
            shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class Entries:
    """A cache folder's files at one moment: each one's modification time (ns) by its path in
    the folder, and whether this filesystem shows a read of them (their access times were
    reset to 0 so that the next read moves them)."""

    folder: Path | None
    at_ns: int
    modified: dict[str, int]
    reads_show: bool


def entries(folder: Path | None) -> Entries:
    """The folder's files now, their access times reset to the epoch: Linux's relatime moves
    an access time older than the file's modification time at the next read. A probe file
    says whether this filesystem records reads at all (noatime does not)."""
    at_ns = time.time_ns()
    if folder is None or not folder.is_dir():
        return Entries(folder, at_ns, {}, False)
    modified = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        os.utime(path, ns=(0, stat.st_mtime_ns))
        modified[str(path.relative_to(folder))] = stat.st_mtime_ns
    return Entries(folder, at_ns, modified, _reads_show(folder))


def _reads_show(folder: Path) -> bool:
    """Whether reading a file in `folder` moves its access time (from 0)."""
    probe = folder / f".read-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"probe")
        os.utime(probe, ns=(0, probe.stat().st_mtime_ns))
        probe.read_bytes()
        return probe.stat().st_atime_ns > 0
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def found(before: Entries) -> dict[str, int | None]:
    """What happened in the folder since `before`: the files there at the start, the files
    written since (new or rewritten: compiled afresh and saved), and the files of the start
    read since (None where the filesystem shows no reads)."""
    after = entries_now(before.folder)
    saved = [name for name, mtime in after.items() if before.modified.get(name) != mtime]
    read: int | None = 0 if not before.modified else None  # nothing there: nothing read
    if before.modified and before.reads_show and before.folder is not None:
        read = sum(1 for name in before.modified if name in after and name not in saved
                   and (before.folder / name).stat().st_atime_ns > 0)
    return {"entries_found": len(before.modified), "entries_saved": len(saved),
            "entries_read": read}


def entries_now(folder: Path | None) -> dict[str, int]:
    """The folder's files and their modification times (ns), access times left alone."""
    if folder is None or not folder.is_dir():
        return {}
    return {str(path.relative_to(folder)): path.stat().st_mtime_ns
            for path in sorted(folder.rglob("*")) if path.is_file()}
