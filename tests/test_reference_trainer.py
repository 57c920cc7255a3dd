"""The reference trainer's data: the product's decoded images in the layout airbench's
CifarLoader reads, and its summary of the runs."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import reference_trainer
from compare.experiment import datasets


def test_the_data_is_written_as_airbench_reads_it(tmp_path):
    torch = pytest.importorskip("torch")
    data = datasets.load("synthetic", synthetic_train_size=40, synthetic_test_size=10)
    reference_trainer.write_airbench_data(data, tmp_path / "cifar10")
    train = torch.load(tmp_path / "cifar10" / "train.pt")
    test = torch.load(tmp_path / "cifar10" / "test.pt")
    # CifarLoader: images uint8 (N, 32, 32, 3), NHWC, permuted to NCHW itself; labels int64
    assert train["images"].dtype == torch.uint8 and tuple(train["images"].shape) == (40, 32, 32, 3)
    assert np.array_equal(train["images"].numpy(), data.train_x)
    assert np.array_equal(test["labels"].numpy(), data.test_y)
    assert test["labels"].dtype == torch.int64 and train["classes"] == list(data.classes)


def test_the_summary_gives_mean_spread_and_range():
    found = reference_trainer.summary([0.93, 0.94, 0.95])
    assert found["mean"] == pytest.approx(0.94) and found["std"] == pytest.approx(0.01)
    assert (found["min"], found["max"], found["runs"]) == (0.93, 0.95, 3)
    assert reference_trainer.summary([0.9])["std"] is None
