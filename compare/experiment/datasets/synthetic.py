"""Generated, learnable, deterministic images: try the tool without any data."""

from __future__ import annotations

import numpy as np

from compare.errors import DataError
from compare.experiment.datasets.cache import cached
from compare.experiment.datasets.dataset import Dataset

SYNTHETIC_CLASSES = ("disc", "square", "ring", "cross", "diamond", "triangle", "hbars", "vbars",
                     "checker", "diagonal")
# One base colour per class (RGB 0..255); colours are jittered so shape matters too.
_SYNTHETIC_COLOURS = np.array([[230, 60, 60], [60, 200, 60], [70, 90, 230], [230, 200, 50],
                               [200, 70, 200], [60, 210, 210], [240, 140, 40], [140, 80, 40],
                               [200, 200, 200], [120, 160, 90]], dtype=np.float32)


def synthetic(train_size: int, test_size: int, seed: int = 0) -> Dataset:
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

    return cached("synthetic", f"{train_size}:{test_size}:{seed}", build)


def _synthetic_split(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` images of random classes, drawn from `rng`."""
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
