"""Framework-neutral data layer: every source returns uint8 NHWC images, int64 labels, class names.

Sources: `cifar10` (the official python archive), `tfds`, `torchvision`, `folder`
(train/<class>/*, test/<class>/*) and `synthetic` (generated, learnable, deterministic).
Decoded arrays are cached as .npz under $CNNCOMPARE_HOME (default ~/.cache/cnncompare),
keyed by source and a fingerprint of the input. `tfds` and `torchvision` are decoded in a
helper process, so the caller never imports TensorFlow or torchvision. Normalisation
statistics come from the training split.

Modules, one role each: `dataset` (the Dataset and its checks), `cache` (the npz cache),
`unpickle` (the restricted unpickler), `cifar10` (the official archive and its download),
`folder`, `synthetic`, `frameworks` (tfds/torchvision through the helper process) and
`decode` (that helper process).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from compare.errors import DataError
from compare.experiment.config import DATASETS, SYNTHETIC_TEST_DIVISOR, SYNTHETIC_TRAIN_SIZE
from compare.experiment.datasets.cache import CACHE_FORMAT, clear_cache, describe_cache, home
from compare.experiment.datasets.cifar10 import (
    CIFAR10_ARCHIVE,
    CIFAR10_CLASSES,
    CIFAR10_DIR,
    CIFAR10_MD5,
    CIFAR10_TEST_BATCH,
    CIFAR10_TRAIN_BATCHES,
    CIFAR10_URL,
    cifar10_cache_path,
    fetch_cifar10,
    load_cifar10,
    md5sum,
    read_cifar10_archive,
    read_cifar10_dir,
)
from compare.experiment.datasets.dataset import IMAGE_SHAPE, Dataset, check_arrays
from compare.experiment.datasets.folder import IMAGE_SUFFIXES, load_folder
from compare.experiment.datasets.frameworks import load_tfds, load_torchvision
from compare.experiment.datasets.synthetic import SYNTHETIC_CLASSES, synthetic

if TYPE_CHECKING:  # annotations only
    from compare.experiment.config import RunConfig

SOURCES = DATASETS  # declared with the --dataset setting

__all__ = ["CACHE_FORMAT", "CIFAR10_ARCHIVE", "CIFAR10_CLASSES", "CIFAR10_DIR", "CIFAR10_MD5",
           "CIFAR10_TEST_BATCH", "CIFAR10_TRAIN_BATCHES", "CIFAR10_URL", "IMAGE_SHAPE",
           "IMAGE_SUFFIXES", "SOURCES", "SYNTHETIC_CLASSES", "Dataset", "check_arrays",
           "cifar10_cache_path", "clear_cache", "config_dataset", "describe_cache",
           "fetch_cifar10", "home", "load", "load_cifar10", "load_folder", "load_tfds",
           "load_torchvision", "md5sum", "read_cifar10_archive", "read_cifar10_dir",
           "synthetic"]


def load(source: str, data_dir: str | None = None, *, seed: int = 0,
         synthetic_train_size: int = SYNTHETIC_TRAIN_SIZE,
         synthetic_test_size: int | None = None,
         validation_fraction: float = 0.1, download: bool = True,
         progress: bool = True) -> Dataset:
    """Load `source`, from the cache when it is there.

    Args:
        source: one of SOURCES.
        data_dir: where the source's data is (see each loader); None for its default.
        seed: the folder source's held-out split when there is no test/ folder.
        synthetic_train_size, synthetic_test_size: image counts of the synthetic source.
        validation_fraction: share of train/ held out by the folder source without test/.
        download: let cifar10, tfds and torchvision download what is missing.
        progress: show download progress on stderr.

    Raises:
        DataError: with what to do about it.
    """
    if source not in SOURCES:
        raise DataError(f"unknown dataset {source!r}; choose one of {', '.join(SOURCES)}")
    if data_dir is not None and source in ("cifar10", "folder") and not Path(data_dir).exists():
        raise DataError(f"--data-dir {data_dir} does not exist")
    if source == "synthetic":
        if synthetic_test_size is None:
            synthetic_test_size = max(1, synthetic_train_size // SYNTHETIC_TEST_DIVISOR)
        return synthetic(synthetic_train_size, synthetic_test_size, seed=seed)
    if source == "cifar10":
        return load_cifar10(data_dir, download=download, progress=progress)
    if source == "folder":
        if data_dir is None:
            raise DataError("--dataset folder needs --data-dir DIR holding train/<class>/ "
                            "(and optionally test/<class>/) images")
        return load_folder(data_dir, seed=seed, validation_fraction=validation_fraction)
    if source == "tfds":
        return load_tfds(data_dir, download=download, progress=progress)
    return load_torchvision(data_dir, download=download, progress=progress)


# The RunConfig fields that name the data: two configs equal in these load the same dataset
DATA_FIELDS = ("dataset", "data_dir", "synthetic_train_size", "synthetic_test_size",
               "validation_fraction")


def same_data(a: RunConfig, b: RunConfig) -> bool:
    """Whether RunConfigs `a` and `b` load the same dataset (config_dataset)."""
    return all(getattr(a, name) == getattr(b, name) for name in DATA_FIELDS)


def config_dataset(config: RunConfig) -> Dataset:
    """The dataset a RunConfig names. The dataset itself (synthetic images, a folder's
    held-out split) does not depend on the run's seed: seeds vary initial weights and the
    data plan, never the data."""
    return load(config.dataset, config.data_dir,
                synthetic_train_size=config.synthetic_train_size,
                synthetic_test_size=config.synthetic_test_size,
                validation_fraction=config.validation_fraction, progress=not config.quiet)
