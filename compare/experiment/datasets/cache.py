"""The cache under $CNNCOMPARE_HOME: decoded arrays as .npz, keyed by source and input."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np

from compare.experiment.datasets.dataset import Dataset
from compare.files import write_atomic

log = logging.getLogger("cnncompare.data")

CACHE_FORMAT = 1  # bump when the cached arrays change meaning


def home() -> Path:
    """The cache root: $CNNCOMPARE_HOME or ~/.cache/cnncompare."""
    return Path(os.environ.get("CNNCOMPARE_HOME", Path.home() / ".cache" / "cnncompare"))


def cache_file(source: str, fingerprint: str) -> Path:
    """Where the arrays of (source, fingerprint) live in the cache."""
    key = hashlib.sha256(f"{CACHE_FORMAT}:{source}:{fingerprint}".encode()).hexdigest()[:16]
    return home() / "arrays" / f"{source}-{key}.npz"


def read_cache(path: Path, source: str) -> Dataset | None:
    """The Dataset saved at `path`, or None when it is missing or unreadable."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            dataset = Dataset(z["train_x"], z["train_y"], z["test_x"], z["test_y"],
                              tuple(str(c) for c in z["classes"]), source, str(z["origin"]),
                              str(path), [str(n) for n in z["notes"]])
            if "channel_mean" in z.files:  # saved with the arrays: not recomputed per process
                dataset.__dict__["channel_stats"] = (z["channel_mean"], z["channel_std"])
            return dataset
    except (OSError, ValueError, KeyError):
        log.warning("cache %s is unreadable; rebuilding it", path)
        return None


def write_cache(path: Path, dataset: Dataset) -> None:
    """Save `dataset` at `path` atomically: a kill leaves the old file or the new one."""
    write_atomic(path, lambda f: np.savez(
        f, train_x=dataset.train_x, train_y=dataset.train_y, test_x=dataset.test_x,
        test_y=dataset.test_y, classes=np.array(dataset.classes),
        origin=np.array(dataset.origin), notes=np.array(dataset.notes, dtype=str),
        channel_mean=dataset.mean, channel_std=dataset.std), mode="wb")


def cached(source: str, fingerprint: str, build: Callable[[], Dataset]) -> Dataset:
    """The cached arrays for (source, fingerprint), built and saved on a miss."""
    path = cache_file(source, fingerprint)
    dataset = read_cache(path, source)
    if dataset is not None:
        return dataset
    dataset = build()
    try:
        write_cache(path, dataset)
        dataset.cache_path = str(path)
    except OSError as exc:  # a read-only home still lets the run go on
        log.warning("could not write the cache %s: %s", path, exc)
    return dataset


def stat_fingerprint(paths: list[Path]) -> str:
    """Cheap fingerprint of files: names, sizes and modification times."""
    digest = hashlib.sha256()
    for p in sorted(paths):
        st = p.stat()
        digest.update(f"{p}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


# Folders under the root that hold one built thing per child, each listed as one entry: the
# framework environments `cnncompare setup gpu` builds (compare.setup) and each framework's
# warm compile caches (compare.run.compile_cache)
ENVIRONMENTS = "environments"
COMPILE_CACHES = "compile-cache"


def describe_cache() -> dict[str, Any]:
    """Every file under the cache root with its size in bytes, and the total; each folder of
    ENVIRONMENTS and COMPILE_CACHES as one entry."""
    root = home()
    entries = []
    if root.exists():
        built = {p for folder in (ENVIRONMENTS, COMPILE_CACHES)
                 for p in (root / folder).glob("*") if p.is_dir()}
        for p in sorted(root.rglob("*")):
            if p in built:
                entries.append({"path": str(p), "bytes": sum(
                    f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())})
            elif p.is_file() and not built & set(p.parents):
                entries.append({"path": str(p), "bytes": p.stat().st_size})
    return {"root": str(root), "files": entries, "bytes": sum(e["bytes"] for e in entries)}


def clear_cache() -> None:
    """Delete the decoded arrays; downloads and framework caches stay."""
    shutil.rmtree(home() / "arrays", ignore_errors=True)
