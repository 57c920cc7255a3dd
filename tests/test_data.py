"""Every data source on fixtures the tests make; caching; clear errors for bad data."""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from cifar_files import CLASSES, write_cifar_archive, write_cifar_dir, write_image
from decoding import decode_here, expected_split

from compare.errors import DataError
from compare.experiment import datasets

REPO = Path(__file__).resolve().parents[1]


def test_cifar10_archive_decodes_to_the_original_pixels(cifar_archive, cifar_batches):
    ds = datasets.load("cifar10", str(cifar_archive))
    train_x, train_y, test_x, test_y = expected_split(cifar_batches)
    assert ds.classes == CLASSES
    assert ds.train_x.dtype == np.uint8 and ds.train_x.shape == (100, 32, 32, 3)
    np.testing.assert_array_equal(ds.train_x, train_x)
    np.testing.assert_array_equal(ds.train_y, train_y)
    np.testing.assert_array_equal(ds.test_x, test_x)
    np.testing.assert_array_equal(ds.test_y, test_y)
    assert ds.train_y.dtype == np.int64


def test_cifar10_extracted_folder_and_its_parent(tmp_path, cifar_batches):
    folder = write_cifar_dir(tmp_path / "x", cifar_batches)
    for path in (folder, folder.parent):
        ds = datasets.load("cifar10", str(path))
        np.testing.assert_array_equal(ds.train_y, expected_split(cifar_batches)[1])


