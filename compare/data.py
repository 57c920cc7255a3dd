"""Framework-neutral data layer: every source returns uint8 NHWC images, int64 labels, class names.

Sources: `cifar10` (the official python archive), `tfds`, `torchvision`, `folder`
(train/<class>/*, test/<class>/*) and `synthetic` (generated, learnable, deterministic).
Decoded arrays are cached as .npz under $CNNCOMPARE_HOME (default ~/.cache/cnncompare),
keyed by source and a fingerprint of the input. Normalisation statistics come from the
training split.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import pickle
import shutil
import tarfile
import urllib.error
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from compare.errors import DataError
from compare.results import write_atomic

log = logging.getLogger("cnncompare.data")

SOURCES = ("cifar10", "tfds", "torchvision", "folder", "synthetic")
IMAGE_SHAPE = (32, 32, 3)  # height, width, channels every source delivers
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
CACHE_FORMAT = 1  # bump when the cached arrays change meaning


@dataclass
class Dataset:
    """Decoded arrays of one dataset, plus where they came from."""

    train_x: np.ndarray  # (N, 32, 32, 3) uint8
    train_y: np.ndarray  # (N,) int64
    test_x: np.ndarray
    test_y: np.ndarray
    classes: tuple[str, ...]
    source: str
    origin: str  # a path, URL or generator description
    cache_path: str | None = None
    notes: list[str] = field(default_factory=list)  # warnings: skipped/resized files

    @functools.cached_property
    def channel_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (mean, std) of the training images on the 0..1 scale, float32."""
        total = np.zeros(3)
        total_sq = np.zeros(3)
        for start in range(0, len(self.train_x), 4096):  # chunks keep memory flat
            chunk = self.train_x[start:start + 4096].astype(np.float64) / 255.0
            total += chunk.sum(axis=(0, 1, 2))
            total_sq += (chunk ** 2).sum(axis=(0, 1, 2))
        count = self.train_x.shape[0] * self.train_x.shape[1] * self.train_x.shape[2]
        mean = total / count
        std = np.sqrt(np.maximum(total_sq / count - mean ** 2, 1e-12))
        return mean.astype(np.float32), std.astype(np.float32)

    @property
    def mean(self) -> np.ndarray:
        return self.channel_stats[0]

    @property
    def std(self) -> np.ndarray:
        return self.channel_stats[1]

    def info(self) -> dict[str, Any]:
        return {"source": self.source, "origin": self.origin, "cache_path": self.cache_path,
                "train_size": int(len(self.train_y)), "test_size": int(len(self.test_y)),
                "image_shape": list(self.train_x.shape[1:]), "classes": list(self.classes),
                "num_classes": len(self.classes),
                "train_class_counts": np.bincount(self.train_y, minlength=len(self.classes)).tolist(),
                "mean": [round(float(v), 6) for v in self.mean],
                "std": [round(float(v), 6) for v in self.std], "notes": list(self.notes)}


def home() -> Path:
    """The cache root: $CNNCOMPARE_HOME or ~/.cache/cnncompare."""
    return Path(os.environ.get("CNNCOMPARE_HOME", Path.home() / ".cache" / "cnncompare"))


# --------------------------------------------------------------------------- entry point

def load(source: str, data_dir: str | None = None, *, seed: int = 0,
         synthetic_train_size: int = 10_000, synthetic_test_size: int = 2_000,
         validation_fraction: float = 0.1, download: bool = True,
         progress: bool = True) -> Dataset:
    """Load `source`, from the cache when it is there. Raises DataError with what to do."""
    if source not in SOURCES:
        raise DataError(f"unknown dataset {source!r}; choose one of {', '.join(SOURCES)}")
    if data_dir is not None and source in ("cifar10", "folder") and not Path(data_dir).exists():
        raise DataError(f"--data-dir {data_dir} does not exist")
    if source == "synthetic":
        return synthetic(synthetic_train_size, synthetic_test_size, seed=seed)
    if source == "cifar10":
        return load_cifar10(data_dir, download=download, progress=progress)
    if source == "folder":
        if data_dir is None:
            raise DataError("--dataset folder needs --data-dir DIR holding train/<class>/ "
                            "(and optionally test/<class>/) images")
        return load_folder(data_dir, seed=seed, validation_fraction=validation_fraction)
    if source == "tfds":
        return load_tfds(data_dir, download=download)
    return load_torchvision(data_dir, download=download)


