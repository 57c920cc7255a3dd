"""The shared data plan: which images each step sees, and how each one is augmented.

For every epoch, one seeded permutation of the training set and, per sample, a random
crop offset (after zero padding), a horizontal-flip bit and, with cutout, the corner of the
square set to the mean colour are drawn here in numpy. The
tf.data pipeline and the PyTorch DataLoader both consume this plan, so step k of epoch e
sees the same images, augmented the same way, in both frameworks.

`augment_batch`, `normalise` and `cut_out` are the reference implementation in numpy; each
framework re-implements them with its own ops and a test checks they agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only
    from compare.experiment.config import RunConfig

PLAN_STREAM = 0xDA7A  # separate from the initial weights' stream
# Rows of the keys both pipelines consume: image index, crop offset dy and dx, flip bit, and
# the cutout square's top-left corner (row, column).
KEY_ROWS = 6


@dataclass(frozen=True)
class EpochPlan:
    """Per step and sample: image index, crop offset (dy, dx), flip bit and cutout corner."""

    indices: np.ndarray  # (steps, batch) int64 index into the training arrays
    offsets: np.ndarray  # (steps, batch, 2) int32 top-left corner in the padded image
    flips: np.ndarray  # (steps, batch) bool, True = mirror left-right
    # (steps, batch, 2) int32 top-left corner of the cutout square in the cropped image
    # (zeros without cutout, where the square is empty)
    cutouts: np.ndarray

    @property
    def steps(self) -> int:
        return self.indices.shape[0]

    def keys(self) -> np.ndarray:
        """(KEY_ROWS, steps * batch) int64 rows of image index, dy, dx, flip bit and cutout
        corner, in step order: the layout both frameworks' pipelines consume (one array, no
        per-sample objects)."""
        return np.stack([self.indices.ravel(), self.offsets[..., 0].ravel(),
                         self.offsets[..., 1].ravel(), self.flips.ravel(),
                         self.cutouts[..., 0].ravel(),
                         self.cutouts[..., 1].ravel()]).astype(np.int64)


class FlowingEpochs:
    """A training pipeline whose one iterator runs from each epoch into the next, as a
    repeated tf.data dataset does, so its prefetch loads the next epoch's first batches while
    the loop evaluates. epoch() continues the iterator where the previous epoch was taken
    whole; otherwise (the first epoch, a resumed one, one after an epoch left part-way) it
    starts a new one there. Both frameworks' TrainBatches keep one."""

    def __init__(self, steps_per_epoch: int, end: int):
        self.steps_per_epoch = steps_per_epoch
        self.end = end  # the epochs the iterators hold: 0 .. end - 1
        self.iterator: Iterator[Any] | None = None
        self.continues_at: int | None = None  # the epoch the iterator is at the start of

    def epoch(self, epoch: int, start: Callable[[int, int], Iterator[Any]]) -> EpochBatches:
        """Epoch `epoch`'s batches; `start(first, end)` makes an iterator over epochs first ..
        end - 1 when the current one cannot go on."""
        if self.iterator is None or epoch != self.continues_at:
            self.iterator = start(epoch, max(epoch + 1, self.end))
        self.continues_at = None
        return EpochBatches(self, epoch)


class EpochBatches:
    """One epoch's batches from a FlowingEpochs iterator, taken either by Python iteration
    (a next() per batch) or by the framework itself from `iterator` (TensorFlow's
    tf.function, which then reports what it took)."""

    def __init__(self, flow: FlowingEpochs, epoch: int):
        self.flow, self.epoch = flow, epoch
        self.iterator = flow.iterator
        self.left = flow.steps_per_epoch  # batches of this epoch not yet taken

    def __iter__(self) -> EpochBatches:
        return self

    def __next__(self) -> Any:
        if not self.left or self.iterator is None:
            raise StopIteration
        batch = next(self.iterator)
        self.took(1)
        return batch

    def check(self, count: int) -> None:
        """`count` more batches may be taken: the epoch holds them."""
        if count > self.left:
            raise ValueError(f"{count} batches asked for, {self.left} left in the epoch")

    def took(self, count: int) -> None:
        """`count` batches were taken from `iterator`."""
        self.check(count)
        self.left -= count
        if not self.left and self.epoch + 1 < self.flow.end:
            self.flow.continues_at = self.epoch + 1  # taken whole: the next continues


