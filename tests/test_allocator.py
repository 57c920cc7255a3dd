"""compare/machine/allocator.py: a framework process keeps what a step frees in malloc's heap
(no page faults to get it back), and says so; a user's own malloc settings are left alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from compare.machine import allocator

GLIBC = allocator._glibc()[0] is not None
needs_glibc = pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's; this C library is not")

# A step's buffers, three of 6 MiB, made and freed; the minor page faults a step takes after
# three to warm up, and the allocator's state, printed as JSON.
STEPS = """
import json, resource, sys
import numpy as np
from compare.machine import allocator
if sys.argv[1] == "keep":
    allocator.keep_freed_memory()
def step():
    buffers = [np.ones(3 << 18) for _ in range(3)]
    del buffers
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
print(json.dumps({"faults": faults, "state": allocator.describe()}))
"""


def _steps(how: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in allocator.USER_SETTINGS}
    done = subprocess.run([sys.executable, "-c", STEPS, how], capture_output=True, text=True,
                          check=True, env={**clean, **env})
    return json.loads(done.stdout)


@needs_glibc
def test_a_framework_process_keeps_freed_buffers_and_faults_none_back_in():
    kept, default = _steps("keep"), _steps("default")
    assert kept["faults"] < 5 and default["faults"] > 100  # a 6 MiB buffer is 1,536 pages
    # glibc before 2.35 takes its own ceiling for the mmap threshold, not more
    assert kept["state"] == {"library": allocator._glibc()[1], "set_by": "cnncompare",
                             "mmap_threshold_bytes": kept["state"]["mmap_threshold_bytes"],
                             "trim_threshold_bytes": allocator.TRIM_THRESHOLD_BYTES}
    assert kept["state"]["mmap_threshold_bytes"] in (
        allocator.MMAP_THRESHOLD_BYTES, allocator.OLDER_GLIBC_MMAP_THRESHOLD_BYTES)
    assert default["state"]["set_by"].startswith("nobody: not a framework process")
    assert default["state"]["mmap_threshold_bytes"] is None


@needs_glibc
def test_malloc_settings_in_the_environment_are_the_users_and_left_alone():
    found = _steps("keep", MALLOC_ARENA_MAX="2")
    assert found["state"]["set_by"] == "the environment (MALLOC_ARENA_MAX)"
    assert found["state"]["trim_threshold_bytes"] is None
    assert found["faults"] > 100  # glibc's own thresholds: each step maps its buffers afresh


class _Glibc:
    """A C library whose mallopt takes an mmap threshold up to `most` and, unless told to
    refuse it, any trim threshold; it records what it was asked."""

    def __init__(self, most: int, refuse_trim: bool = False):
        self.most, self.refuse_trim, self.asked = most, refuse_trim, []

    def mallopt(self, parameter: int, value: int) -> int:
        self.asked.append((parameter, value))
        if parameter == allocator.M_MMAP_THRESHOLD:
            return int(value <= self.most)
        return int(not self.refuse_trim)


def test_an_older_glibc_gets_its_own_ceiling_and_a_refused_threshold_is_named(monkeypatch):
    monkeypatch.setattr(allocator, "_state", None)
    for name in allocator.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    older = _Glibc(most=32 << 20)
    monkeypatch.setattr(allocator, "_glibc", lambda: (older, "glibc 2.31"))
    state = allocator.keep_freed_memory()
    assert older.asked == [(allocator.M_MMAP_THRESHOLD, 256 << 20),
                           (allocator.M_MMAP_THRESHOLD, 32 << 20),
                           (allocator.M_TRIM_THRESHOLD, 1 << 30)]
    assert state.to_dict() == {"library": "glibc 2.31", "set_by": "cnncompare",
                               "mmap_threshold_bytes": 32 << 20,
                               "trim_threshold_bytes": 1 << 30}
    assert allocator.describe() == state.to_dict()
    stubborn = _Glibc(most=0, refuse_trim=True)
    monkeypatch.setattr(allocator, "_glibc", lambda: (stubborn, "glibc 2.17"))
    state = allocator.keep_freed_memory()
    assert state.set_by == "cnncompare (mallopt refused the mmap and trim threshold)"
    assert state.mmap_threshold_bytes is None and state.trim_threshold_bytes is None


def test_another_c_library_is_left_as_it_is(monkeypatch):
    monkeypatch.setattr(allocator, "_state", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: (None, "not glibc"))
    assert allocator.keep_freed_memory().to_dict() == {
        "library": "not glibc", "set_by": "nobody: not glibc, left as it is",
        "mmap_threshold_bytes": None, "trim_threshold_bytes": None}
