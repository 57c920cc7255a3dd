"""Two threads of one process taking turns (tf_impl.own_loop.Baton): one works at a time, the
worker only between the caller's hand-over and its own hand-back; a worker that ends frees
the caller for good; closing makes the worker's next wait raise, so its thread ends."""

from __future__ import annotations

import threading
import time

from tf_impl.own_loop import Baton, Closed


def _worker(baton: Baton, log: list, steps: int, outcome: list) -> threading.Thread:
    def work() -> None:
        try:
            baton.wait_for_turn()
            for step in range(steps):
                log.append(("worker", step))
                time.sleep(0.01)  # an overlap with the caller's work would show in the log
                baton.back_to_caller()
            outcome.append("done")
        except Closed:
            outcome.append("closed")
        finally:
            baton.end()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_the_caller_and_the_worker_alternate_and_the_workers_end_frees_the_caller():
    baton, log, outcome = Baton(), [], []
    thread = _worker(baton, log, 3, outcome)
    time.sleep(0.05)
    assert log == []  # the worker waits for its first turn
    for turn in range(5):  # two more than the worker has steps: its end lets the caller on
        log.append(("caller", turn))
        baton.to_worker()
    thread.join(5)
    assert not thread.is_alive() and outcome == ["done"] and baton.ended
    assert log == [("caller", 0), ("worker", 0), ("caller", 1), ("worker", 1), ("caller", 2),
                   ("worker", 2), ("caller", 3), ("caller", 4)]


def test_closing_the_baton_ends_a_waiting_worker():
    baton, log, outcome = Baton(), [], []
    thread = _worker(baton, log, 10, outcome)
    baton.to_worker()  # one step, then the worker waits for its next turn
    baton.close()
    thread.join(5)
    assert not thread.is_alive() and outcome == ["closed"] and log == [("worker", 0)]
