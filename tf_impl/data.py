"""The shared data plan as a tf.data pipeline: gather, crop, flip and normalise per sample."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from compare import plan as data_plan
from compare.config import RunConfig


class PlanImages:
    """Training or test images and the batched load of plan keys into a normalised batch.

    `load_batch` computes exactly compare.plan.augment_batch then normalise, vectorised
    over the batch (the tf.data guide's "vectorized mapping": batch, then map). With
    `device=True` the images live in a variable; created under strategy.scope(),
    MirroredStrategy keeps a copy on every replica's device (the `device` pipeline).
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, mean: np.ndarray, std: np.ndarray,
                 padding: int, augment: bool, device: bool = False):
        if device:
            self.images = tf.Variable(images, trainable=False, name="train_images")
            self.labels = tf.Variable(labels, trainable=False, name="train_labels")
        else:
            with tf.device("/cpu:0"):  # the source stays in host memory, as the DataLoader's does
                self.images = tf.constant(images)  # (N, H, W, C) uint8
                self.labels = tf.constant(labels)
        mean255, std255 = data_plan.scaled_stats(mean, std)
        self.mean255, self.std255 = tf.constant(mean255), tf.constant(std255)
        self.padding, self.augment = padding, augment
        self.height, self.width = images.shape[1], images.shape[2]

    def load_batch(self, indices, dy, dx, flips):
        batch = tf.gather(self.images, indices)
        if self.augment:  # without augmentation the plan's crop is the identity: skip it
            p = self.padding
            padded = tf.pad(batch, [[0, 0], [p, p], [p, p], [0, 0]])
            rows = dy[:, None] + tf.range(self.height)[None, :]
            cols = tf.where(flips[:, None], tf.range(self.width - 1, -1, -1)[None, :],
                            tf.range(self.width)[None, :]) + dx[:, None]
            batch = tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)
        images = (tf.cast(batch, tf.float32) - self.mean255) / self.std255  # NHWC float32
        return images, tf.gather(self.labels, indices)


def _map(ds: tf.data.Dataset, fn, config: RunConfig) -> tf.data.Dataset:
    """map, in parallel (AUTOTUNE, order kept) when the pipeline says so."""
    if config.pipeline.parallel_map:
        return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.map(fn)


def _finish(ds: tf.data.Dataset, config: RunConfig) -> tf.data.Dataset:
    if config.pipeline.prefetch:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True  # keep the plan's order under parallel map
    # Each replica gets its slice of the global batch (no per-file sharding of an in-memory source).
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def train_pipeline(source: PlanImages, train_size: int, config: RunConfig, epoch: int) -> tf.data.Dataset:
    """The epoch's plan as global batches (images NHWC float32, labels int64); for the
    `device` pipeline only the plan's keys, loaded on the replicas by source.load_batch."""
    indices, dy, dx, flips = data_plan.epoch_plan(train_size, config.batch_size, epoch, config.seed,
                                                  config.augment, config.crop_padding).flat()
    ds = tf.data.Dataset.from_tensor_slices((indices, dy, dx, flips)).batch(config.batch_size, drop_remainder=True)
    if config.pipeline.kind != "device":
        ds = _map(ds, source.load_batch, config)
    return _finish(ds, config)


def test_pipeline(source: PlanImages, test_size: int, config: RunConfig) -> tf.data.Dataset:
    """The test set in order, uncropped and unflipped; cached after normalisation if enabled."""
    p = config.crop_padding
    keys = (np.arange(test_size), np.full(test_size, p, np.int32), np.full(test_size, p, np.int32),
            np.zeros(test_size, bool))
    ds = _map(tf.data.Dataset.from_tensor_slices(keys).batch(config.batch_size), source.load_batch, config)
    if config.pipeline.cache:
        ds = ds.cache()
    return _finish(ds, config)


def pipeline_settings(config: RunConfig, on_gpu: bool) -> dict:
    """What tf.data actually used, for the fairness manifest."""
    p = config.pipeline
    augmentation = ("shared plan: zero-pad crop + flip as two batched tf.gather" if config.augment
                    else "none (the plan's crop is the identity)")
    if p.kind == "device":
        return {"kind": "device", "loader": "whole training set in a mirrored variable on each replica's "
                "device; tf.data carries only the plan's keys", "augmentation": augmentation + ", on the device"}
    return {"kind": p.kind, "loader": "tf.data: plan keys, batch, then map (vectorised)",
            "parallel_map": "AUTOTUNE" if p.parallel_map else 1,
            "prefetch": "AUTOTUNE" if p.prefetch else None, "cache_test_set": p.cache,
            "distribution": "strategy.experimental_distribute_dataset", "augmentation": augmentation}
