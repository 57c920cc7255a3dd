"""What this CPU is, as the precision rule and the reports read it: its model name, its
feature flags ($CNNCOMPARE_CPU_FLAGS where set, so one machine can be run as another)
and whether it computes bfloat16 natively, in one description. A leaf: it imports nothing
of cnncompare."""

from __future__ import annotations

import os
import platform
from pathlib import Path

# CPU flags (as /proc/cpuinfo names them) that compute bfloat16 natively, best first.
NATIVE_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")
FLAGS_ENV = "CNNCOMPARE_CPU_FLAGS"  # overrides the CPU's flags (tests; a forced choice)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (Linux /proc/cpuinfo), or $CNNCOMPARE_CPU_FLAGS when set."""
    forced = os.environ.get(FLAGS_ENV)
    if forced is not None:
        return frozenset(forced.replace(",", " ").split())
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bfloat16(flags: frozenset[str]) -> str | None:
    """The flag by which this CPU computes bfloat16 natively, or None."""
    return next((flag for flag in NATIVE_BFLOAT16_FLAGS if flag in flags), None)


def cpu_description(flags: frozenset[str] | None = None) -> str:
    """The CPU as a reader knows it: its model, cores and the instructions that decide how
    fast (and whether natively) it trains, e.g. "AMD EPYC 9R14, 2 cores, AVX-512, bfloat16
    (avx512_bf16)" or "..., AVX2, no bfloat16". The flags are those the precision rule reads
    ($CNNCOMPARE_CPU_FLAGS where set)."""
    flags = cpu_flags() if flags is None else flags
    vectors = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags
               else "no AVX2")
    native = native_bfloat16(flags)
    return (f"{cpu_name()}, {os.cpu_count()} cores, {vectors}, "
            + (f"bfloat16 ({native})" if native else "no bfloat16"))