def config_dataset(config) -> Dataset:
    """The dataset a RunConfig names. The dataset itself (synthetic images, a folder's
    held-out split) does not depend on the run's seed: seeds vary initial weights and the
    data plan, never the data."""
    return load(config.dataset, config.data_dir,
                synthetic_train_size=config.synthetic_train_size,
                synthetic_test_size=config.synthetic_test_size,
                validation_fraction=config.validation_fraction, progress=not config.quiet)


# --------------------------------------------------------------------------- cache

def _cached(source: str, fingerprint: str, build: Callable[[], Dataset]) -> Dataset:
    """Return the cached arrays for (source, fingerprint), building and saving them on a miss."""
    key = hashlib.sha256(f"{CACHE_FORMAT}:{source}:{fingerprint}".encode()).hexdigest()[:16]
    path = home() / "arrays" / f"{source}-{key}.npz"
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as z:
                return Dataset(z["train_x"], z["train_y"], z["test_x"], z["test_y"],
                               tuple(str(c) for c in z["classes"]), source, str(z["origin"]),
                               str(path), [str(n) for n in z["notes"]])
        except (OSError, ValueError, KeyError):
            log.warning("cache %s is unreadable; rebuilding it", path)
    dataset = build()
    try:
        write_atomic(path, lambda f: np.savez(
            f, train_x=dataset.train_x, train_y=dataset.train_y, test_x=dataset.test_x,
            test_y=dataset.test_y, classes=np.array(dataset.classes), origin=np.array(dataset.origin),
            notes=np.array(dataset.notes, dtype=str)), mode="wb")
        dataset.cache_path = str(path)
    except OSError as exc:  # a read-only home still lets the run go on
        log.warning("could not write the cache %s: %s", path, exc)
    return dataset


