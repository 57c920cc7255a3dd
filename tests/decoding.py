"""Helpers of the dataset tests: the decoder run in the test's process, processes refused, and
the arrays a CIFAR-10 archive of six batches decodes to."""

from __future__ import annotations

import subprocess

import numpy as np

from compare.experiment.datasets import decode, frameworks


def decode_here(monkeypatch) -> None:
    """Run the tfds/torchvision decoder in this process, so that patches of the network,
    torchvision or tfds reach it; the helper process itself is tested apart (tests/test_data.py)."""
    monkeypatch.setattr(frameworks, "run_decoder", lambda source, root, out, download, progress:
                        decode.write_decoded(source, root, out, download))


def refuse_subprocesses(monkeypatch) -> None:
    """Fail any attempt to start a process (the decoder included)."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"started a process: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def expected_split(batches: list) -> tuple:
    """(train images, train labels, test images, test labels) of CIFAR-10's six batches."""
    train_x = np.concatenate([b[0] for b in batches[:5]])
    train_y = np.concatenate([b[1] for b in batches[:5]])
    return train_x, train_y, batches[5][0], np.array(batches[5][1])
