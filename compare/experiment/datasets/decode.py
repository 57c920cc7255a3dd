"""Decode CIFAR-10 through tensorflow-datasets or torchvision, in a process of its own.

    python -m compare.experiment.datasets.decode tfds|torchvision ROOT OUT.npz [--no-download]

Started by compare.experiment.datasets.frameworks so that the caller never imports TensorFlow or
torchvision. Writes the arrays to OUT.npz atomically and exits 0; on failure prints
{"error": "<one-line message>"} as the last line of stdout and exits 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from compare.errors import EXIT_INTERRUPTED, EXIT_USAGE, DataError
from compare.experiment.datasets.cache import write_cache
from compare.experiment.datasets.cifar10 import CIFAR10_CLASSES, cifar10_cache_path, offline_message
from compare.experiment.datasets.dataset import Dataset, check_arrays
from compare.experiment.datasets.frameworks import MISSING


def decode_tfds(root: Path, download: bool) -> Dataset:
    """CIFAR-10's train and test splits from tensorflow-datasets' cache at `root`."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError(MISSING["tfds"]) from None
    try:
        splits = tfds.load("cifar10", split=["train", "test"], as_supervised=True,
                           data_dir=str(root), download=download)
        (train_x, train_y), (test_x, test_y) = (_tfds_arrays(tfds, split) for split in splits)
    except Exception as exc:  # tfds raises many types for missing data / no network
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise DataError(f"tensorflow-datasets could not load cifar10 from {root} "
                        f"({exc.__class__.__name__}: {first}). "
                        + offline_message(cifar10_cache_path(), "tfds had no copy")) from None
    train_x, test_x = np.asarray(train_x, np.uint8), np.asarray(test_x, np.uint8)
    train_y, test_y = np.asarray(train_y, np.int64), np.asarray(test_y, np.int64)
    check_arrays(train_x, train_y, 10, "tfds cifar10 (train)")
    check_arrays(test_x, test_y, 10, "tfds cifar10 (test)")
    return Dataset(train_x, train_y, test_x, test_y, CIFAR10_CLASSES, "tfds", str(root))


def _tfds_arrays(tfds: Any, split: Any) -> tuple[np.ndarray, np.ndarray]:
    """A tfds split as arrays, in batches (batch_size=-1 builds one tensor of the whole split)."""
    images, labels = [], []
    for x, y in tfds.as_numpy(split.batch(4096)):
        images.append(x)
        labels.append(y)
    return np.concatenate(images), np.concatenate(labels)


def decode_torchvision(root: Path, download: bool) -> Dataset:
    """CIFAR-10 from torchvision.datasets.CIFAR10 at `root` (md5-checked by torchvision)."""
    try:
        from torchvision.datasets import CIFAR10
    except ImportError:
        raise DataError(MISSING["torchvision"]) from None
    try:
        train = CIFAR10(str(root), train=True, download=download)
        test = CIFAR10(str(root), train=False, download=False)
    except Exception as exc:  # RuntimeError for missing/corrupt data, URLError offline
        raise DataError(f"torchvision could not load CIFAR-10 from {root} "
                        f"({exc.__class__.__name__}: {exc}). "
                        + offline_message(cifar10_cache_path(), "torchvision had no copy")
                        ) from None
    train_y, test_y = np.asarray(train.targets, np.int64), np.asarray(test.targets, np.int64)
    check_arrays(train.data, train_y, len(train.classes), "torchvision CIFAR10 (train)")
    check_arrays(test.data, test_y, len(train.classes), "torchvision CIFAR10 (test)")
    return Dataset(train.data, train_y, test.data, test_y, tuple(train.classes), "torchvision",
                   str(root))


DECODERS = {"tfds": decode_tfds, "torchvision": decode_torchvision}


def write_decoded(source: str, root: Path, out: Path, download: bool) -> None:
    """Decode `source` from `root` and save its arrays at `out`: the helper process's work."""
    dataset = DECODERS[source](root, download)
    try:
        write_cache(out, dataset)
    except OSError as exc:
        raise DataError(f"could not write the decoded {source} arrays to {out}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    """Decode as the arguments say; the exit code and stdout are the answer to the caller."""
    parser = argparse.ArgumentParser(prog="python -m compare.experiment.datasets.decode",
                                     description="Decode CIFAR-10 through a framework's "
                                                 "loader into an npz (started by cnncompare).")
    parser.add_argument("source", choices=sorted(DECODERS))
    parser.add_argument("root", help="the framework's data root")
    parser.add_argument("out", help="the .npz to write")
    parser.add_argument("--no-download", action="store_true", help="fail instead of downloading")
    args = parser.parse_args(argv)
    answer = sys.stdout
    try:
        # torchvision prints its download messages to stdout, which carries only the answer
        with contextlib.redirect_stdout(sys.stderr):
            write_decoded(args.source, Path(args.root), Path(args.out), not args.no_download)
        return 0
    except DataError as exc:
        message = str(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the caller shows one line, not a traceback
        message = f"decoding {args.source} failed: {exc.__class__.__name__}: {exc}"
    print(json.dumps({"error": message}), file=answer, flush=True)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
