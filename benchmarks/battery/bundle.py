"""TensorFlow's bundle as a rental carries it: its parts (c00/c.00, c01/c.01, ... and the
fallback f00/f.00, ...) one a device call, each beside the checkout, which travels with
every call; what fits, and the parts split again smaller when the checkout has grown."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

CARRY_BYTES = 64 * 2**20  # what one device call may bring: the checkout and what it carries
PART = re.compile(r"^([0-9a-f]{64})  (([a-z])(\d\d)/\3\.\4)$")


def travelling_bytes(root: Path) -> int:
    """Bytes of the checkout that every device call brings: tracked files and untracked ones
    git does not ignore (0 outside a git checkout)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root,
                            capture_output=True, check=False)
    if listed.returncode != 0:
        return 0
    paths = (root / name for name in listed.stdout.decode().split("\0") if name)
    return sum(path.stat().st_size for path in paths if path.is_file())


def parts(bundle: Path) -> dict[str, list[tuple[str, str]]]:
    """SHA256SUMS' parts by family ("c": the core, "f": the fallback cuDNN), in its order:
    (sha256, path relative to the bundle)."""
    families: dict[str, list[tuple[str, str]]] = {}
    for line in (bundle / "SHA256SUMS").read_text().splitlines():
        match = PART.match(line)
        if match is None:
            raise SystemExit(f"gpu_battery.py: {bundle / 'SHA256SUMS'}: not a part's line: "
                             f"{line!r}")
        families.setdefault(match.group(3), []).append((match.group(1), match.group(2)))
    return families


def part_bytes_that_fit(tree_bytes: int) -> int:
    """The largest part, in whole MiB, that a call carries beside the checkout and the sums
    (4 KiB at most), with 1 MiB to spare for the checkout's growth before the rental."""
    return (CARRY_BYTES - tree_bytes - 2**20 - 4096) // 2**20 * 2**20


def _pieces(bundle: Path, listed: list[tuple[str, str]], part_bytes: int) -> Iterator[bytes]:
    """The family's bytes, each part checked against its sum, in pieces of `part_bytes` (the
    last smaller)."""
    pending = bytearray()
    for expected, path in listed:
        data = (bundle / path).read_bytes()
        if hashlib.sha256(data).hexdigest() != expected:
            raise SystemExit(f"gpu_battery.py: {bundle / path}: its sum differs from "
                             f"SHA256SUMS'; not split")
        pending += data
        while len(pending) >= part_bytes:
            yield bytes(pending[:part_bytes])
            del pending[:part_bytes]
    if pending:
        yield bytes(pending)


def split(bundle: Path, part_bytes: int) -> int:
    """Each family of the bundle's parts cut again into parts of `part_bytes` (the last
    smaller), their concatenation unchanged, SHA256SUMS rewritten; the number of parts.
    Written beside the bundle, then moved in, so a failure leaves the old parts whole."""
    staging = bundle.with_name(bundle.name + ".split")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    sums = []
    try:
        for family, listed in parts(bundle).items():
            for index, piece in enumerate(_pieces(bundle, listed, part_bytes)):
                name = f"{family}{index:02d}/{family}.{index:02d}"
                (staging / name).parent.mkdir()
                (staging / name).write_bytes(piece)
                sums.append(f"{hashlib.sha256(piece).hexdigest()}  {name}\n")
    except BaseException:
        shutil.rmtree(staging)
        raise
    (staging / "SHA256SUMS").write_text("".join(sums))
    old = bundle.with_name(bundle.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    bundle.rename(old)
    staging.rename(bundle)
    shutil.rmtree(old)
    return len(sums)
