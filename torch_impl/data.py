"""The shared data plan as a torch DataLoader: gather, crop, flip and normalise per batch."""

from __future__ import annotations

import os
import signal
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from compare.experiment import plan as data_plan
from compare.experiment.config import RunConfig, loader_workers
from compare.experiment.datasets import Dataset
from compare.run.interface import DeviceChoice

# Epochs the phase profile may take after the run's (compare.run.loop.profile_phases): a warm
# epoch and a profiled one when an epoch holds fewer than two calls.
PROFILE_EPOCHS = 2


class PlanImages(torch.utils.data.Dataset):
    """Images and labels, and the batched load of plan keys into a normalised batch.

    `load_batch` computes exactly compare.experiment.plan.augment_batch, normalise then cut_out,
    with tensor ops over the whole batch (one gather for crop and flip, one mask for cutout).
    `device` None keeps the images in host memory (DataLoader workers read them); a device
    (the `device` pipeline) holds them there, and batches are gathered and augmented on it.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, mean: np.ndarray,
                 std: np.ndarray, padding: int, augment: bool,
                 device: torch.device | None = None, cutout: int = 0):
        self.resident = device is not None  # the `device` pipeline: held where it trains
        self.device = torch.device(device or "cpu")
        self.images = torch.from_numpy(np.ascontiguousarray(images)).to(self.device)  # NHWC uint8
        self.labels = torch.from_numpy(labels).to(self.device)
        mean255, std255 = data_plan.scaled_stats(mean, std)
        self.mean255 = torch.from_numpy(mean255).to(self.device)
        self.std255 = torch.from_numpy(std255).to(self.device)
        self.padding, self.augment, self.cutout = padding, augment, cutout
        self.height, self.width = images.shape[1], images.shape[2]

    def resident_bytes(self) -> int:
        """Bytes of the training images held on the training device (0 when on the host)."""
        return self.images.numel() * self.images.element_size() if self.resident else 0

    def load_batch(self, indices, dy, dx, flips, cy, cx):
        """Images NCHW float32 and labels int64 of the plan keys (1-D tensors, one per image)."""
        batch = self.images[indices]
        if self.augment:  # without augmentation the plan's crop is the identity: skip it
            p = self.padding
            padded = torch.nn.functional.pad(batch, (0, 0, p, p, p, p))  # pad W and H, not C
            rows = dy[:, None] + torch.arange(self.height, device=self.device)[None, :]
            ascending = torch.arange(self.width, device=self.device)[None, :]
            cols = torch.where(flips[:, None] > 0, ascending.flip(1), ascending) + dx[:, None]
            first = torch.arange(len(indices), device=self.device)[:, None, None]
            batch = padded[first, rows[:, :, None], cols[:, None, :]]
        images = (batch.float() - self.mean255) / self.std255  # NHWC float32
        if self.augment and self.cutout:
            rows = torch.arange(self.height, device=self.device)[None, :] - cy[:, None]
            cols = torch.arange(self.width, device=self.device)[None, :] - cx[:, None]
            inside = (((rows >= 0) & (rows < self.cutout))[:, :, None]
                      & ((cols >= 0) & (cols < self.cutout))[:, None, :])
            images = images.masked_fill(inside[..., None], 0.0)
        return images.permute(0, 3, 1, 2), self.labels[indices]  # an NCHW view for the model

    def __len__(self) -> int:
        return len(self.labels)

    def __getitems__(self, keys: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """A whole batch from the sampler's (KEY_ROWS, n) keys (the DataLoader's batched fetch)."""
        return self.load_batch(*torch.from_numpy(keys).to(self.device).unbind(0))

    def __getitem__(self, index: int):
        keys = data_plan.test_keys(1, self.padding)
        keys[0] = index
        images, labels = self.__getitems__(keys)
        return images[0], labels[0]


class TrainBatches:
    """This process's share of each global batch, epoch by epoch, in the data plan's order.

    Consecutive epochs share one loader iterator: its sampler runs on from one epoch into
    the next, as a repeated tf.data dataset does, so the workers load the next epoch's first
    batches while the loop evaluates. With a new iterator each epoch, the first step of every
    epoch waits while one worker loads its batch whole (about 50 ms an epoch of ResNet-9 at
    batch 512 with 8 workers on an H200: most of PyTorch's 6.6% input wait there).
    """

    def __init__(self, source: PlanImages, config: RunConfig, choice: DeviceChoice,
                 train_size: int):
        self.source, self.config, self.choice, self.train_size = source, config, choice, train_size
        self.steps_per_epoch = data_plan.steps_per_epoch(train_size, config.batch_size)
        self.sampler = _PlanKeys(self)
        self.loader = (None if config.pipeline.kind == "device"
                       else _loader(source, self.sampler, config, choice))
        # The epochs the loader holds: the run's, and two for the phase profile after them
        self.flow = data_plan.FlowingEpochs(
            self.steps_per_epoch, config.epochs + (PROFILE_EPOCHS if config.profile_steps else 0))

    def _keys(self, epoch: int) -> np.ndarray:
        """(KEY_ROWS, steps, share) int64: this process's slice of every step's plan keys."""
        keys = data_plan.run_keys(self.config, self.train_size, epoch,
                                  (self.source.height, self.source.width))
        share = data_plan.process_share(self.config.batch_size, self.choice.processes,
                                        self.choice.rank)
        return keys.reshape(data_plan.KEY_ROWS, self.steps_per_epoch,
                            self.config.batch_size)[:, :, share]

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's batches (images NCHW float32, labels int64), from the loader's
        iterator running on from the previous epoch where it can (FlowingEpochs)."""
        if self.loader is None:
            return self._resident(epoch)
        return self.flow.epoch(epoch, self._from_epoch)

    def _from_epoch(self, first: int, end: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The loader's iterator over epochs first .. end - 1."""
        self.sampler.first, self.sampler.end = first, end
        assert self.loader is not None  # made with the pipeline, dropped only when closed
        return iter(self.loader)

    def _resident(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The `device` pipeline: the epoch's keys go to the device in one copy; each step
        slices them there, so no step waits on a host-to-device copy or a sync."""
        keys = torch.from_numpy(np.ascontiguousarray(self._keys(epoch))).to(self.source.device)
        for step in range(self.steps_per_epoch):
            yield self.source.load_batch(*keys[:, step].unbind(0))


class _PlanKeys(Sampler):
    """The DataLoader's batch sampler: one (KEY_ROWS, share) key array per step of epochs
    first .. end - 1, one epoch after the other."""

    def __init__(self, batches: TrainBatches):
        self.batches, self.first, self.end = batches, 0, 1

    def __len__(self) -> int:
        return self.batches.steps_per_epoch * (self.end - self.first)

    def __iter__(self):
        for epoch in range(self.first, self.end):
            keys = self.batches._keys(epoch)
            for step in range(self.batches.steps_per_epoch):
                yield np.ascontiguousarray(keys[:, step])


class _TestKeys(Sampler):
    """The test set's keys in order, in batches of `batch_size`."""

    def __init__(self, keys: np.ndarray, batch_size: int):
        self.keys, self.batch_size = keys, batch_size

    def __len__(self) -> int:
        return -(-self.keys.shape[1] // self.batch_size)

    def __iter__(self):
        return (self.keys[:, start:start + self.batch_size]
                for start in range(0, self.keys.shape[1], self.batch_size))


def train_pipeline(dataset: Dataset, config: RunConfig, choice: DeviceChoice) -> TrainBatches:
    """This process's training batches: a DataLoader over the plan, or for the `device`
    pipeline the images resident on this process's device."""
    device = torch.device(choice.names[0]) if config.pipeline.kind == "device" else None
    source = PlanImages(dataset.train_x, dataset.train_y, dataset.mean, dataset.std,
                        config.crop_padding, config.augment, device, config.cutout)
    return TrainBatches(source, config, choice, len(dataset.train_y))


def test_pipeline(dataset: Dataset, config: RunConfig, choice: DeviceChoice) -> DataLoader:
    """The test set in order, uncropped and unflipped."""
    source = PlanImages(dataset.test_x, dataset.test_y, dataset.mean, dataset.std,
                        config.crop_padding, augment=False)
    keys = data_plan.test_keys(len(dataset.test_y), config.crop_padding)
    return _loader(source, _TestKeys(keys, config.batch_size), config, choice)


def pipeline_settings(config: RunConfig, choice: DeviceChoice) -> dict:
    """What the DataLoader actually used, for the fairness manifest (compare.run.fairness
    adds the kind and the augmentation note): `augmented_by` names the ops that apply the
    plan."""
    if config.pipeline.kind == "device":
        return {"loader": "whole training set (uint8) resident on the device; each epoch's "
                "plan keys copied there once, batches gathered on the loop's thread",
                "workers": 0, "on_device": True, "augmented_by": "one tensor gather"}
    p = config.pipeline
    workers = loader_workers(p, choice.processes)
    return {"loader": "torch.utils.data.DataLoader", "workers": workers,
            "workers_from": "--workers" if p.workers is not None else
            f"{len(os.sched_getaffinity(0))} cores / {choice.processes} process(es)",
            "pin_memory": p.pin_memory and choice.on_gpu,
            "persistent_workers": p.persistent_workers and workers > 0,
            "prefetch_factor": p.prefetch_factor if p.prefetch and workers > 0 else None,
            "non_blocking_copies": p.non_blocking and choice.on_gpu,
            "augmented_by": "one tensor gather"}


def _whole_batch(batch):
    """PlanImages.__getitems__ already returns a collated batch."""
    return batch


def _worker_leaves_stops_to_the_trainer(worker_id: int) -> None:
    """A DataLoader worker leaves a stop to its trainer, which ends its workers after writing
    its result. A stop sent to the whole process group (`kill -- -PGID`, a scheduler
    cancelling a job) reaches the workers too: on SIGTERM a worker ends at once with exit code
    0, since one killed by the signal made PyTorch's loader raise "DataLoader worker ... is
    killed by signal" in the trainer, which then ended as failed, not interrupted. SIGTERM
    must still end it: multiprocessing terminates its daemonic children with it at exit and
    waits for them. SIGINT and SIGHUP are ignored: the trainer stops on them and ends its
    workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_quietly)


def _end_quietly(signum: int, frame) -> None:
    os._exit(0)


def _loader(source: PlanImages, sampler: Sampler, config: RunConfig,
            choice: DeviceChoice) -> DataLoader:
    p = config.pipeline
    workers = loader_workers(p, choice.processes)
    return DataLoader(source, batch_sampler=sampler, collate_fn=_whole_batch,
                      num_workers=workers, pin_memory=p.pin_memory and choice.on_gpu,
                      persistent_workers=p.persistent_workers and workers > 0,
                      prefetch_factor=p.prefetch_factor if p.prefetch and workers > 0 else None,
                      worker_init_fn=_worker_leaves_stops_to_the_trainer if workers else None)
