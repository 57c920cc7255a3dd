"""Two threads of one process taking turns, one working at any moment: the caller's and a
worker's that runs a loop which cannot be paused from outside (Keras' `fit`: tf_impl/own_loop.py
runs it on a worker and hands back at each of its timing windows).

Only for a framework whose thread pools are the process's (TensorFlow's): PyTorch's OpenMP
pool belongs to the thread that calls it, and a second thread's pool beside the first slows
both loops' steps on a small CPU (docs/research/cpu-timing.md,
benchmarks/research/two_threads.py), so PyTorch's own loop pauses by yielding instead
(torch_impl/own_loop.py).
"""

from __future__ import annotations

import threading


class Closed(Exception):
    """The caller closed the baton: the worker leaves its loop at its next hand-back."""


class Baton:
    """The caller hands the turn to the worker and waits for it back (`to_worker`); the worker
    hands it back and waits (`back_to_caller`), or `end`s. Once `close`d, the worker's next
    wait raises Closed."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._worker_holds = False
        self.ended = self.closed = False

    def to_worker(self) -> None:
        """Let the worker work until it hands back or ends."""
        with self._condition:
            self._worker_holds = True
            self._condition.notify_all()
            self._condition.wait_for(lambda: not self._worker_holds or self.ended)

    def back_to_caller(self) -> None:
        with self._condition:
            self._worker_holds = False
            self._condition.notify_all()
        self.wait_for_turn()

    def wait_for_turn(self) -> None:
        """The worker waits for its turn (first at its start)."""
        with self._condition:
            self._condition.wait_for(lambda: self._worker_holds or self.closed)
            if self.closed:
                raise Closed

    def end(self) -> None:
        """The worker is done: the caller's waits return at once from here on."""
        with self._condition:
            self.ended, self._worker_holds = True, False
            self._condition.notify_all()

    def close(self) -> None:
        with self._condition:
            self.closed = True
            self._condition.notify_all()
