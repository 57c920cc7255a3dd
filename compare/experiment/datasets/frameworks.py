"""CIFAR-10 through tensorflow-datasets or torchvision, decoded once in a helper process.

The decoder (`python -m compare.experiment.datasets.decode`) leaves the arrays in the npz cache, so
the calling process never imports TensorFlow or torchvision for these sources: a PyTorch
trainer that loaded TensorFlow first would abort when torch's compiler starts (both bring
LLVM). The cache is keyed on the source and the resolved data root, so a later load reads
the npz and starts no process.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from compare.errors import DataError
from compare.experiment.datasets.cache import cache_file, home, read_cache
from compare.experiment.datasets.dataset import Dataset
from compare.experiment.frameworks import process_environment

log = logging.getLogger("cnncompare.data")

# The module each source needs, and what to do without it.
REQUIRES = {"tfds": "tensorflow_datasets", "torchvision": "torchvision"}
MISSING = {"tfds": "--dataset tfds needs tensorflow-datasets: pip install tensorflow-datasets",
           "torchvision": "--dataset torchvision needs torchvision: pip install torchvision"}


def load_tfds(data_dir: str | None, download: bool = True, progress: bool = True) -> Dataset:
    """CIFAR-10 through tensorflow-datasets and its cache (data_dir or $CNNCOMPARE_HOME/tfds)."""
    return load_decoded("tfds", data_dir, download, progress)


def load_torchvision(data_dir: str | None, download: bool = True,
                     progress: bool = True) -> Dataset:
    """CIFAR-10 through torchvision.datasets.CIFAR10 and its root (data_dir or
    $CNNCOMPARE_HOME/torchvision)."""
    return load_decoded("torchvision", data_dir, download, progress)


def load_decoded(source: str, data_dir: str | None, download: bool, progress: bool) -> Dataset:
    """`source` from the npz cache, decoding it in a helper process on a miss.

    Args:
        source: "tfds" or "torchvision".
        data_dir: the framework's data root; None means $CNNCOMPARE_HOME/<source>.
        download: let the framework download CIFAR-10 into the root when it is not there.
        progress: show the helper's output (download progress) on stderr.

    Raises:
        DataError: one line saying what went wrong and the ways out, never a traceback.
    """
    root = Path(data_dir) if data_dir else home() / source
    path = cache_file(source, str(root.resolve()))
    dataset = read_cache(path, source)
    if dataset is not None:
        return dataset
    if importlib.util.find_spec(REQUIRES[source]) is None:
        raise DataError(MISSING[source])
    if _writable(path.parent):
        run_decoder(source, root, path, download, progress)
        return _read_decoded(path, source)
    log.warning("could not write the cache in %s; decoding into a temporary file", path.parent)
    with tempfile.TemporaryDirectory(prefix="cnncompare-") as tmp:
        out = Path(tmp) / path.name
        run_decoder(source, root, out, download, progress)
        dataset = _read_decoded(out, source)  # np.load has read the arrays into memory
    dataset.cache_path = None
    return dataset


def _writable(folder: Path) -> bool:
    """Whether the decoder can write into `folder` (created if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _read_decoded(path: Path, source: str) -> Dataset:
    """The arrays the decoder wrote; DataError if it left none."""
    dataset = read_cache(path, source)
    if dataset is None:
        raise DataError(f"the {source} decoder reported success but left no readable "
                        f"arrays at {path}")
    return dataset


def run_decoder(source: str, root: Path, out: Path, download: bool, progress: bool) -> None:
    """Run `python -m compare.experiment.datasets.decode` to write `source`'s arrays to `out`.

    Raises DataError with the decoder's one-line message when it fails.
    """
    argv = [sys.executable, "-m", "compare.experiment.datasets.decode", source, str(root), str(out)]
    if not download:
        argv.append("--no-download")
    # stdout carries only the decoder's answer; its stderr (download progress, framework
    # warnings) reaches the terminal when progress is wanted, else is kept for the message.
    proc = subprocess.run(argv, env=process_environment(), stdout=subprocess.PIPE,
                          stderr=None if progress else subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise DataError(_failure(source, proc))


def _failure(source: str, proc: subprocess.CompletedProcess) -> str:
    """The decoder's own error message, or how it died when it could not say."""
    for line in reversed(proc.stdout.splitlines()):
        try:
            return str(json.loads(line)["error"])
        except (ValueError, KeyError, TypeError):
            continue
    code = proc.returncode
    try:
        why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    except ValueError:  # a signal number Python has no name for
        why = f"exit code {code}"
    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
    tail = f": {lines[-1].strip()}" if lines else ""
    return (f"decoding {source} in a helper process "
            f"(python -m compare.experiment.datasets.decode) failed ({why}){tail}")
