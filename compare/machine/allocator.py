"""The host's memory allocator in a framework process: glibc's malloc told to keep what a
training step frees (mallopt's mmap and trim thresholds fixed high), so that both loops and
both frameworks reuse freed buffers alike instead of faulting them back in. Why, and what it
changes: docs/measurement.md, "The host's allocator". A process whose environment sets
malloc's tunables keeps them; another C library is left as it is; either way the state is
recorded (`describe`).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import asdict, dataclass

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Buffers up to this size come from the heap, not a mapping of their own (bytes). Above
# glibc's own dynamic ceiling (32 MiB on 64-bit) so that a large network's activations at a
# large batch are kept too; glibc before 2.35 refuses more than that ceiling, which it then
# gets.
MMAP_THRESHOLD_BYTES = 256 << 20
OLDER_GLIBC_MMAP_THRESHOLD_BYTES = 32 << 20
# Free memory at the top of the heap is returned to the system only beyond this (bytes).
TRIM_THRESHOLD_BYTES = 1 << 30
# What a user sets glibc's malloc with before a process starts: left as set.
USER_SETTINGS = ("GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                 "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX")


@dataclass(frozen=True)
class AllocatorState:
    """How this process's malloc was set, for the fairness manifest."""

    library: str  # "glibc 2.36", or what else the process links
    set_by: str  # "cnncompare", "the environment (NAME)" or "nobody: ..."
    mmap_threshold_bytes: int | None = None  # as cnncompare set it; None: not set here
    trim_threshold_bytes: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_state: AllocatorState | None = None  # this process's, once keep_freed_memory has run


def keep_freed_memory() -> AllocatorState:
    """Fix glibc's malloc thresholds high in this process (its children by fork inherit
    them), unless the environment sets malloc's tunables or the C library is not glibc;
    the state either way, kept for `describe`."""
    global _state
    libc, version = _glibc()
    if libc is None:
        _state = AllocatorState(library=version, set_by="nobody: not glibc, left as it is")
    elif named := [name for name in USER_SETTINGS if name in os.environ]:
        _state = AllocatorState(library=version,
                                set_by=f"the environment ({', '.join(named)})")
    else:
        mmap = next((size for size in (MMAP_THRESHOLD_BYTES, OLDER_GLIBC_MMAP_THRESHOLD_BYTES)
                     if libc.mallopt(M_MMAP_THRESHOLD, size)), None)
        trim = (TRIM_THRESHOLD_BYTES if libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
                else None)
        refused = [name for name, size in (("mmap", mmap), ("trim", trim)) if size is None]
        _state = AllocatorState(
            library=version, mmap_threshold_bytes=mmap, trim_threshold_bytes=trim,
            set_by="cnncompare" + (f" (mallopt refused the {' and '.join(refused)} "
                                   "threshold)" if refused else ""))
    return _state


def describe() -> dict[str, object]:
    """This process's allocator state (the manifest's `host_allocator`)."""
    if _state is None:
        return AllocatorState(library=_glibc()[1], set_by="nobody: not a framework process "
                              "of cnncompare's, left as it is").to_dict()
    return _state.to_dict()


def _glibc() -> tuple[ctypes.CDLL | None, str]:
    """The process's C library if it is glibc (with mallopt), and its name and version."""
    try:
        libc = ctypes.CDLL(None)
        version_of = libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return None, "not glibc"
    version_of.restype = ctypes.c_char_p
    version = f"glibc {version_of().decode()}"
    if not hasattr(libc, "mallopt"):
        return None, version
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    return libc, version
