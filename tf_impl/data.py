"""The shared data plan as a tf.data pipeline: gather, crop, flip and normalise per batch."""

from __future__ import annotations

import threading

import numpy as np
import tensorflow as tf

from compare.experiment import plan as data_plan
from compare.experiment import strategy
from compare.experiment.config import RunConfig
from compare.experiment.datasets import Dataset
from compare.run.interface import DeviceChoice

# Epochs the phase profile may take after the run's (compare.run.loop.profile_phases): a warm
# epoch and a profiled one when an epoch holds fewer than two calls.
PROFILE_EPOCHS = 2


class PlanImages:
    """Images and labels, and the batched load of plan keys into a normalised batch.

    `load_batch` computes exactly compare.experiment.plan.augment_batch, normalise then cut_out,
    vectorised over the batch (the tf.data guide's "vectorized mapping": batch, then map). `device`
    None keeps the images in host memory; a device name (the first replica's) makes them
    a variable which, created under strategy.scope(), MirroredStrategy copies to every
    replica's device (the `device` pipeline). That copy holds the uint8 bytes, as PyTorch's
    does, packed eight to an int64: TensorFlow has GPU gather kernels for int64 but none for
    uint8 (a uint8 gather would run on the CPU every step), so each image is gathered as
    int64 words, bitcast back to its bytes and cast to float32 on the device.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, mean: np.ndarray,
                 std: np.ndarray, padding: int, augment: bool, device: str | None = None,
                 cutout: int = 0):
        self.shape = images.shape[1:]  # (H, W, C)
        self.packed = device is not None
        if self.packed:
            self.images = tf.Variable(_pack_words(images), trainable=False, name="train_images")
            self.labels = tf.Variable(labels, trainable=False, name="train_labels")
        else:
            with tf.device("/cpu:0"):  # the source stays in host memory, as the DataLoader's
                self.images = tf.constant(images)  # (N, H, W, C) uint8
                self.labels = tf.constant(labels)
        mean255, std255 = data_plan.scaled_stats(mean, std)
        self.mean255, self.std255 = tf.constant(mean255), tf.constant(std255)
        self.padding, self.augment, self.cutout = padding, augment, cutout
        self.height, self.width = images.shape[1], images.shape[2]

    def resident_bytes(self) -> int:
        """Bytes of the training images held on the training device (0 when on the host)."""
        return int(np.prod(self.images.shape)) * self.images.dtype.size if self.packed else 0

    def _gather(self, indices):
        """The images at `indices`, NHWC: uint8 from host memory; from the packed device copy
        float32 (0..255), as no uint8 op runs there."""
        if not self.packed:
            return tf.gather(self.images, indices)
        words = tf.gather(self.images, indices)  # (B, words) int64, on the device
        as_bytes = tf.cast(tf.bitcast(words, tf.uint8), tf.float32)  # (B, words, 8)
        flat = tf.reshape(as_bytes, (tf.shape(indices)[0], -1))[:, :int(np.prod(self.shape))]
        return tf.reshape(flat, (-1, *self.shape))

    def load_batch(self, indices, dy, dx, flips, cy, cx):
        """Images NHWC float32 and labels int64 of the plan keys (1-D tensors, one per image)."""
        batch = self._gather(indices)
        if self.augment:  # without augmentation the plan's crop is the identity: skip it
            p = self.padding
            padded = tf.pad(batch, [[0, 0], [p, p], [p, p], [0, 0]])
            rows = dy[:, None] + tf.range(self.height, dtype=dy.dtype)[None, :]
            ascending = tf.range(self.width, dtype=dx.dtype)[None, :]
            cols = tf.where(flips[:, None] > 0, ascending[:, ::-1], ascending) + dx[:, None]
            batch = tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2,
                              batch_dims=1)
        images = (tf.cast(batch, tf.float32) - self.mean255) / self.std255
        if self.augment and self.cutout:
            rows = tf.range(self.height, dtype=cy.dtype)[None, :] - cy[:, None]
            cols = tf.range(self.width, dtype=cx.dtype)[None, :] - cx[:, None]
            inside = (((rows >= 0) & (rows < self.cutout))[:, :, None]
                      & ((cols >= 0) & (cols < self.cutout))[:, None, :])
            images = tf.where(inside[..., None], tf.zeros_like(images), images)
        return images, tf.gather(self.labels, indices)


def _pack_words(images: np.ndarray) -> np.ndarray:
    """(N, H, W, C) uint8 as (N, ceil(H*W*C / 8)) int64: each image's bytes in order, zero
    padded to whole words; the same bytes, in the same memory, as the uint8 array."""
    flat = images.reshape(len(images), -1)
    pad = -flat.shape[1] % 8
    if pad:
        flat = np.concatenate([flat, np.zeros((len(flat), pad), np.uint8)], axis=1)
    return np.ascontiguousarray(flat).view(np.int64)  # native byte order, as tf.bitcast


class TrainBatches:
    """This process's training batches, epoch by epoch, in the data plan's order.

    Consecutive epochs share one distributed iterator: TensorFlow keeps host memory for
    every distributed iterator it makes (0.17 MiB each, measured on CPU with lenet), which
    one per epoch adds up to a steady growth over a long run (benchmarks/soak.py). So the
    pipeline flows from one epoch into the next, as a repeated tf.data dataset does: its
    prefetch runs ahead across the epoch boundary (during the evaluation).
    """

    def __init__(self, source: PlanImages, config: RunConfig, choice: DeviceChoice,
                 train_size: int):
        self.source, self.config, self.choice, self.train_size = source, config, choice, train_size
        self.steps_per_epoch = data_plan.steps_per_epoch(train_size, config.batch_size)
        self.strategy = tf.distribute.get_strategy()  # the scope train_pipeline was called in
        # The epochs the pipeline holds: the run's, and two for the phase profile after them
        self.flow = data_plan.FlowingEpochs(
            self.steps_per_epoch, config.epochs + (PROFILE_EPOCHS if config.profile_steps else 0))

    def epoch(self, epoch: int) -> data_plan.EpochBatches:
        """The epoch's global batches split over the replicas: images NHWC float32 and
        labels int64, or for the `device` pipeline the plan's keys, which the replicas
        load with source.load_batch; from the iterator running on from the previous epoch
        where it can (FlowingEpochs)."""
        return self.flow.epoch(epoch, lambda first, end: iter(self._from_epoch(first, end)))

    def _from_epoch(self, first: int, end: int) -> tf.distribute.DistributedDataset:
        """Epochs first .. end - 1, one after the other (the run's epochs, and the two the
        phase profile may take after them), as _plan_key_batches gives their keys.

        Each worker (one under MirroredStrategy; several under MultiWorkerMirroredStrategy)
        keeps its slice of every global batch before loading any image, then splits it into
        per-replica batches, which the strategy hands to its local replicas in turn: replica
        r of all R gets images [r * B/R, (r + 1) * B/R) of each global batch B, as one
        process with R replicas would."""
        batch = self.config.batch_size

        def worker_batches(context: tf.distribute.InputContext) -> tf.data.Dataset:
            share = data_plan.process_share(batch, context.num_input_pipelines,
                                            context.input_pipeline_id)
            ds = _plan_key_batches(self.config, self.train_size, first, end,
                                   (self.source.height, self.source.width))
            if context.num_input_pipelines > 1:
                ds = ds.map(_as_written(lambda *step: tuple(k[share] for k in step)))
            ds = ds.rebatch(context.get_per_replica_batch_size(batch))
            if self.config.pipeline.kind != "device":
                ds = _map(ds, self.source.load_batch, self.config)
            return _finish(ds, self.config)

        return self.strategy.distribute_datasets_from_function(
            worker_batches, _distribute_options(self.config, self.choice))


def _plan_key_batches(config: RunConfig, train_size: int, first: int, end: int,
                      image_size: tuple[int, int]) -> tf.data.Dataset:
    """The plan keys of epochs first .. end - 1 (compare.experiment.plan), one global batch of
    (indices, dy, dx, flips, cy, cx) per step.

    The keys of every epoch are computed here, in numpy, and held as one int32 tensor
    (24 bytes an image an epoch: 1.2 MB an epoch of CIFAR-10): the pipeline then runs
    no Python, so no tf.data thread ever waits for the GIL, as a numpy_function producing
    them on the fly did at an iterator's end (an exit held for minutes)."""
    batch = config.batch_size
    steps = data_plan.steps_per_epoch(train_size, batch)
    keys = np.stack([data_plan.run_keys(config, train_size, epoch, image_size)
                     for epoch in range(first, end)]).astype(np.int32)

    def epoch_keys(rows):
        """The epoch's global batches of keys, one element per step: batched here in
        one reshape, not element by element by Dataset.batch (which cost the producer
        about a millisecond per batch of 32 on a CPU core)."""
        rows = tf.reshape(tf.cast(rows, tf.int64), (data_plan.KEY_ROWS, steps, batch))
        return tf.data.Dataset.from_tensor_slices(tuple(tf.unstack(rows)))

    return tf.data.Dataset.from_tensor_slices(keys).flat_map(_as_written(epoch_keys))


