"""The Dataset every source returns, and the checks its arrays must pass."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compare.errors import DataError

IMAGE_SHAPE = (32, 32, 3)  # height, width, channels every source delivers


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
        counts = np.bincount(self.train_y, minlength=len(self.classes)).tolist()
        return {"source": self.source, "origin": self.origin, "cache_path": self.cache_path,
                "train_size": int(len(self.train_y)), "test_size": int(len(self.test_y)),
                "image_shape": list(self.train_x.shape[1:]), "classes": list(self.classes),
                "num_classes": len(self.classes), "train_class_counts": counts,
                "mean": [round(float(v), 6) for v in self.mean],
                "std": [round(float(v), 6) for v in self.std], "notes": list(self.notes)}


def check_arrays(x: np.ndarray, y: np.ndarray, num_classes: int, what: str) -> None:
    """Shapes, dtypes and label range; DataError naming `what` otherwise."""
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != IMAGE_SHAPE:
        raise DataError(f"{what}: images must be uint8 of shape (N, 32, 32, 3), "
                        f"got {x.dtype} {x.shape}")
    if y.shape != (x.shape[0],):
        raise DataError(f"{what}: {x.shape[0]} images but {y.shape[0] if y.ndim else 0} labels")
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise DataError(f"{what}: labels must lie in 0..{num_classes - 1}, "
                        f"found {int(y.min())}..{int(y.max())}")
    if len(y) == 0:
        raise DataError(f"{what}: no images")