def steps_per_epoch(train_size: int, batch_size: int) -> int:
    """Optimizer steps per epoch: the last partial batch is dropped (equal steps in both)."""
    return train_size // batch_size


def process_share(batch_size: int, processes: int, rank: int) -> slice:
    """Which images of each global batch process `rank` of `processes` loads: equal,
    consecutive slices in rank order (check_split makes batch_size divide evenly)."""
    share = batch_size // processes
    return slice(rank * share, (rank + 1) * share)


def augmentation_note(augment: bool, how: str, cutout: int = 0) -> str:
    """The manifest's augmentation entry: `how` the framework applies the shared plan."""
    if not augment:
        return "none (the plan's crop is the identity)"
    square = f" + {cutout}x{cutout} cutout" if cutout else ""
    return f"shared plan: zero-pad crop + flip{square} as {how}"


def epoch_plan(train_size: int, batch_size: int, epoch: int, seed: int,
               augment: bool = True, padding: int = 4, cutout: int = 0,
               image_size: tuple[int, int] = (32, 32)) -> EpochPlan:
    """The plan for `epoch` (0-based); the last partial batch is dropped. `cutout` > 0
    (pixels, with `augment`) draws each image's square, wholly inside its `image_size`
    (height, width), after the crops and flips, so cutout leaves those draws as they are."""
    rng = np.random.default_rng([PLAN_STREAM, seed, epoch])
    steps = steps_per_epoch(train_size, batch_size)
    order = rng.permutation(train_size)[: steps * batch_size].reshape(steps, batch_size)
    if augment and padding > 0:
        offsets = rng.integers(0, 2 * padding + 1, size=(steps, batch_size, 2), dtype=np.int32)
        flips = rng.integers(0, 2, size=(steps, batch_size)).astype(bool)
    else:
        offsets = np.full((steps, batch_size, 2), padding, np.int32)  # centre crop = identity
        flips = np.zeros((steps, batch_size), bool)
    cutouts = np.zeros((steps, batch_size, 2), np.int32)
    if augment and cutout > 0:
        highest = np.array([image_size[0] - cutout, image_size[1] - cutout])
        if (highest < 0).any():
            raise ValueError(f"a {cutout}-pixel cutout does not fit {image_size[0]}x"
                             f"{image_size[1]} images")
        cutouts = rng.integers(0, highest + 1, size=(steps, batch_size, 2), dtype=np.int32)
    return EpochPlan(order.astype(np.int64), offsets, flips, cutouts)


def run_keys(config: RunConfig, train_size: int, epoch: int,
             image_size: tuple[int, int]) -> np.ndarray:
    """(KEY_ROWS, steps * batch) keys of `epoch` for a RunConfig: its seed, batch and
    augmentation."""
    return epoch_plan(train_size, config.batch_size, epoch, config.seed, config.augment,
                      config.crop_padding, config.cutout, image_size).keys()


def test_keys(test_size: int, padding: int) -> np.ndarray:
    """The test set's keys, in order, uncropped, unflipped and uncut: (KEY_ROWS, N) int64
    rows of image index, dy, dx, flip bit and cutout corner, the layout both frameworks'
    pipelines consume."""
    keys = np.zeros((KEY_ROWS, test_size), np.int64)
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


def cut_out(images: np.ndarray, cy: np.ndarray, cx: np.ndarray, size: int) -> np.ndarray:
    """Reference: a copy of normalised NHWC images with each one's `size` x `size` square at
    (cy, cx) set to 0, the mean colour (DeVries and Taylor's cutout, as the DAWNBench ResNet-9
    recipe applies it after normalisation)."""
    rows = np.arange(images.shape[1])[None, :] - cy[:, None]  # (N, H) offsets from the corner
    cols = np.arange(images.shape[2])[None, :] - cx[:, None]  # (N, W)
    inside = ((rows >= 0) & (rows < size))[:, :, None] & ((cols >= 0) & (cols < size))[:, None, :]
    return np.where(inside[..., None], np.float32(0), images)


def scaled_stats(mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Channel statistics on the 0..255 scale, in float32."""
    return (np.asarray(mean, np.float32) * np.float32(255.0),
            np.asarray(std, np.float32) * np.float32(255.0))
