"""The shared data plan: which images each step sees, and how each one is augmented.

For every epoch, one seeded permutation of the training set and, per sample, a random
crop offset (after zero padding) and a horizontal-flip bit are drawn here in numpy. The
tf.data pipeline and the PyTorch DataLoader both consume this plan, so step k of epoch e
sees the same images, augmented the same way, in both frameworks.

`augment_batch` and `normalise` are the reference implementation in numpy; each
framework re-implements them with its own ops and a test checks they agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PLAN_STREAM = 0xDA7A  # separate from the initial weights' stream


@dataclass(frozen=True)
class EpochPlan:
    """Per step and sample: image index, crop offset (dy, dx) and flip bit."""

    indices: np.ndarray  # (steps, batch) int64 index into the training arrays
    offsets: np.ndarray  # (steps, batch, 2) int32 top-left corner in the padded image
    flips: np.ndarray  # (steps, batch) bool, True = mirror left-right

    @property
    def steps(self) -> int:
        return self.indices.shape[0]

    def keys(self) -> np.ndarray:
        """(4, steps * batch) int64 rows of image index, dy, dx and flip bit, in step order:
        the layout both frameworks' pipelines consume (one array, no per-sample objects)."""
        return np.stack([self.indices.reshape(-1), self.offsets[..., 0].reshape(-1),
                         self.offsets[..., 1].reshape(-1), self.flips.reshape(-1)]).astype(np.int64)


def steps_per_epoch(train_size: int, batch_size: int) -> int:
    """Optimizer steps per epoch: the last partial batch is dropped (equal steps in both)."""
    return train_size // batch_size


def process_share(batch_size: int, processes: int, rank: int) -> slice:
    """Which images of each global batch process `rank` of `processes` loads: equal,
    consecutive slices in rank order (check_split makes batch_size divide evenly)."""
    share = batch_size // processes
    return slice(rank * share, (rank + 1) * share)


def augmentation_note(augment: bool, how: str) -> str:
    """The manifest's augmentation entry: `how` the framework applies the shared plan."""
    return f"shared plan: zero-pad crop + flip as {how}" if augment else \
        "none (the plan's crop is the identity)"


def epoch_plan(train_size: int, batch_size: int, epoch: int, seed: int,
               augment: bool = True, padding: int = 4) -> EpochPlan:
    """The plan for `epoch` (0-based); the last partial batch is dropped."""
    rng = np.random.default_rng([PLAN_STREAM, seed, epoch])
    steps = steps_per_epoch(train_size, batch_size)
    order = rng.permutation(train_size)[: steps * batch_size].reshape(steps, batch_size)
    if augment and padding > 0:
        offsets = rng.integers(0, 2 * padding + 1, size=(steps, batch_size, 2), dtype=np.int32)
        flips = rng.integers(0, 2, size=(steps, batch_size)).astype(bool)
    else:
        offsets = np.full((steps, batch_size, 2), padding, np.int32)  # centre crop = identity
        flips = np.zeros((steps, batch_size), bool)
    return EpochPlan(order.astype(np.int64), offsets, flips)


def test_keys(test_size: int, padding: int) -> np.ndarray:
    """The test set's keys, in order, uncropped and unflipped: (4, N) int64 rows of image
    index, dy, dx and flip bit, the layout both frameworks' pipelines consume."""
    keys = np.zeros((4, test_size), np.int64)
    keys[0] = np.arange(test_size)
    keys[1:3] = padding  # the centre crop of the padded image is the image itself
    return keys


def augment_batch(images: np.ndarray, indices: np.ndarray, dy: np.ndarray, dx: np.ndarray,
                  flips: np.ndarray, padding: int) -> np.ndarray:
    """Reference: gather, zero-pad, crop at (dy, dx) and flip; uint8 NHWC in, uint8 NHWC out."""
    batch = images[indices]
    n, h, w, _ = batch.shape
    padded = np.pad(batch, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    rows = dy[:, None] + np.arange(h)[None, :]
    cols = np.where(flips[:, None], np.arange(w - 1, -1, -1)[None, :], np.arange(w)[None, :])
    cols = dx[:, None] + cols
    return padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]


def normalise(batch: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Reference: uint8 NHWC -> float32 (x - 255 mean) / (255 std), per channel.

    Both frameworks compute exactly this, in float32, in this order, so the results are
    bit-identical (one subtraction and one division, each correctly rounded).
    """
    mean255, std255 = scaled_stats(mean, std)
    return (batch.astype(np.float32) - mean255) / std255


def scaled_stats(mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Channel statistics on the 0..255 scale, in float32."""
    return (np.asarray(mean, np.float32) * np.float32(255.0),
            np.asarray(std, np.float32) * np.float32(255.0))
