"""TensorFlow's bundle as a rental carries it (benchmarks/battery/bundle.py): what travels
with every device call, and the parts split again when a part no longer fits beside it."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from benchmarks.battery import bundle, calls


def _bundle(root: Path, families: dict[str, list[bytes]]) -> Path:
    folder, sums = root / ".tfgpu", []
    for family, pieces in families.items():
        for index, piece in enumerate(pieces):
            name = f"{family}{index:02d}/{family}.{index:02d}"
            (folder / name).parent.mkdir(parents=True)
            (folder / name).write_bytes(piece)
            sums.append(f"{hashlib.sha256(piece).hexdigest()}  {name}\n")
    (folder / "SHA256SUMS").write_text("".join(sums))
    return folder


def _family(folder: Path, family: str) -> bytes:
    """The family's parts in SHA256SUMS' order, each checked against its sum, joined."""
    joined = b""
    for expected, path in bundle.parts(folder)[family]:
        data = (folder / path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == expected
        joined += data
    return joined


def test_split_cuts_each_family_again_and_keeps_its_bytes_in_order(tmp_path):
    core = [os.urandom(1000), os.urandom(1000), os.urandom(500)]
    fallback = [os.urandom(700)]
    folder = _bundle(tmp_path, {"c": core, "f": fallback})
    assert bundle.split(folder, 600) == 5 + 2
    assert _family(folder, "c") == b"".join(core) and _family(folder, "f") == fallback[0]
    sizes = [(folder / path).stat().st_size for _, path in bundle.parts(folder)["c"]]
    assert sizes == [600, 600, 600, 600, 100]
    assert max((folder / path).stat().st_size for family in bundle.parts(folder).values()
               for _, path in family) == 600
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tfgpu"]  # no staging left


def test_a_part_whose_sum_differs_is_not_split_and_the_bundle_stays_whole(tmp_path):
    folder = _bundle(tmp_path, {"c": [b"a" * 100, b"b" * 100]})
    (folder / "c01" / "c.01").write_bytes(b"x" * 100)
    with pytest.raises(SystemExit, match="c.01: its sum differs"):
        bundle.split(folder, 30)
    assert (folder / "c00" / "c.00").read_bytes() == b"a" * 100
    assert len(bundle.parts(folder)["c"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tfgpu"]  # no staging left


def test_what_travels_is_the_checkout_git_keeps_not_what_it_ignores(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/.tfgpu/\n")
    (tmp_path / "tracked.py").write_bytes(b"t" * 1000)
    git("add", ".")
    (tmp_path / "untracked.md").write_bytes(b"u" * 300)
    _bundle(tmp_path, {"c": [b"z" * 5000]})
    assert bundle.travelling_bytes(tmp_path) == 1000 + 300 + len("/.tfgpu/\n")
    assert bundle.travelling_bytes(Path("/")) == 0  # not a checkout


def test_the_plan_refuses_a_part_that_does_not_fit_beside_the_checkout(tmp_path, monkeypatch):
    """A part of 56 MiB beside a checkout of 8.4 MiB is over the 64 MiB a call brings (an
    H100 rental refused it so): the plan says so before the rental, with the size to split
    to, and takes the parts once split (here in units of MiB: 10 a call, 5 of checkout)."""
    mib = 2**20
    monkeypatch.setattr(bundle, "CARRY_BYTES", 10 * mib)
    monkeypatch.setattr(calls, "CARRY_BYTES", 10 * mib)
    monkeypatch.setattr(calls, "travelling_bytes", lambda root: 5 * mib)
    planned = [{"framework": "torch", "rental": 1, "stages": ["doctor"], "estimate_s": 30},
               {"framework": "tf", "rental": 1, "stages": ["tf-smoke"], "estimate_s": 10}]
    folder = _bundle(tmp_path, {"c": [b"p" * 6 * mib]})
    with pytest.raises(SystemExit, match=r"bring 6\.0 MiB beside the checkout's 5\.0 MiB, "
                                         r"over 10 MiB; .* --bundle \.tfgpu --split-parts 3$"):
        calls.rental_calls(planned, tmp_path, folder, None)
    assert bundle.split(folder, 3 * mib) == 2
    carried = [c for call in calls.rental_calls(planned, tmp_path, folder, None)
               for c in call["carry"]]
    assert sorted(carried) == [".tfgpu/SHA256SUMS", ".tfgpu/SHA256SUMS", ".tfgpu/c00",
                               ".tfgpu/c01"]
