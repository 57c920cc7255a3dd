"""The host beside a timed stage: whether it is quiet when the stage starts (nothing else
training, unpacking or copying there), and what else ran on it while the stage ran."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# Set by a rental's queue (benchmarks/battery/rental.sh): a file that exists once the rental's
# last transfer is over (no part of TensorFlow's bundle still arriving, copied or unpacked).
QUIET_MARKER_ENV = "BATTERY_QUIET_MARKER"
# Work that skews a timed stage beside it: training (cnncompare, the battery, the reference
# trainer) and the bundle's arrival (its parts checked, copied, decompressed, unpacked).
BUSY_PROGRAMS = ("xz", "unxz", "tar", "sha256sum", "cp", "rsync")
BUSY_ARGUMENTS = ("benchmarks.gpu_battery", "benchmarks.reference_trainer",
                  "benchmarks.tool_overhead", "compare.cli", "rental.sh part")


def _ancestors(pid: int) -> set[int]:
    found = set()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the name: the parent
    return found


def work_beside(own_pid: int | None = None, proc: Path = Path("/proc")) -> list[str]:
    """Other work on this host that a timed stage would share it with: each process (not
    this one or its ancestors) whose program or arguments BUSY_* name, as 'PID: command'."""
    mine = _ancestors(own_pid or os.getpid())
    found = []
    for entry in proc.glob("[0-9]*"):
        if int(entry.name) in mine:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if not words:
            continue
        line = " ".join(words)
        if (Path(words[0]).name in BUSY_PROGRAMS
                or any(Path(w).name == "cnncompare" for w in words[:2])
                or any(a in line for a in BUSY_ARGUMENTS)):
            found.append(f"{entry.name}: {line[:120]}")
    return found


def host_busy(marker: str | None = None) -> list[str]:
    """Why this host is not quiet now (empty: it is): the rental's transfers not yet over
    (`marker`, from QUIET_MARKER_ENV, missing) and the work beside this process."""
    marker = marker if marker is not None else os.environ.get(QUIET_MARKER_ENV)
    waiting = ([f"the rental's transfers are not over ({marker} missing)"]
               if marker and not Path(marker).exists() else [])
    return waiting + work_beside()


QUIET_WAIT_S = 300  # at most, before a timed stage is refused


def wait_for_quiet_host(limit_s: float, poll_s: float = 2.0) -> tuple[float, list[str]]:
    """Wait up to `limit_s` (at most QUIET_WAIT_S) for a quiet host: (seconds waited, what
    was still beside it at the end; empty when the host went quiet)."""
    limit_s = min(limit_s, QUIET_WAIT_S)
    started = time.perf_counter()
    busy = host_busy()
    while busy and time.perf_counter() - started < limit_s:
        time.sleep(poll_s)
        busy = host_busy()
    return time.perf_counter() - started, busy


# ------------------------------------------------------------------ watched while it runs

# Copies and unpacks, whatever their name's work: BUSY_PROGRAMS and the tools a device call or
# an install copies with. Sighted only at work (any CPU or bytes written in an interval): a
# `cat` waiting on a pipe disturbs nothing.
COPY_PROGRAMS = (*BUSY_PROGRAMS, "cat", "dd", "gzip", "gunzip", "pigz", "zstd", "scp", "pip",
                 "pip3")
WATCH_INTERVAL_S = 3.0  # a sample of the host every so often while a timed stage runs
CPU_PERCENT = 5.0  # of one core over an interval: above it another process is a co-runner
WRITE_BYTES = 4 * 2**20  # written by another process in one interval: a copy, whatever its name
KEPT_SIGHTINGS = 100  # in the record, the first ones; the count and each process are all kept
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class _Process:
    ppid: int
    started: int  # clock ticks after boot: a pid used again is another process
    ticks: int  # CPU time, user and system
    wrote: int | None  # bytes written (/proc/PID/io's wchar; None where it cannot be read)
    argv: tuple[str, ...]


def _read(entry: Path) -> _Process | None:
    try:
        stat = (entry / "stat").read_text()
        argv = tuple(a.decode(errors="replace") for a in
                     (entry / "cmdline").read_bytes().split(b"\0") if a)
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # from the state on: the name may hold spaces
    try:
        io = (entry / "io").read_text()
        wrote = int(next(line.split()[1] for line in io.splitlines()
                         if line.startswith("wchar:")))
    except (OSError, StopIteration, ValueError):
        wrote = None
    return _Process(int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12]), wrote,
                    argv)


def _copying(argv: tuple[str, ...]) -> bool:
    line = " ".join(argv)
    return (Path(argv[0]).name in COPY_PROGRAMS
            or any(Path(w).name == "cnncompare" for w in argv[:2])
            or any(a in line for a in BUSY_ARGUMENTS))


class HostWatch:
    """While a timed stage runs (`with HostWatch(): ...`), a background thread samples the host
    every `interval_s` and records each sighting of other work: a process outside the stage's
    own tree (this process, its ancestors, and its descendants, the stage's commands and
    their children) that used more than `cpu_percent` of a core or wrote more than
    `write_bytes` in an interval, or a copy or unpack (COPY_PROGRAMS; work_beside's
    arguments) at work. A process that starts and ends between two samples goes unseen."""

    def __init__(self, interval_s: float | None = None, cpu_percent: float = CPU_PERCENT,
                 write_bytes: int = WRITE_BYTES, own_pid: int | None = None,
                 proc: Path = Path("/proc")):
        self.interval_s = interval_s or WATCH_INTERVAL_S
        self.cpu_percent, self.write_bytes = cpu_percent, write_bytes
        self.own_pid, self.proc = own_pid or os.getpid(), proc
        self.ancestors = _ancestors(self.own_pid)
        self.sightings: list[dict] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="host-watch", daemon=True)
        self._last: dict[int, _Process] = {}
        self._last_at = self._started = 0.0

    def __enter__(self) -> HostWatch:
        self._started = self._last_at = time.perf_counter()
        self._last = self._processes()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # what ran since the last sample, up to the stage's end
        self.watched_s = time.perf_counter() - self._started

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _processes(self) -> dict[int, _Process]:
        found = {}
        for entry in self.proc.glob("[0-9]*"):
            process = _read(entry)
            if process is not None and process.argv:  # kernel threads have no command line
                found[int(entry.name)] = process
        return found

    def _own(self, processes: dict[int, _Process]) -> set[int]:
        """This process's ancestors, itself and every descendant it has now."""
        children: dict[int, list[int]] = {}
        for pid, process in processes.items():
            children.setdefault(process.ppid, []).append(pid)
        own, pending = set(self.ancestors), [self.own_pid]
        while pending:
            pid = pending.pop()
            own.add(pid)
            pending += [c for c in children.get(pid, []) if c not in own]
        return own

    def _sample(self) -> None:
        now, processes = time.perf_counter(), self._processes()
        interval = max(now - self._last_at, 1e-3)
        own = self._own(processes)
        at = now - self._started
        for pid, process in processes.items():
            if pid in own:
                continue
            before = self._last.get(pid)
            if before is not None and before.started != process.started:
                before = None  # the pid went to another process: all of this one's is new
            ticks = process.ticks - (before.ticks if before else 0)
            cpu = 100.0 * ticks / CLOCK_TICKS / interval
            wrote = ((process.wrote - (before.wrote if before and before.wrote is not None
                                       else 0)) if process.wrote is not None else 0)
            why = ("cpu" if cpu > self.cpu_percent else "writes" if wrote > self.write_bytes
                   else "copy" if _copying(process.argv) and (ticks > 0 or wrote > 0)
                   else None)
            if why is not None:
                self.sightings.append({
                    "at_s": round(at, 1), "time": time.strftime("%H:%M:%S"), "pid": pid,
                    "command": " ".join(process.argv).replace("\n", " ")[:160],
                    "cpu_percent": round(cpu, 1),
                    "wrote_mib": round(wrote / 2**20, 1), "why": why})
        self._last, self._last_at = processes, now
        self.samples += 1

    def record(self) -> dict:
        """What the watch saw: quiet or not, each process sighted (when first and last, at
        most how much CPU, written in all) and the first sightings; `note`, a line for the
        summary where the host was not quiet."""
        by_pid: dict[int, dict] = {}
        for seen in self.sightings:
            entry = by_pid.setdefault(seen["pid"], {
                "pid": seen["pid"], "command": seen["command"], "first_s": seen["at_s"],
                "sightings": 0, "max_cpu_percent": 0.0, "wrote_mib": 0.0})
            entry.update(last_s=seen["at_s"], sightings=entry["sightings"] + 1,
                         max_cpu_percent=max(entry["max_cpu_percent"], seen["cpu_percent"]),
                         wrote_mib=round(entry["wrote_mib"] + seen["wrote_mib"], 1))
        return {"quiet": not self.sightings, "watched_s": round(getattr(self, "watched_s", 0), 1),
                "interval_s": self.interval_s, "samples": self.samples,
                "cpu_percent_threshold": self.cpu_percent,
                "write_mib_threshold": round(self.write_bytes / 2**20, 1),
                "sightings": len(self.sightings), "processes": list(by_pid.values()),
                "first_sightings": self.sightings[:KEPT_SIGHTINGS],
                "note": not_quiet(self.sightings)}


def not_quiet(sightings: list[dict]) -> str | None:
    """'host not quiet: N sightings, e.g. ...' (the busiest sighting), or None."""
    if not sightings:
        return None
    worst = max(sightings, key=lambda s: (s["cpu_percent"], s["wrote_mib"]))
    return (f"host not quiet: {len(sightings)} sighting{'s' if len(sightings) != 1 else ''}, "
            f"e.g. {worst['pid']}: {worst['command'][:60]} ({worst['cpu_percent']:.0f}% CPU"
            + (f", {worst['wrote_mib']:.0f} MiB written" if worst["wrote_mib"] >= 1 else "")
            + f", at +{worst['at_s']:.0f} s)")
