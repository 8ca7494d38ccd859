"""The aggregator's end of a run: it waits for every worker to have been told `shutdown`
(a poll answered so) before it drains, and no longer than the notice for one that is gone."""

from __future__ import annotations

import threading
import time

from services.aggregator.state import AggregatorState


def _state_with_two_workers() -> AggregatorState:
    state = AggregatorState([f"site-{i:03d}" for i in range(4)])
    state.registry.register("worker-a", [], 2)
    state.registry.register("worker-b", [], 2)
    return state


def test_waits_until_every_worker_was_answered_shutdown():
    state = _state_with_two_workers()
    state.finish("done", "")
    assert state.queue.take_tasks("worker-a", 0.0) == ([], True)
    assert not state.queue.wait_workers_told(0.05)  # worker-b has not polled yet

    threading.Timer(0.1, lambda: state.queue.take_tasks("worker-b", 0.0)).start()
    start = time.monotonic()
    assert state.queue.wait_workers_told(10.0)
    assert time.monotonic() - start < 5.0  # woken by the poll, not by the timeout


def test_a_poll_before_the_end_is_not_a_shutdown_notice():
    state = _state_with_two_workers()
    assert state.queue.take_tasks("worker-a", 0.0) == ([], False)
    assert state.queue.take_tasks("worker-b", 0.0) == ([], False)
    assert not state.queue.wait_workers_told(0.05)
    state.finish("done", "")
    for worker in ("worker-a", "worker-b"):
        assert state.queue.take_tasks(worker, 0.0) == ([], True)
    assert state.queue.wait_workers_told(0.0)
