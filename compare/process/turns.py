"""The parent's side of two framework runs taking turns (each run's side:
compare.run.schedule.Handover): one arbiter per pair, over a Unix socket, handing the turn
to the framework named first, then to whichever run has trained the smaller share of its
steps. A process that has ended never holds up the other. The rule and why:
docs/measurement.md, "On a busy host".
"""

from __future__ import annotations

import selectors
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Self

from compare.run.schedule import GO, HELLO, PASS

POLL_S = 0.1  # how often the arbiter looks at `ended` between messages


class Arbiter:
    """Hands the turn between the processes of `order` (framework names, the first's turn
    first) while running; `path` is the socket each process's RunConfig.turns names."""

    def __init__(self, order: tuple[str, ...]):
        self.order = order
        # a short path of its own: a Unix socket's path holds at most 107 bytes
        self._directory = Path(tempfile.mkdtemp(prefix="cnncompare-turns-"))
        self.path = str(self._directory / "turns.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(len(order))
        self._lock = threading.Lock()
        self._ended: set[str] = set()  # told by the caller: these processes are gone
        self._stop = threading.Event()
        self.turns: list[str] = []  # each framework given the turn, in order
        self._thread = threading.Thread(target=self._serve, name="turns", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    def ended(self, framework: str) -> None:
        """`framework`'s process has ended (whether or not it ever connected)."""
        with self._lock:
            self._ended.add(framework)

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        connections: dict[str, socket.socket] = {}
        waiting: set[str] = set()
        holder: str | None = None
        next_up = self.order[0]
        done: dict[str, float | None] = {}  # each one's share of its steps, as last passed
        try:
            while not self._stop.is_set():
                for key, _ in selector.select(POLL_S):
                    if key.fileobj is self._listener:
                        framework, connection = _accept(self._listener)
                        if framework in self.order and framework not in connections:
                            connections[framework] = connection
                            waiting.add(framework)
                            selector.register(connection, selectors.EVENT_READ, framework)
                        else:
                            connection.close()
                        continue
                    framework = key.data
                    message, share = _receive(connections[framework])
                    if message == PASS and framework == holder:
                        done[framework] = share
                        holder, next_up = None, self._next(framework, done)
                        waiting.add(framework)
                    elif message != PASS:  # closed: that process has ended
                        selector.unregister(connections[framework])
                        connections.pop(framework).close()
                        waiting.discard(framework)
                        self.ended(framework)  # its turn, if it held it, is freed below
                with self._lock:
                    gone = set(self._ended)
                if holder in gone:
                    holder = None
                if holder is None:
                    chosen = (next_up if next_up in waiting else
                              next(iter(waiting), None) if next_up in gone else None)
                    if chosen is not None and _send_go(connections[chosen]):
                        holder = chosen
                        waiting.discard(chosen)
                        self.turns.append(chosen)
        finally:
            for connection in connections.values():
                connection.close()
            selector.close()

    def _other(self, framework: str) -> str:
        others = [fw for fw in self.order if fw != framework]
        return others[0] if others else framework

    def _next(self, passing: str, done: dict[str, float | None]) -> str:
        """Who works next: `passing` again when it has done the smaller share, else the
        other."""
        other = self._other(passing)
        mine, theirs = done.get(passing), done.get(other)
        return passing if mine is not None and theirs is not None and mine < theirs else other


def _accept(listener: socket.socket) -> tuple[str, socket.socket]:
    """A new process's connection and the framework its HELLO names ("" if it said none)."""
    connection, _ = listener.accept()
    connection.settimeout(5.0)  # the HELLO follows the connect at once
    try:
        line = b""
        while not line.endswith(b"\n") and len(line) < 64:
            chunk = connection.recv(1)  # a byte at a time: what follows the line is not its
            if not chunk:
                break
            line += chunk
    except OSError:
        line = b""
    connection.settimeout(None)
    if not line.startswith(HELLO):
        return "", connection
    return line[len(HELLO):].strip().decode(errors="replace"), connection


def _receive(connection: socket.socket) -> tuple[bytes, float | None]:
    """The message (b"" when closed) and, with a PASS, the share of its steps done."""
    try:
        message = connection.recv(1)
        if message != PASS:
            return message, None
        line = b""
        connection.settimeout(5.0)  # s: the line is sent with the PASS, at once
        while not line.endswith(b"\n") and len(line) < 64:
            chunk = connection.recv(1)
            if not chunk:
                return b"", None
            line += chunk
        connection.settimeout(None)
    except OSError:
        return b"", None
    try:
        return message, float(line) if line.strip() else None
    except ValueError:
        return message, None


def _send_go(connection: socket.socket) -> bool:
    try:
        connection.sendall(GO)
        return True
    except OSError:
        return False
