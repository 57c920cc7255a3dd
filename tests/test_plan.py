"""The shared data plan (compare.experiment.plan) in numpy alone: the keys both pipelines
consume, each process's share of a batch, the manifest's augmentation words, and the one
iterator that runs from each epoch into the next. tests/test_core.py checks the draws and
the reference augmentation; tests/test_data.py that each framework's pipeline follows them."""

from __future__ import annotations

import numpy as np
import pytest

from compare.experiment import plan
from compare.experiment.config import RunConfig


def test_keys_stack_index_crop_flip_and_cutout_rows_in_step_order():
    p = plan.epoch_plan(50, 8, epoch=3, seed=7, padding=2, cutout=4, image_size=(20, 28))
    keys = p.keys()
    assert keys.shape == (plan.KEY_ROWS, 6 * 8) == (6, 48) and keys.dtype == np.int64
    assert p.steps == 6 == plan.steps_per_epoch(50, 8)
    np.testing.assert_array_equal(keys[0], p.indices.reshape(-1))
    np.testing.assert_array_equal(keys[1], p.offsets[:, :, 0].reshape(-1))
    np.testing.assert_array_equal(keys[2], p.offsets[:, :, 1].reshape(-1))
    np.testing.assert_array_equal(keys[3], p.flips.reshape(-1).astype(np.int64))
    np.testing.assert_array_equal(keys[4], p.cutouts[:, :, 0].reshape(-1))
    np.testing.assert_array_equal(keys[5], p.cutouts[:, :, 1].reshape(-1))
    assert keys[1:3].max() <= 4 and keys[3].max() == 1


def test_a_plan_drops_the_last_partial_batch_and_draws_per_seed_and_epoch():
    p = plan.epoch_plan(103, 10, epoch=0, seed=1, padding=4)
    assert p.indices.shape == (10, 10) and p.indices.dtype == np.int64
    assert p.offsets.shape == (10, 10, 2) == p.cutouts.shape and p.flips.shape == (10, 10)
    assert p.cutouts.dtype == np.int32 and not p.cutouts.any()
    assert len(set(p.indices.ravel())) == 100 and p.indices.max() < 103
    assert p.offsets.dtype == np.int32 and p.flips.dtype == bool
    assert p.offsets.max() == 8 and p.offsets.min() == 0  # 0 .. 2 * padding, both ends drawn
    other_seed = plan.epoch_plan(103, 10, epoch=0, seed=2, padding=4)
    assert not np.array_equal(p.indices, other_seed.indices)
    unpadded = plan.epoch_plan(103, 10, epoch=0, seed=1, padding=0)
    assert not unpadded.offsets.any() and not unpadded.flips.any()  # no crop to draw
    one = plan.epoch_plan(103, 10, epoch=0, seed=1, padding=1)
    assert set(one.offsets.ravel()) == {0, 1, 2} and one.flips.any()
    fixed = plan.epoch_plan(103, 10, epoch=0, seed=1, augment=False, padding=3, cutout=4)
    assert fixed.offsets.shape == (10, 10, 2) and fixed.offsets.dtype == np.int32
    assert (fixed.offsets == 3).all() and fixed.flips.dtype == bool and not fixed.flips.any()
    assert fixed.cutouts.shape == (10, 10, 2) and fixed.cutouts.dtype == np.int32


def test_cutout_corners_reach_each_side_of_a_non_square_image():
    p = plan.epoch_plan(4000, 100, epoch=0, seed=0, cutout=8, image_size=(20, 28))
    assert p.cutouts.dtype == np.int32
    assert p.cutouts[..., 0].min() == 0 and p.cutouts[..., 0].max() == 12  # rows: 20 - 8
    assert p.cutouts[..., 1].min() == 0 and p.cutouts[..., 1].max() == 20  # columns: 28 - 8
    assert p.cutouts.shape == (40, 100, 2)
    single = plan.epoch_plan(400, 100, 0, 0, cutout=1, image_size=(20, 28))
    assert single.cutouts[..., 0].max() == 19 and single.cutouts[..., 1].max() == 27
    fits = plan.epoch_plan(10, 2, 0, 0, cutout=20, image_size=(20, 28))  # exactly the height
    assert not fits.cutouts[..., 0].any()
    with pytest.raises(ValueError) as refused:
        plan.epoch_plan(10, 2, 0, 0, cutout=21, image_size=(20, 28))
    assert str(refused.value) == "a 21-pixel cutout does not fit 20x28 images"


