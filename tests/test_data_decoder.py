"""The decoder process: torchvision and tensorflow-datasets decode in a helper process the caller
never imports; a failed or silent decoder is one line; a second load is a cache hit."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from cifar_files import CLASSES, write_cifar_dir
from conftest import patience
from decoding import decode_here, expected_split, refuse_subprocesses
from processes import REPO

from compare.errors import DataError
from compare.experiment import datasets

# A sitecustomize for the helper process only: the caller sets the variable after it has
# started, so only processes it starts see it. torchvision md5-checks its files against the
# official archive's; this gives it the fixture's checksums instead, and changes nothing else.
_FIXTURE_CHECKSUMS = '''
import json
import os

if os.environ.get("CNNCOMPARE_TEST_MD5S"):
    from torchvision.datasets import CIFAR10
    _md5s = json.loads(os.environ["CNNCOMPARE_TEST_MD5S"])
    CIFAR10.train_list = [[name, _md5s[name]] for name, _ in CIFAR10.train_list]
    CIFAR10.test_list = [[name, _md5s[name]] for name, _ in CIFAR10.test_list]
    CIFAR10.meta = {**CIFAR10.meta, "md5": _md5s[CIFAR10.meta["filename"]]}
'''

# Runs in a fresh interpreter: load through the decoder, then say which frameworks got imported.
_LOAD_AND_REPORT = '''
import json, os, sys
from compare.experiment import datasets
os.environ["CNNCOMPARE_TEST_MD5S"] = sys.argv[2]
ds = datasets.load("torchvision", sys.argv[1], download=False, progress=False)
frameworks = ("torch", "torchvision", "tensorflow", "tensorflow_datasets", "keras")
print(json.dumps({"imported": [m for m in frameworks if m in sys.modules],
                  "cache_path": ds.cache_path, "classes": list(ds.classes)}))
'''


def test_torchvision_decodes_in_a_helper_process_the_caller_never_imports(
        monkeypatch, tmp_path, cifar_batches, isolated_home):
    """The real decoder process reads torchvision's own layout into the npz cache; the process
    that asked imports neither framework, and a later load (here) is a cache hit."""
    root = tmp_path / "tv"
    folder = write_cifar_dir(root, cifar_batches)  # root/cifar-10-batches-py/, as torchvision
    md5s = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_FIXTURE_CHECKSUMS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hooks), str(REPO)])}
    proc = subprocess.run([sys.executable, "-c", _LOAD_AND_REPORT, str(root), json.dumps(md5s)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=patience(300))
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["imported"] == []
    assert answer["classes"] == list(CLASSES)
    assert answer["cache_path"].startswith(str(isolated_home / "arrays" / "torchvision-"))

    refuse_subprocesses(monkeypatch)
    ds = datasets.load("torchvision", str(root))
    assert ds.cache_path == answer["cache_path"]
    train_x, train_y, test_x, test_y = expected_split(cifar_batches)
    np.testing.assert_array_equal(ds.train_x, train_x)
    np.testing.assert_array_equal(ds.train_y, train_y)
    np.testing.assert_array_equal(ds.test_x, test_x)
    np.testing.assert_array_equal(ds.test_y, test_y)
    assert ds.classes == CLASSES and ds.source == "torchvision"


@pytest.mark.parametrize("source, opening", [
    ("torchvision", "torchvision could not load CIFAR-10 from "),
    ("tfds", "tensorflow-datasets could not load cifar10 from "),
])
def test_failed_decode_is_one_data_error_line_naming_the_ways_out(
        tmp_path, isolated_home, source, opening):
    """The real decoder process, with no data and downloading off: one line, no traceback."""
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError) as info:
        datasets.load(source, str(missing), download=False, progress=False)
    message = str(info.value)
    assert message.startswith(opening + str(missing)), message
    assert "\n" not in message and "Traceback" not in message
    for way in ("--data-dir", "--dataset folder", "--dataset synthetic", "data fetch"):
        assert way in message
    assert not list(isolated_home.rglob("*.npz"))  # nothing cached from a failure


def test_second_load_is_a_cache_hit_that_starts_no_process(monkeypatch, tmp_path):
    import tensorflow_datasets as tfds
    with monkeypatch.context() as here:  # the first load decodes in this process, on mock data
        decode_here(here)
        with tfds.testing.mock_data(num_examples=12):
            first = datasets.load("tfds", str(tmp_path))
    refuse_subprocesses(monkeypatch)
    again = datasets.load("tfds", str(tmp_path))
    assert again.cache_path == first.cache_path
    np.testing.assert_array_equal(again.train_x, first.train_x)
    np.testing.assert_array_equal(again.test_y, first.test_y)
    with pytest.raises(AssertionError, match="started a process"):
        datasets.load("tfds", str(tmp_path / "elsewhere"))  # another root is another key


def test_a_decoder_that_dies_without_a_word_is_still_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a[0], -9, stdout="", stderr="last words\n"))
    with pytest.raises(DataError, match=r"failed \(killed by SIGKILL\): last words$"):
        datasets.load("torchvision", str(tmp_path), progress=False)
