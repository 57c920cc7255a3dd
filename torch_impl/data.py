"""The shared data plan as a torch DataLoader: gather, crop, flip and normalise per sample."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from compare import plan as data_plan
from compare.config import RunConfig


class PlanDataset(Dataset):
    """Training or test images; a key is (index, dy, dx, flip) from the data plan.

    `__getitems__` does a whole batch with tensor ops (one gather for crop and flip),
    exactly the computation of compare.plan.augment_batch and normalise.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, mean: np.ndarray, std: np.ndarray,
                 padding: int, augment: bool, device: torch.device | str = "cpu"):
        self.device = torch.device(device)  # "cpu" for loader workers; the GPU when device-resident
        self.images = torch.from_numpy(np.ascontiguousarray(images)).to(self.device)  # (N, H, W, C) uint8
        self.labels = torch.from_numpy(labels).to(self.device)
        mean255, std255 = data_plan.scaled_stats(mean, std)
        self.mean255 = torch.from_numpy(mean255).to(self.device)
        self.std255 = torch.from_numpy(std255).to(self.device)
        self.padding, self.augment = padding, augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitems__(self, keys: list[tuple[int, int, int, bool]]) -> tuple[torch.Tensor, torch.Tensor]:
        key = torch.as_tensor(keys, dtype=torch.int64).to(self.device)
        indices, dy, dx, flips = key.unbind(1)
        batch = self.images[indices]
        if self.augment:  # without augmentation the plan's crop is the identity: skip it
            n, h, w, _ = batch.shape
            p = self.padding
            padded = torch.nn.functional.pad(batch, (0, 0, p, p, p, p))  # pad W and H, not C
            arange_h, arange_w = (torch.arange(k, device=self.device) for k in (h, w))
            rows = dy[:, None] + arange_h[None, :]
            cols = torch.where(flips[:, None].bool(), arange_w.flip(0)[None, :], arange_w[None, :]) + dx[:, None]
            batch = padded[torch.arange(n, device=self.device)[:, None, None], rows[:, :, None], cols[:, None, :]]
        images = (batch.float() - self.mean255) / self.std255  # NHWC float32
        return images.permute(0, 3, 1, 2), self.labels[indices]  # NCHW view for the model

    def __getitem__(self, key):
        images, labels = self.__getitems__([key])
        return images[0], labels[0]


def _whole_batch(batch):
    """The dataset already returns a collated batch."""
    return batch


class PlanBatchSampler(Sampler):
    """Yields this rank's share of each global batch of the epoch's plan, as dataset keys."""

    def __init__(self, train_size: int, config: RunConfig, rank: int = 0, world_size: int = 1):
        self.train_size, self.config = train_size, config
        self.rank, self.world_size = rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.train_size // self.config.batch_size

    def __iter__(self):
        plan = data_plan.epoch_plan(self.train_size, self.config.batch_size, self.epoch,
                                    self.config.seed, self.config.augment, self.config.crop_padding)
        share = self.config.batch_size // self.world_size
        lo, hi = self.rank * share, (self.rank + 1) * share
        for s in range(plan.steps):
            yield list(zip(plan.indices[s, lo:hi].tolist(), plan.offsets[s, lo:hi, 0].tolist(),
                           plan.offsets[s, lo:hi, 1].tolist(), plan.flips[s, lo:hi].tolist()))


class SequentialKeys(Sampler):
    """The test set in order, uncropped and unflipped, in batches of `batch_size`."""

    def __init__(self, size: int, batch_size: int, padding: int):
        self.size, self.batch_size, self.padding = size, batch_size, padding

    def __len__(self) -> int:
        return -(-self.size // self.batch_size)

    def __iter__(self):
        for start in range(0, self.size, self.batch_size):
            yield [(i, self.padding, self.padding, False)
                   for i in range(start, min(start + self.batch_size, self.size))]


class DeviceResident:
    """The `device` pipeline: no loader; each batch is gathered and augmented where the
    data lives (the GPU), on the training loop's own thread, from the same plan."""

    def __init__(self, dataset: PlanDataset, sampler: Sampler):
        self.dataset, self.batch_sampler = dataset, sampler

    def __iter__(self):
        return (self.dataset.__getitems__(keys) for keys in self.batch_sampler)


def _loader(dataset: PlanDataset, sampler: Sampler, config: RunConfig, on_gpu: bool) -> DataLoader:
    p = config.pipeline
    workers = p.workers
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=_whole_batch, num_workers=workers,
                      pin_memory=p.pin_memory and on_gpu,
                      persistent_workers=p.persistent_workers and workers > 0,
                      prefetch_factor=(p.prefetch_factor if p.prefetch and workers > 0 else None))


def train_pipeline(train_x: np.ndarray, train_y: np.ndarray, mean: np.ndarray, std: np.ndarray,
                 config: RunConfig, on_gpu: bool, rank: int = 0, world_size: int = 1,
                 device: torch.device | str = "cpu"):
    """A DataLoader over the data plan (or, for the `device` pipeline, batches built on
    `device`); call `loader.batch_sampler.set_epoch(e)` per epoch."""
    sampler = PlanBatchSampler(len(train_y), config, rank, world_size)
    if config.pipeline.kind == "device":
        return DeviceResident(PlanDataset(train_x, train_y, mean, std, config.crop_padding, config.augment,
                                          device), sampler)
    dataset = PlanDataset(train_x, train_y, mean, std, config.crop_padding, config.augment)
    return _loader(dataset, sampler, config, on_gpu)


def test_pipeline(test_x: np.ndarray, test_y: np.ndarray, mean: np.ndarray, std: np.ndarray,
                config: RunConfig, on_gpu: bool):
    dataset = PlanDataset(test_x, test_y, mean, std, config.crop_padding, augment=False)
    return _loader(dataset, SequentialKeys(len(test_y), config.batch_size, config.crop_padding),
                   config, on_gpu)


def pipeline_settings(config: RunConfig, on_gpu: bool) -> dict:
    """What the DataLoader actually used, for the fairness manifest."""
    p = config.pipeline
    augmentation = ("shared plan: zero-pad crop + flip as one tensor gather" if config.augment
                    else "none (the plan's crop is the identity)")
    if p.kind == "device":
        return {"kind": "device", "loader": "whole training set resident on the device; batches "
                "gathered there on the loop's thread", "workers": 0, "augmentation": augmentation + ", on the device"}
    return {"kind": p.kind, "loader": "torch.utils.data.DataLoader", "workers": p.workers,
            "pin_memory": p.pin_memory and on_gpu, "persistent_workers": p.persistent_workers and p.workers > 0,
            "prefetch_factor": p.prefetch_factor if p.prefetch and p.workers > 0 else None,
            "non_blocking_copies": p.non_blocking and on_gpu,
            "augmentation": augmentation}