def test_run_keys_are_the_plan_of_the_runs_seed_batch_and_augmentation():
    config = RunConfig(seed=5, batch_size=4, augment=True, crop_padding=3, cutout=6)
    keys = plan.run_keys(config, 40, 2, (24, 24))
    expected = plan.epoch_plan(40, 4, 2, 5, True, 3, 6, (24, 24)).keys()
    np.testing.assert_array_equal(keys, expected)
    assert keys[1:3].max() <= 6 and keys[4:].max() <= 18 and keys[4:].any()
    plain = plan.run_keys(config.replace(augment=False), 40, 2, (24, 24))
    assert (plain[1:3] == 3).all() and not plain[3:].any()


def test_test_keys_are_the_test_set_in_order_centre_cropped():
    keys = plan.test_keys(5, padding=4)
    assert keys.dtype == np.int64
    np.testing.assert_array_equal(keys, [[0, 1, 2, 3, 4], [4] * 5, [4] * 5, [0] * 5,
                                         [0] * 5, [0] * 5])


def test_each_process_loads_its_own_consecutive_share_of_a_batch():
    batch = list(range(12))
    shares = [batch[plan.process_share(12, 3, rank)] for rank in range(3)]
    assert shares == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert batch[plan.process_share(12, 1, 0)] == batch


def test_augmentation_note_says_what_each_framework_applies():
    assert plan.augmentation_note(False, "tf.data ops", cutout=8) == (
        "none (the plan's crop is the identity)")
    assert plan.augmentation_note(True, "tf.data ops") == (
        "shared plan: zero-pad crop + flip as tf.data ops")
    assert plan.augmentation_note(True, "torch ops", cutout=8) == (
        "shared plan: zero-pad crop + flip + 8x8 cutout as torch ops")


class _Starts:
    """A `start(first, end)` that records each call and yields (epoch, step) labels."""

    def __init__(self, steps: int):
        self.steps, self.calls = steps, []

    def __call__(self, first: int, end: int):
        self.calls.append((first, end))
        return iter([(e, s) for e in range(first, end) for s in range(self.steps)])


def test_an_epoch_taken_whole_continues_the_one_iterator_into_the_next():
    starts = _Starts(steps=3)
    flow = plan.FlowingEpochs(steps_per_epoch=3, end=3)
    assert flow.iterator is None and flow.continues_at is None  # nothing started yet
    assert list(flow.epoch(0, starts)) == [(0, 0), (0, 1), (0, 2)]
    assert flow.continues_at == 1
    assert list(flow.epoch(1, starts)) == [(1, 0), (1, 1), (1, 2)]
    assert list(flow.epoch(2, starts)) == [(2, 0), (2, 1), (2, 2)]
    assert starts.calls == [(0, 3)]  # one iterator over every epoch
    assert flow.continues_at is None  # the last epoch: nothing to continue into


def test_an_epoch_left_part_way_or_resumed_starts_a_new_iterator_there():
    starts = _Starts(steps=3)
    flow = plan.FlowingEpochs(steps_per_epoch=3, end=4)
    first = flow.epoch(0, starts)
    assert next(first) == (0, 0)
    assert flow.continues_at is None  # not taken whole
    assert list(flow.epoch(1, starts)) == [(1, 0), (1, 1), (1, 2)]
    assert starts.calls == [(0, 4), (1, 4)]
    assert list(flow.epoch(3, starts)) == [(3, 0), (3, 1), (3, 2)]  # skipped ahead: restart
    assert starts.calls == [(0, 4), (1, 4), (3, 4)]
    assert list(flow.epoch(5, starts)) == [(5, 0), (5, 1), (5, 2)]  # past the end: that epoch
    assert starts.calls[-1] == (5, 6)


def test_batches_taken_by_the_framework_are_counted_and_bounded():
    starts = _Starts(steps=4)
    flow = plan.FlowingEpochs(steps_per_epoch=4, end=2)
    batches = flow.epoch(0, starts)
    batches.check(4)
    batches.took(3)  # a tf.function took three from batches.iterator
    assert batches.left == 1 and flow.continues_at is None
    with pytest.raises(ValueError) as refused:
        batches.check(2)
    assert str(refused.value) == "2 batches asked for, 1 left in the epoch"
    with pytest.raises(ValueError):
        batches.took(2)
    assert batches.left == 1
    batches.took(1)
    assert batches.left == 0 and flow.continues_at == 1
    assert list(batches) == []  # nothing left to iterate
    assert batches.epoch == 0 and batches.iterator is flow.iterator


def test_cut_out_squares_rows_and_columns_apart_on_a_non_square_image():
    images = np.ones((1, 20, 28, 3), np.float32)
    out = plan.cut_out(images, np.array([12]), np.array([20]), 8)  # the bottom-right corner
    assert (out[0, 12:, 20:] == 0).all() and out[0].sum() == 3 * (20 * 28 - 64)
