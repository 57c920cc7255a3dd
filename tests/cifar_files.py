"""CIFAR-10's files as the official python archive holds them, and images in folders, written
from arrays for the data tests (the fixtures in conftest.py write them)."""

from __future__ import annotations

import io
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def make_cifar_arrays(per_batch: int = 20, seed: int = 0):
    """Random images and labels for 5 training batches and a test batch."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(6):
        images = rng.integers(0, 256, size=(per_batch, 32, 32, 3), dtype=np.uint8)
        labels = rng.integers(0, 10, size=per_batch).tolist()
        batches.append((images, labels))
    return batches


class Py2Str(bytes):
    """A Python 2 `str`: pickled with the (SHORT_)BINSTRING opcode, as the official archive's
    keys are, so it loads as bytes with encoding='bytes' and as str with encoding='latin1'."""


class Py2Pickler(pickle._Pickler):
    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2str(self, obj):
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + bytes(obj))
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + bytes(obj))
        self.memoize(obj)

    dispatch[Py2Str] = save_py2str


def py2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def _pickled_batch(images: np.ndarray, labels: list[int], name: str) -> bytes:
    """A batch exactly as the official python archive stores it (Python 2 str keys, RGB planes)."""
    rows = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
    return py2_pickle({Py2Str(b"batch_label"): Py2Str(name.encode()), Py2Str(b"labels"): labels,
                       Py2Str(b"data"): rows,
                       Py2Str(b"filenames"): [Py2Str(f"{i}.png".encode())
                                              for i in range(len(labels))]})


def write_cifar_dir(root: Path, batches, labels_override: dict | None = None) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name, (images, labels) in zip(names, batches):
        if labels_override and name in labels_override:
            labels = labels_override[name]
        (folder / name).write_bytes(_pickled_batch(images, labels, name))
    (folder / "batches.meta").write_bytes(py2_pickle(
        {Py2Str(b"num_cases_per_batch"): len(batches[0][1]),
         Py2Str(b"label_names"): [Py2Str(c.encode()) for c in CLASSES], Py2Str(b"num_vis"): 3072}))
    return folder


def write_cifar_archive(root: Path, batches) -> Path:
    folder = write_cifar_dir(root / "src", batches)
    archive = root / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    return archive


def write_image(path: Path, array: np.ndarray, fmt: str = "PNG") -> None:
    from PIL import Image
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, format=fmt)
