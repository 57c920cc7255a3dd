"""The Dataset every source returns, and the checks its arrays must pass."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from compare.errors import DataError

IMAGE_SHAPE = (32, 32, 3)  # height, width, channels every source delivers


class DataInfo(TypedDict):
    """A dataset as a run's result records it (result.json's `data`)."""

    source: str
    origin: str
    cache_path: str | None
    train_size: int
    test_size: int
    image_shape: list[int]
    classes: list[str]
    num_classes: int
    train_class_counts: list[int]
    mean: list[float]  # per channel, of the scaled training images
    std: list[float]
    notes: list[str]


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
        """Per-channel (mean, std) of the training images on the 0..1 scale, float32.

        Exact until the last rounding: each channel's 256-bin histogram gives the sums of
        its values and squares as integers, several times faster than float sums over every
        pixel in every framework process)."""
        pixels = self.train_x.reshape(-1, self.train_x.shape[-1])
        count = pixels.shape[0]
        values = np.arange(256, dtype=np.int64)
        mean, std = [], []
        for channel in range(pixels.shape[1]):
            histogram = np.bincount(pixels[:, channel], minlength=256).astype(np.int64)
            total = int(histogram @ values)
            squares = int(histogram @ (values * values))
            # variance x (255 count)^2, exactly: count * sum(v^2) - (sum v)^2
            spread = count * squares - total * total
            mean.append(total / (255 * count))
            std.append(max(math.sqrt(spread) / (255 * count), 1e-6))
        return np.array(mean, np.float32), np.array(std, np.float32)

    @property
    def mean(self) -> np.ndarray:
        return self.channel_stats[0]

    @property
    def std(self) -> np.ndarray:
        return self.channel_stats[1]

    def info(self) -> DataInfo:
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