def test_decoded_arrays_are_cached_and_refreshed_when_the_input_changes(tmp_path, cifar_batches,
                                                                        isolated_home):
    archive = write_cifar_archive(tmp_path, cifar_batches)
    first = datasets.load("cifar10", str(archive))
    assert first.cache_path and first.cache_path.startswith(str(isolated_home))
    again = datasets.load("cifar10", str(archive))
    assert again.cache_path == first.cache_path
    np.testing.assert_array_equal(again.train_x, first.train_x)
    changed = [(b[0] // 2, b[1]) for b in cifar_batches]
    write_cifar_archive(tmp_path, changed)  # same path, new content
    refreshed = datasets.load("cifar10", str(archive))
    np.testing.assert_array_equal(refreshed.train_x, expected_split(changed)[0])


def test_normalisation_statistics_come_from_the_training_split(cifar_archive):
    ds = datasets.load("cifar10", str(cifar_archive))
    pixels = ds.train_x.reshape(-1, 3) / 255.0
    np.testing.assert_allclose(ds.mean, pixels.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(ds.std, pixels.std(axis=0), rtol=1e-4)


def test_normalisation_statistics_are_exact_and_kept_with_the_cached_arrays():
    """Computed from each channel's histogram: within one float32 ulp of the float64 mean and
    standard deviation of every pixel; saved with the cached arrays, so a later load reads
    them instead of computing them again."""
    built = datasets.load("synthetic", synthetic_train_size=300, synthetic_test_size=60)
    pixels = built.train_x.reshape(-1, 3).astype(np.float64) / 255.0
    np.testing.assert_array_max_ulp(built.mean, pixels.mean(axis=0).astype(np.float32), 1)
    np.testing.assert_array_max_ulp(built.std, pixels.std(axis=0).astype(np.float32), 1)
    again = datasets.load("synthetic", synthetic_train_size=300, synthetic_test_size=60)
    assert again.cache_path == built.cache_path
    assert "channel_stats" in vars(again)  # read with the arrays, not computed
    np.testing.assert_array_equal(again.mean, built.mean)
    np.testing.assert_array_equal(again.std, built.std)
    assert again.mean.dtype == again.std.dtype == np.float32


def test_truncated_archive_is_a_clear_error(tmp_path, cifar_archive):
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(cifar_archive.read_bytes()[: cifar_archive.stat().st_size // 2])
    with pytest.raises(DataError, match="corrupt or truncated"):
        datasets.load("cifar10", str(broken))


def test_wrong_format_archive_is_a_clear_error(tmp_path):
    wrong = tmp_path / "wrong.tar.gz"
    with tarfile.open(wrong, "w:gz") as tar:
        info = tarfile.TarInfo("readme.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    with pytest.raises(DataError, match="lacks cifar-10-batches-py/batches.meta"):
        datasets.load("cifar10", str(wrong))


def test_pickle_that_runs_code_is_refused(tmp_path, cifar_batches):
    folder = write_cifar_dir(tmp_path, cifar_batches)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (folder / "data_batch_1").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    with pytest.raises(DataError, match="refusing to load builtins.print"):
        datasets.load("cifar10", str(folder))


def test_labels_out_of_range_are_rejected(tmp_path, cifar_batches):
    folder = write_cifar_dir(tmp_path, cifar_batches, {"test_batch": [11] * 20})
    with pytest.raises(DataError, match="labels must lie in 0..9"):
        datasets.load("cifar10", str(folder))


def test_missing_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        datasets.load("cifar10", str(tmp_path / "nowhere"))


def test_offline_without_cache_names_every_way_out(monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as info:
        datasets.load("cifar10")
    message = str(info.value)
    for way in ("--data-dir", "--dataset folder", "--dataset tfds", "--dataset synthetic",
                "data fetch"):
        assert way in message


class _Response(io.BytesIO):
    def __init__(self, payload: bytes, url: str = ""):
        super().__init__(payload)
        self.headers = {"Content-Length": str(len(payload))}
        self.length = len(payload)
        self.url = url
        self.status = self.code = 200

    def geturl(self):
        return self.url

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_download_checks_md5_and_lands_in_the_cache(monkeypatch, cifar_archive, cifar_batches,
                                                     isolated_home):
    payload = cifar_archive.read_bytes()
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: _Response(payload))
    monkeypatch.setattr(datasets, "CIFAR10_MD5", hashlib.md5(payload).hexdigest())
    path = datasets.fetch_cifar10(progress=False, md5=datasets.CIFAR10_MD5)
    assert path == isolated_home / "cifar10" / "cifar-10-python.tar.gz"
    ds = datasets.load("cifar10")
    np.testing.assert_array_equal(ds.train_y, expected_split(cifar_batches)[1])


def test_download_with_wrong_md5_keeps_nothing(monkeypatch, cifar_archive, isolated_home):
    monkeypatch.setattr(urllib.request, "urlopen",
                        lambda url, timeout=None: _Response(b"not the archive"))
    with pytest.raises(DataError, match="md5"):
        datasets.fetch_cifar10(progress=False)
    assert not (isolated_home / "cifar10" / "cifar-10-python.tar.gz").exists()
    assert not list((isolated_home / "cifar10").glob("*.part"))


def test_folder_dataset_reads_png_and_jpeg(image_folder):
    ds = datasets.load("folder", str(image_folder))
    assert ds.classes == ("cat", "dog", "ship")
    assert len(ds.train_y) == 18 and len(ds.test_y) == 6
    assert np.bincount(ds.train_y).tolist() == [6, 6, 6]
    assert ds.train_x.shape[1:] == (32, 32, 3)


def test_folder_png_pixels_are_exact(tmp_path):
    image = np.arange(32 * 32 * 3, dtype=np.uint32).reshape(32, 32, 3).astype(np.uint8)
    write_image(tmp_path / "train" / "a" / "0.png", image)
    write_image(tmp_path / "test" / "a" / "0.png", image)
    ds = datasets.load("folder", str(tmp_path))
    np.testing.assert_array_equal(ds.train_x[0], image)


def test_folder_skips_broken_files_resizes_and_expands_grayscale(image_folder):
    (image_folder / "train" / "cat" / "notes.txt").write_text("not an image")
    (image_folder / "train" / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    write_image(image_folder / "train" / "ship" / "big.png", np.zeros((64, 48, 3), np.uint8))
    write_image(image_folder / "train" / "ship" / "gray.png", np.full((32, 32), 200, np.uint8))
    ds = datasets.load("folder", str(image_folder))
    assert len(ds.train_y) == 20
    assert any("skipped 2 file(s)" in n for n in ds.notes)
    assert any("resized 1 image(s)" in n for n in ds.notes)
    gray = ds.train_x[ds.train_y == 2][-1]  # sorted: gray.png is the last ship
    assert (gray == 200).all()


def test_folder_with_an_empty_class_is_refused(image_folder):
    (image_folder / "train" / "zebra").mkdir()
    with pytest.raises(DataError, match="zebra is empty"):
        datasets.load("folder", str(image_folder))


def test_folder_without_test_split_holds_out_a_seeded_share(image_folder):
    import shutil
    shutil.rmtree(image_folder / "test")
    a = datasets.load_folder(str(image_folder), seed=0, validation_fraction=0.25)
    datasets.clear_cache()
    b = datasets.load_folder(str(image_folder), seed=0, validation_fraction=0.25)
    assert len(a.test_y) == 4 and len(a.train_y) == 14
    np.testing.assert_array_equal(a.test_x, b.test_x)
    assert any("held out 4" in n for n in a.notes)


def test_folder_without_train_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no train/ folder"):
        datasets.load("folder", str(tmp_path))


def test_synthetic_is_deterministic_and_balanced():
    a = datasets.synthetic(500, 100, seed=0)
    datasets.clear_cache()
    b = datasets.synthetic(500, 100, seed=0)
    np.testing.assert_array_equal(a.train_x, b.train_x)
    assert a.train_x.dtype == np.uint8 and a.train_x.shape == (500, 32, 32, 3)
    counts = np.bincount(a.train_y, minlength=10)
    assert counts.min() > 25  # every class present in a fair share
    assert not np.array_equal(a.train_x, datasets.synthetic(500, 100, seed=1).train_x)


def test_synthetic_is_learnable_by_a_tiny_numpy_model():
    """Softmax regression on 8x8 downsampled pixels, plain gradient descent: far above chance
    (0.65-0.7 after 60 steps on 1500 images; random labels give chance)."""
    ds = datasets.synthetic(1500, 500, seed=0)

    def features(x):
        small = x.reshape(len(x), 8, 4, 8, 4, 3).mean(axis=(2, 4)).reshape(len(x), -1) / 255.0
        return np.hstack([small - 0.5, np.ones((len(x), 1))])

    xtr, xte = features(ds.train_x), features(ds.test_x)
    weights = np.zeros((xtr.shape[1], 10))
    onehot = np.eye(10)[ds.train_y]
    for _ in range(60):
        logits = xtr @ weights
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        weights -= 0.5 * xtr.T @ (p - onehot) / len(xtr)
    accuracy = ((xte @ weights).argmax(1) == ds.test_y).mean()
    assert accuracy > 0.3, accuracy  # chance is 0.1


def test_unknown_source_is_a_clear_error():
    with pytest.raises(DataError, match="unknown dataset 'mnist'"):
        datasets.load("mnist")


def test_torchvision_source_downloads_through_torchvision(monkeypatch, tmp_path, cifar_archive,
                                                          cifar_batches):
    """torchvision's own CIFAR10 loader, with only the network (urlopen) replaced."""
    from torchvision.datasets import CIFAR10
    decode_here(monkeypatch)
    payload = cifar_archive.read_bytes()
    monkeypatch.setattr(urllib.request, "urlopen", lambda request, *a, **k: _Response(
        payload, getattr(request, "full_url", request)))
    # The fixture is not the official archive: give torchvision the fixture's checksums.
    src = cifar_archive.parent / "src" / "cifar-10-batches-py"
    md5 = lambda p: hashlib.md5(p.read_bytes()).hexdigest()  # noqa: E731
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(payload).hexdigest())
    monkeypatch.setattr(CIFAR10, "train_list", [[f"data_batch_{i}", md5(src / f"data_batch_{i}")]
                                                for i in range(1, 6)])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5(src / "test_batch")]])
    monkeypatch.setattr(CIFAR10, "meta", {"filename": "batches.meta", "key": "label_names",
                                          "md5": md5(src / "batches.meta")})
    ds = datasets.load("torchvision", str(tmp_path / "tv"))
    train_x, train_y, test_x, _ = expected_split(cifar_batches)
    np.testing.assert_array_equal(ds.train_x, train_x)
    np.testing.assert_array_equal(ds.train_y, train_y)
    np.testing.assert_array_equal(ds.test_x, test_x)
    assert ds.classes == CLASSES


def test_torchvision_offline_is_a_clear_error(monkeypatch, tmp_path):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    decode_here(monkeypatch)
    with pytest.raises(DataError, match="torchvision could not load CIFAR-10"):
        datasets.load("torchvision", str(tmp_path))


def test_tfds_source_through_tensorflow_datasets(monkeypatch, tmp_path):
    """tensorflow-datasets' own loader; its mock_data replaces the download and preparation."""
    import tensorflow_datasets as tfds
    decode_here(monkeypatch)
    with tfds.testing.mock_data(num_examples=12):
        ds = datasets.load("tfds", str(tmp_path))
    assert ds.train_x.shape == (12, 32, 32, 3) and ds.train_x.dtype == np.uint8
    assert ds.test_x.shape == (12, 32, 32, 3)
    assert ds.classes == CLASSES and ds.train_y.max() < 10


def test_check_arrays_rejects_the_wrong_image_size():
    with pytest.raises(DataError, match=r"\(N, 32, 32, 3\)"):
        datasets.check_arrays(np.zeros((2, 28, 28, 3), np.uint8), np.zeros(2, np.int64), 10, "x")


def test_the_parity_probes_configs_load_the_runs_dataset():
    """The gate's and the timed configuration's probes load the run's own data, so the
    process that probes both loads it once; a config that names other data does not."""
    from compare.experiment import parity
    from compare.experiment.config import RunConfig
    run = RunConfig(dataset="synthetic", synthetic_train_size=96, synthetic_test_size=32)
    assert datasets.same_data(parity.probe_config(run), parity.timed_config(run))
    assert not datasets.same_data(run, run.replace(synthetic_test_size=64))