def _stat_fingerprint(paths: list[Path]) -> str:
    """Cheap fingerprint of files: names, sizes and modification times."""
    digest = hashlib.sha256()
    for p in sorted(paths):
        st = p.stat()
        digest.update(f"{p}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def check_arrays(x: np.ndarray, y: np.ndarray, num_classes: int, what: str) -> None:
    """Shapes, dtypes and label range; DataError naming `what` otherwise."""
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != IMAGE_SHAPE:
        raise DataError(f"{what}: images must be uint8 of shape (N, 32, 32, 3), got {x.dtype} {x.shape}")
    if y.shape != (x.shape[0],):
        raise DataError(f"{what}: {x.shape[0]} images but {y.shape[0] if y.ndim else 0} labels")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise DataError(f"{what}: labels must lie in 0..{num_classes - 1}, found {int(y.min())}..{int(y.max())}")
    if len(y) == 0:
        raise DataError(f"{what}: no images")


# --------------------------------------------------------------------------- cifar10

class _ArrayUnpickler(pickle.Unpickler):
    """Unpickle the official batches, allowing numpy arrays and nothing executable."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _unpickle(raw: bytes, what: str) -> dict:
    try:
        obj = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:  # any malformed pickle
        raise DataError(f"{what} is not a CIFAR-10 python batch ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{what} is not a CIFAR-10 python batch (a {type(obj).__name__}, not a dict)")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _batch_arrays(batch: dict, what: str) -> tuple[np.ndarray, np.ndarray]:
    if "data" not in batch or "labels" not in batch:
        raise DataError(f"{what} lacks 'data' or 'labels'; is this the python version of CIFAR-10?")
    data = np.asarray(batch["data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(f"{what}: data must be uint8 (N, 3072), got {data.dtype} {data.shape}")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # R, G, B planes -> NHWC
    return np.ascontiguousarray(images), np.asarray(batch["labels"], dtype=np.int64)


def _read_cifar_members(read: Callable[[str], bytes], origin: str) -> Dataset:
    meta = _unpickle(read("batches.meta"), f"{origin}: batches.meta")
    classes = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in meta.get("label_names", []))
    if not classes:
        raise DataError(f"{origin}: batches.meta has no label_names")
    parts = [_batch_arrays(_unpickle(read(name), f"{origin}: {name}"), f"{origin}: {name}")
             for name in CIFAR10_TRAIN_BATCHES]
    train_x = np.concatenate([p[0] for p in parts])
    train_y = np.concatenate([p[1] for p in parts])
    test_x, test_y = _batch_arrays(_unpickle(read(CIFAR10_TEST_BATCH), f"{origin}: test_batch"),
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
                    raise DataError(f"{path} lacks {CIFAR10_DIR}/{name}: not the CIFAR-10 python archive, "
                                    f"or a partial download (delete it and fetch again)")
                return tar.extractfile(members[name]).read()

            return _read_cifar_members(read, str(path))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DataError(f"{path} is corrupt or truncated ({exc}); delete it and run "
                        f"`cnncompare data fetch`, or point --data-dir at a good copy") from None


def read_cifar10_dir(path: Path) -> Dataset:
    def read(name: str) -> bytes:
        file = path / name
        if not file.is_file():
            raise DataError(f"{path} lacks {name}: not an extracted {CIFAR10_DIR}/ folder")
        return file.read_bytes()
    return _read_cifar_members(read, str(path))


def load_cifar10(data_dir: str | None, download: bool = True, progress: bool = True) -> Dataset:
    """The official python archive: --data-dir at the tar.gz, the extracted folder, or its parent."""
    if data_dir is not None:
        path = Path(data_dir)
        if path.is_file():
            return _cached("cifar10", _stat_fingerprint([path]), lambda: read_cifar10_archive(path))
        for candidate in (path, path / CIFAR10_DIR):
            if (candidate / "batches.meta").is_file():
                files = [candidate / n for n in (*CIFAR10_TRAIN_BATCHES, CIFAR10_TEST_BATCH, "batches.meta")
                         if (candidate / n).is_file()]
                return _cached("cifar10", _stat_fingerprint(files), lambda c=candidate: read_cifar10_dir(c))
        if (path / CIFAR10_ARCHIVE).is_file():
            archive = path / CIFAR10_ARCHIVE
            return _cached("cifar10", _stat_fingerprint([archive]), lambda: read_cifar10_archive(archive))
        raise DataError(f"{path} holds neither {CIFAR10_ARCHIVE} nor {CIFAR10_DIR}/ (batches.meta, "
                        f"data_batch_1..5, test_batch)")
    archive = fetch_cifar10(download=download, progress=progress)
    return _cached("cifar10", _stat_fingerprint([archive]), lambda: read_cifar10_archive(archive))


def cifar10_cache_path() -> Path:
    return home() / "cifar10" / CIFAR10_ARCHIVE


def md5sum(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_cifar10(download: bool = True, progress: bool = True, url: str = CIFAR10_URL,
                  md5: str = CIFAR10_MD5) -> Path:
    """The official archive in the cache, downloading it (with md5 check) if needed."""
    target = cifar10_cache_path()
    if target.is_file():
        return target
    if not download:
        raise DataError(_offline_message(target, "downloading is off"))
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=30) as response, open(partial, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            _copy_with_progress(response, out, total, f"downloading {url}", progress)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        partial.unlink(missing_ok=True)
        raise DataError(_offline_message(target, f"the download failed: {exc}")) from None
    got = md5sum(partial)
    if got != md5:
        partial.unlink(missing_ok=True)
        raise DataError(f"the download from {url} has md5 {got}, expected {md5}: try again, or "
                        f"fetch it by other means and pass --data-dir")
    os.replace(partial, target)
    return target


def _copy_with_progress(src, dst, total: int | None, label: str, show: bool) -> None:
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn,
                               TransferSpeedColumn)
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), disable=not show, transient=True) as bar:
        task = bar.add_task(label, total=total)
        for chunk in iter(lambda: src.read(1 << 20), b""):
            dst.write(chunk)
            bar.update(task, advance=len(chunk))


def _offline_message(target: Path, why: str) -> str:
    return (f"CIFAR-10 is not cached at {target} and {why}. Ways out: copy the official "
            f"{CIFAR10_ARCHIVE} there (or run `cnncompare data fetch` where there is internet); "
            f"pass --data-dir at the tar.gz or the extracted {CIFAR10_DIR}/; use --dataset folder "
            f"--data-dir DIR with train/<class>/ images; --dataset tfds or torchvision if their "
            f"caches hold CIFAR-10; or --dataset synthetic to try the tool without data")


# --------------------------------------------------------------------------- folder

def _decode_image(path: Path) -> tuple[np.ndarray | None, str | None]:
    """(image, None), or (None, why) for a file that is not a readable image."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as img:
            img.load()
            resized = img.size != IMAGE_SHAPE[1::-1]
            rgb = img.convert("RGB")  # grayscale, palette and RGBA become RGB
            if resized:
                rgb = rgb.resize(IMAGE_SHAPE[1::-1], Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8), ("resized" if resized else None)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        return None, f"unreadable ({exc.__class__.__name__})"


def _list_split(root: Path, classes: tuple[str, ...] | None) -> tuple[tuple[str, ...], list[tuple[Path, int]]]:
    found = tuple(sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")))
    if classes is None:
        classes = found
    unknown = set(found) - set(classes)
    if unknown:
        raise DataError(f"{root} has classes not in train/: {', '.join(sorted(unknown))}")
    files = []
    for label, name in enumerate(classes):
        folder = root / name
        entries = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")) \
            if folder.is_dir() else []
        if not entries and root.name == "train":
            raise DataError(f"class folder {folder} is empty: every class needs training images "
                            f"(remove the folder to drop the class)")
        files.extend((p, label) for p in entries)
    return classes, files


def _decode_split(files: list[tuple[Path, int]], notes: list[str], what: str) -> tuple[np.ndarray, np.ndarray]:
    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
        decoded = list(pool.map(lambda item: _decode_image(item[0]), files, chunksize=256))
    images, labels, skipped, resized = [], [], [], 0
    for (path, label), (image, why) in zip(files, decoded):
        if image is None:
            skipped.append(path.name)
            continue
        resized += why == "resized"
        images.append(image)
        labels.append(label)
    if skipped:
        notes.append(f"{what}: skipped {len(skipped)} file(s) that are not readable images "
                     f"(e.g. {', '.join(skipped[:3])})")
    if resized:
        notes.append(f"{what}: resized {resized} image(s) to 32x32")
    if not images:
        raise DataError(f"{what}: no readable images")
    return np.stack(images), np.asarray(labels, dtype=np.int64)


def load_folder(data_dir: str, seed: int = 0, validation_fraction: float = 0.1) -> Dataset:
    """train/<class>/* and test/<class>/* images (PNG/JPEG...); no test/: a seeded split.

    Non-image or broken files are skipped and counted in the dataset's notes; images of
    other sizes are resized to 32x32; grayscale/RGBA become RGB.
    """
    root = Path(data_dir)
    train_root, test_root = root / "train", root / "test"
    if not train_root.is_dir():
        raise DataError(f"{root} has no train/ folder: expected train/<class>/*.png|jpg "
                        f"(and optionally test/<class>/)")
    classes, train_files = _list_split(train_root, None)
    if not classes:
        raise DataError(f"{train_root} has no class folders")
    test_files = _list_split(test_root, classes)[1] if test_root.is_dir() else []
    all_paths = [p for p, _ in train_files + test_files]
    fingerprint = _stat_fingerprint(all_paths) + f":{seed}:{validation_fraction}"

    def build() -> Dataset:
        notes: list[str] = []
        train_x, train_y = _decode_split(train_files, notes, "train")
        if test_files:
            test_x, test_y = _decode_split(test_files, notes, "test")
        else:
            order = np.random.default_rng(seed).permutation(len(train_y))
            n_val = max(1, int(round(validation_fraction * len(order))))
            val, keep = np.sort(order[:n_val]), np.sort(order[n_val:])
            test_x, test_y, train_x, train_y = train_x[val], train_y[val], train_x[keep], train_y[keep]
            notes.append(f"no test/ folder: held out {n_val} training images (seed {seed}) as the test set")
        check_arrays(train_x, train_y, len(classes), f"{root} (train)")
        check_arrays(test_x, test_y, len(classes), f"{root} (test)")
        return Dataset(train_x, train_y, test_x, test_y, classes, "folder", str(root), notes=notes)

    return _cached("folder", fingerprint, build)


# --------------------------------------------------------------------------- tfds / torchvision

def load_tfds(data_dir: str | None, download: bool = True) -> Dataset:
    """CIFAR-10 through tensorflow-datasets and its cache (data_dir or $CNNCOMPARE_HOME/tfds)."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError("--dataset tfds needs tensorflow-datasets: pip install tensorflow-datasets") from None
    root = Path(data_dir) if data_dir else home() / "tfds"
    try:
        splits = tfds.load("cifar10", split=["train", "test"], as_supervised=True,
                           data_dir=str(root), download=download)
        (train_x, train_y), (test_x, test_y) = (_tfds_arrays(tfds, split) for split in splits)
    except Exception as exc:  # tfds raises many types for missing data / no network
        raise DataError(f"tensorflow-datasets could not load cifar10 from {root} ({exc.__class__.__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}). "
                        + _offline_message(cifar10_cache_path(), "tfds had no copy")) from None
    train_x, test_x = np.asarray(train_x, np.uint8), np.asarray(test_x, np.uint8)
    train_y, test_y = np.asarray(train_y, np.int64), np.asarray(test_y, np.int64)
    check_arrays(train_x, train_y, 10, "tfds cifar10 (train)")
    check_arrays(test_x, test_y, 10, "tfds cifar10 (test)")
    return Dataset(train_x, train_y, test_x, test_y, CIFAR10_CLASSES, "tfds", str(root))


def _tfds_arrays(tfds, split) -> tuple[np.ndarray, np.ndarray]:
    """A tfds split as arrays, in batches (batch_size=-1 builds one tensor of the whole split)."""
    images, labels = [], []
    for x, y in tfds.as_numpy(split.batch(4096)):
        images.append(x)
        labels.append(y)
    return np.concatenate(images), np.concatenate(labels)


def load_torchvision(data_dir: str | None, download: bool = True) -> Dataset:
    """CIFAR-10 through torchvision.datasets.CIFAR10 and its root (data_dir or $CNNCOMPARE_HOME/torchvision)."""
    try:
        from torchvision.datasets import CIFAR10
    except ImportError:
        raise DataError("--dataset torchvision needs torchvision: pip install torchvision") from None
    root = Path(data_dir) if data_dir else home() / "torchvision"
    try:
        train = CIFAR10(str(root), train=True, download=download)
        test = CIFAR10(str(root), train=False, download=False)
    except Exception as exc:  # RuntimeError for missing/corrupt data, URLError offline
        raise DataError(f"torchvision could not load CIFAR-10 from {root} ({exc.__class__.__name__}: {exc}). "
                        + _offline_message(cifar10_cache_path(), "torchvision had no copy")) from None
    train_y, test_y = np.asarray(train.targets, np.int64), np.asarray(test.targets, np.int64)
    check_arrays(train.data, train_y, len(train.classes), "torchvision CIFAR10 (train)")
    check_arrays(test.data, test_y, len(train.classes), "torchvision CIFAR10 (test)")
    return Dataset(train.data, train_y, test.data, test_y, tuple(train.classes), "torchvision", str(root))


# --------------------------------------------------------------------------- synthetic

SYNTHETIC_CLASSES = ("disc", "square", "ring", "cross", "diamond", "triangle", "hbars", "vbars",
                     "checker", "diagonal")
# One base colour per class (RGB 0..255); colours are jittered so shape matters too.
_SYNTHETIC_COLOURS = np.array([[230, 60, 60], [60, 200, 60], [70, 90, 230], [230, 200, 50],
                               [200, 70, 200], [60, 210, 210], [240, 140, 40], [140, 80, 40],
                               [200, 200, 200], [120, 160, 90]], dtype=np.float32)


def synthetic(train_size: int = 10_000, test_size: int = 2_000, seed: int = 0) -> Dataset:
    """Generated 32x32 images: a class-specific shape in a jittered class colour, random
    position and size, on a noisy random background. Deterministic for (sizes, seed) and
    learnable: a small CNN gets well above the 10% chance level. Not CIFAR-10."""
    if train_size < 1 or test_size < 1:
        raise DataError("synthetic dataset sizes must be at least 1")

    def build() -> Dataset:
        rng = np.random.default_rng([0x5EED, seed])
        train_x, train_y = _synthetic_split(rng, train_size)
        test_x, test_y = _synthetic_split(rng, test_size)
        return Dataset(train_x, train_y, test_x, test_y, SYNTHETIC_CLASSES, "synthetic",
                       f"generated: {train_size} train / {test_size} test images, seed {seed}")

    return _cached("synthetic", f"{train_size}:{test_size}:{seed}", build)


def _synthetic_split(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, len(SYNTHETIC_CLASSES), size=n).astype(np.int64)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    cy = rng.uniform(10, 22, size=(n, 1, 1)).astype(np.float32)
    cx = rng.uniform(10, 22, size=(n, 1, 1)).astype(np.float32)
    r = rng.uniform(5, 9, size=(n, 1, 1)).astype(np.float32)
    dy, dx = yy[None] - cy, xx[None] - cx
    inside = (np.abs(dy) < r) & (np.abs(dx) < r)
    dist = np.sqrt(dy ** 2 + dx ** 2)
    masks = np.stack([
        dist < r,                                                   # disc
        inside,                                                     # square
        np.abs(dist - r) < 1.6,                                     # ring
        inside & ((np.abs(dy) < 1.6) | (np.abs(dx) < 1.6)),         # cross
        np.abs(dy) + np.abs(dx) < r,                                # diamond
        inside & (np.abs(dx) < (dy + r) / 2),                       # triangle
        inside & ((yy[None].astype(int) // 3) % 2 == 0),            # horizontal bars
        inside & ((xx[None].astype(int) // 3) % 2 == 0),            # vertical bars
        inside & (((yy[None].astype(int) // 4) + (xx[None].astype(int) // 4)) % 2 == 0),  # checker
        inside & (np.abs(dy - dx) < 2.5),                           # diagonal
    ])
    mask = masks[labels, np.arange(n)][..., None]  # (n, 32, 32, 1)
    colour = _SYNTHETIC_COLOURS[labels] + rng.normal(0, 35, size=(n, 3)).astype(np.float32)
    background = rng.uniform(0, 255, size=(n, 1, 1, 3)).astype(np.float32) * 0.5
    image = np.where(mask, colour[:, None, None, :], background)
    image += rng.normal(0, 20, size=image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8), labels


# --------------------------------------------------------------------------- info

def describe_cache() -> dict[str, Any]:
    root = home()
    entries = []
    if root.exists():
        for p in sorted(root.rglob("*")):
            if p.is_file():
                entries.append({"path": str(p), "bytes": p.stat().st_size})
    return {"root": str(root), "files": entries, "bytes": sum(e["bytes"] for e in entries)}


def clear_cache() -> None:
    shutil.rmtree(home() / "arrays", ignore_errors=True)
