"""One command per output directory: two runs writing the same files would interleave them.

The lock is a file in the directory holding its owner's pid, host and command, locked with
flock(2) while the owner lives: the kernel drops the lock when the process ends, however
it ends, so a lock file whose owner is gone (a stale one) is taken over, with a note.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from compare.errors import UserError

LOCK_FILE = ".cnncompare.lock"


@contextmanager
def hold(directory: str | os.PathLike, command: str) -> Iterator[Path]:
    """Hold the lock of `directory` (made if missing) while inside; a UserError naming the
    owner when another live process holds it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = _acquire(path, directory)
    try:
        previous = _owner(fd)
        if previous:
            print(f"note: --out {directory} was locked by {_describe(previous)}, which has "
                  f"ended; taking it over", file=sys.stderr, flush=True)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "command": command,
                                  "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode(), 0)
        yield path
    finally:
        path.unlink(missing_ok=True)  # before the lock goes, so no one locks a removed file
        os.close(fd)


def _acquire(path: Path, directory: Path) -> int:
    """A descriptor of `path`, flock-ed by this process."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = _owner(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise UserError(f"--out {directory}: cannot lock {path}: {exc}") from None
            raise UserError(f"--out {directory} is in use by {_describe(owner)}: wait for it "
                            f"to finish, or choose another --out") from None
        try:  # the owner may have removed the file between our open and flock: use the new one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _owner(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except ValueError:
        return {}


def _describe(owner: dict) -> str:
    if not owner:
        return "another process"
    return (f"pid {owner.get('pid')} on {owner.get('host')} ({owner.get('command', '?')}, "
            f"since {owner.get('since', '?')})")
