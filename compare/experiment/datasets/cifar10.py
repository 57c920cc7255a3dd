"""The official CIFAR-10 python archive: read it (tar.gz or extracted) or download it."""

from __future__ import annotations

import functools
import hashlib
import os
import tarfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from compare.errors import DataError
from compare.experiment.datasets.cache import cached, home, stat_fingerprint
from compare.experiment.datasets.dataset import Dataset, check_arrays
from compare.experiment.datasets.unpickle import unpickle

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")


def _batch_arrays(batch: dict, what: str) -> tuple[np.ndarray, np.ndarray]:
    """NHWC uint8 images and int64 labels of one unpickled batch."""
    if "data" not in batch or "labels" not in batch:
        raise DataError(f"{what} lacks 'data' or 'labels'; "
                        f"is this the python version of CIFAR-10?")
    data = np.asarray(batch["data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{what}: data must be uint8 (N, 3072), got {data.dtype} {data.shape}")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # R, G, B planes -> NHWC
    return np.ascontiguousarray(images), np.asarray(batch["labels"], dtype=np.int64)


def _read_cifar_members(read: Callable[[str], bytes], origin: str) -> Dataset:
    """The Dataset of the batches that `read(name)` returns the bytes of."""
    meta = unpickle(read("batches.meta"), f"{origin}: batches.meta")
    classes = tuple(n.decode() if isinstance(n, bytes) else str(n)
                    for n in meta.get("label_names", []))
    if not classes:
        raise DataError(f"{origin}: batches.meta has no label_names")
    parts = [_batch_arrays(unpickle(read(name), f"{origin}: {name}"), f"{origin}: {name}")
             for name in CIFAR10_TRAIN_BATCHES]
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    test_x, test_y = _batch_arrays(unpickle(read(CIFAR10_TEST_BATCH), f"{origin}: test_batch"),
                                   f"{origin}: test_batch")
    check_arrays(train_x, train_y, len(classes), f"{origin} (train)")
    check_arrays(test_x, test_y, len(classes), f"{origin} (test)")
    return Dataset(train_x, train_y, test_x, test_y, classes, "cifar10", origin)


def read_cifar10_archive(path: Path) -> Dataset:
    """Decode the official tar.gz without extracting it to disk."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}

            def read(name: str) -> bytes:
                if name not in members:
                    raise DataError(f"{path} lacks {CIFAR10_DIR}/{name}: not the CIFAR-10 "
                                    f"python archive, or a partial download (delete it and "
                                    f"fetch again)")
                member = tar.extractfile(members[name])
                if member is None:  # a directory or link under the member's name
                    raise DataError(f"{path}: {CIFAR10_DIR}/{name} is not a file")
                return member.read()

            return _read_cifar_members(read, str(path))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DataError(f"{path} is corrupt or truncated ({exc}); delete it and run "
                        f"`cnncompare data fetch`, or point --data-dir at a good copy") from None


def read_cifar10_dir(path: Path) -> Dataset:
    """Decode an extracted cifar-10-batches-py/ folder."""
    def read(name: str) -> bytes:
        file = path / name
        if not file.is_file():
            raise DataError(f"{path} lacks {name}: not an extracted {CIFAR10_DIR}/ folder")
        return file.read_bytes()
    return _read_cifar_members(read, str(path))


def load_cifar10(data_dir: str | None, download: bool = True, progress: bool = True) -> Dataset:
    """The official python archive: --data-dir at the tar.gz, the extracted folder, or its
    parent; without --data-dir, the copy in the cache (downloaded when missing)."""
    if data_dir is not None:
        path = Path(data_dir)
        if path.is_file():
            return cached("cifar10", stat_fingerprint([path]), lambda: read_cifar10_archive(path))
        for candidate in (path, path / CIFAR10_DIR):
            if (candidate / "batches.meta").is_file():
                names = (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH, "batches.meta")
                files = [candidate / n for n in names if (candidate / n).is_file()]
                return cached("cifar10", stat_fingerprint(files),
                              functools.partial(read_cifar10_dir, candidate))
        if (path / CIFAR10_ARCHIVE).is_file():
            archive = path / CIFAR10_ARCHIVE
            return cached("cifar10", stat_fingerprint([archive]),
                          lambda: read_cifar10_archive(archive))
        raise DataError(f"{path} holds neither {CIFAR10_ARCHIVE} nor {CIFAR10_DIR}/ "
                        f"(batches.meta, data_batch_1..5, test_batch)")
    archive = fetch_cifar10(download=download, progress=progress)
    return cached("cifar10", stat_fingerprint([archive]), lambda: read_cifar10_archive(archive))


def cifar10_cache_path() -> Path:
    """Where `cnncompare data fetch` keeps the official archive."""
    return home() / "cifar10" / CIFAR10_ARCHIVE


def md5sum(path: Path) -> str:
    """Hex md5 of a file, read in 1 MiB chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_cifar10(download: bool = True, progress: bool = True, url: str = CIFAR10_URL,
                  md5: str = CIFAR10_MD5) -> Path:
    """The official archive in the cache, downloading it (with md5 check) if needed.

    Args:
        download: fetch it when it is not cached; False raises DataError instead.
        progress: show a progress bar while downloading.
        url, md5: where to fetch it and the checksum it must have.

    Returns:
        The path of the cached archive. A failed or corrupt download leaves nothing behind.
    """
    target = cifar10_cache_path()
    if target.is_file():
        return target
    if not download:
        raise DataError(offline_message(target, "downloading is off"))
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=30) as response, open(partial, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            _copy_with_progress(response, out, total, f"downloading {url}", progress)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        partial.unlink(missing_ok=True)
        raise DataError(offline_message(target, f"the download failed: {exc}")) from None
    got = md5sum(partial)
    if got != md5:
        partial.unlink(missing_ok=True)
        raise DataError(f"the download from {url} has md5 {got}, expected {md5}: try again, "
                        f"or fetch it by other means and pass --data-dir")
    os.replace(partial, target)
    return target


def _copy_with_progress(src: BinaryIO, dst: BinaryIO, total: int | None, label: str,
                        show: bool) -> None:
    """Copy `src` to `dst` in 1 MiB chunks behind a transient rich progress bar."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), disable=not show, transient=True) as bar:
        task = bar.add_task(label, total=total)
        for chunk in iter(lambda: src.read(1 << 20), b""):
            dst.write(chunk)
            bar.update(task, advance=len(chunk))


def offline_message(target: Path, why: str) -> str:
    """Why CIFAR-10 is not at hand, and every way to get a dataset without the network."""
    return (f"CIFAR-10 is not cached at {target} and {why}. Ways out: copy the official "
            f"{CIFAR10_ARCHIVE} there (or run `cnncompare data fetch` where there is internet); "
            f"pass --data-dir at the tar.gz or the extracted {CIFAR10_DIR}/; use --dataset folder "
            f"--data-dir DIR with train/<class>/ images; --dataset tfds or torchvision if their "
            f"caches hold CIFAR-10; or --dataset synthetic to try the tool without data")