def train_pipeline(dataset: Dataset, config: RunConfig, choice: DeviceChoice) -> TrainBatches:
    """The training batches; call under strategy.scope(): the batches are split over its
    replicas, and a resident copy of the images is mirrored on their devices."""
    device = choice.names[0] if config.pipeline.kind == "device" else None
    source = PlanImages(dataset.train_x, dataset.train_y, dataset.mean, dataset.std,
                        config.crop_padding, config.augment, device, config.cutout)
    return TrainBatches(source, config, choice, len(dataset.train_y))


def test_pipeline(dataset: Dataset, config: RunConfig,
                  choice: DeviceChoice) -> tf.distribute.DistributedDataset:
    """The test set in order, uncropped and unflipped, split over the replicas of the
    strategy in scope; cached after normalisation if the pipeline says so."""
    source = PlanImages(dataset.test_x, dataset.test_y, dataset.mean, dataset.std,
                        config.crop_padding, augment=False)
    keys = data_plan.test_keys(len(dataset.test_y), config.crop_padding)
    ds = tf.data.Dataset.from_tensor_slices(tuple(keys)).batch(config.batch_size)
    ds = _map(ds, source.load_batch, config)
    if config.pipeline.cache:
        ds = ds.cache()
    return tf.distribute.get_strategy().experimental_distribute_dataset(
        _finish(ds, config), _distribute_options(config, choice))


