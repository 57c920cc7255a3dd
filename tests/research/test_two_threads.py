"""benchmarks/research/two_threads.py: two models of one framework trained in turn, from one thread
or from two, each model's median ms a step."""

from __future__ import annotations

import threading

import pytest

from benchmarks.research import two_threads


@pytest.mark.parametrize("form", two_threads.FORMS)
def test_both_models_are_timed_in_either_form_and_two_threads_use_a_second_thread(
        form, monkeypatch):
    callers: set[str] = set()
    built = two_threads.torch_calls

    def watched(batch):
        calls = built(batch)

        def wrap(call):
            def run():
                callers.add(threading.current_thread().name)
                call()
            return run
        return [wrap(call) for call in calls]
    monkeypatch.setattr(two_threads, "torch_calls", watched)
    medians = two_threads.measure("torch", form, batch=2, count=2)
    assert len(medians) == 2 and all(ms > 0 for ms in medians)
    assert len(callers) == (1 if form == "one thread" else 2)