def pipeline_settings(config: RunConfig, choice: DeviceChoice) -> dict:
    """What tf.data actually used, for the fairness manifest (compare.run.fairness adds the
    kind and the augmentation note): `augmented_by` names the ops that apply the plan."""
    if config.pipeline.kind == "device":
        return {"loader": "whole training set (uint8 bytes, packed 8 to an int64 for "
                "TensorFlow's GPU gather) in a mirrored variable on each replica's device; "
                "tf.data carries only the plan's keys", "on_device": True,
                "augmented_by": "two batched tf.gather"}
    p = config.pipeline
    return {"loader": "tf.data: plan keys, batch, then map (vectorised)",
            "parallel_map": "AUTOTUNE" if p.parallel_map else 1,
            "prefetch": "AUTOTUNE" if p.prefetch else None, "cache_test_set": p.cache,
            "distribution": "strategy.distribute_datasets_from_function (each worker loads "
                            "only its replicas' share), batches "
                            + ("prefetched to the device" if _fetch_to_device(config, choice)
                               else "kept in host memory until the step")
                            + ("" if _wrapped(config, choice) or not choice.on_gpu
                               else " (the default strategy has no fetch to device, as in "
                                    "Keras' fit without a strategy)")
                            + "; one iterator over all epochs, read inside the step function",
            "augmented_by": "two batched tf.gather"}


def _map(ds: tf.data.Dataset, fn, config: RunConfig) -> tf.data.Dataset:
    """map, in parallel (AUTOTUNE, order kept) when the pipeline says so."""
    load = _as_written(lambda *keys: fn(*keys))
    if config.pipeline.parallel_map:
        return ds.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.map(load)


def _as_written(fn):
    """`fn` for a tf.data transformation, traced as written: tf.data runs AutoGraph on its
    functions by default (converting their Python source, and every function of this
    package they call, at each process's start), and the pipeline's functions hold no
    Python control flow on tensors (their `if`s test Python settings)."""
    return tf.autograph.experimental.do_not_convert(fn)


def _release_apart(objects: list) -> None:
    """Let go of `objects` (pipelines, iterators) on a thread of their own. Deleting a tf.data
    iterator waits for its autotuning thread's next wake-up (TensorFlow's
    RootDataset::Iterator destructor), which comes later the longer it ran, up to a minute;
    the GIL is free meanwhile, so no other thread waits with it."""
    threading.Thread(target=objects.clear, name="tf-data-release", daemon=True).start()


def _finish(ds: tf.data.Dataset, config: RunConfig) -> tf.data.Dataset:
    if config.pipeline.prefetch:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True  # keep the plan's order under parallel map
    # For experimental_distribute_dataset (the test set): each replica gets its slice of every
    # batch (no files to shard). distribute_datasets_from_function (training) shards nothing
    # itself: TrainBatches slices each worker's share.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def _fetch_to_device(config: RunConfig, choice: DeviceChoice) -> bool:
    """`naive` keeps batches in host memory until the step (as PyTorch's naive loader does);
    the others let MirroredStrategy's distributed iterator prefetch each replica's slice to
    its GPU (the default strategy hands the dataset back as it is: no fetch to device)."""
    return choice.on_gpu and config.pipeline.kind != "naive" and _wrapped(config, choice)


def _wrapped(config: RunConfig, choice: DeviceChoice) -> bool:
    """Whether the replicas train under MirroredStrategy (compare.experiment.strategy); one
    replica split into stages (--parallel model) trains under the default strategy."""
    if config.parallel == "model":
        return False
    return strategy.resolve(config.strategy, "tf", len(choice.names) * choice.processes,
                            choice.processes).wrapped


def _distribute_options(config: RunConfig, choice: DeviceChoice) -> tf.distribute.InputOptions:
    return tf.distribute.InputOptions(experimental_fetch_to_device=_fetch_to_device(config, choice))
