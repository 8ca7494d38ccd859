"""The open round and the tasks it hands each worker's long poll.

One part of the aggregator's state (state.py builds it), under the state's one lock. The
round loop installs a round, waits on the lock's condition for its deltas, and closes it;
workers take their tasks here. FedAvg arithmetic is never done under the lock (see
accumulator.py).
"""

from __future__ import annotations

import threading
import time

from services.aggregator.registry import WorkerInfo, WorkerRegistry
from services.aggregator.round import RoundInProgress
from services.aggregator.tasks import Task


class TaskQueue:
    """The round open for uploads (`current`; None between rounds), the last round
    installed (`round_no`), and whether the run is over (`done`: polls answer `shutdown`).
    The tasks themselves wait in each worker's WorkerInfo.queue."""

    def __init__(self, lock: threading.Condition, registry: WorkerRegistry):
        self._lock = lock
        self._registry = registry
        self.current: RoundInProgress | None = None
        self.round_no = 0  # the last round installed
        self.done = False

    def install_round(self, progress: RoundInProgress) -> None:
        """Open `progress` for uploads and queue each task for its site's worker."""
        with self._lock:
            progress.started_at = time.monotonic()
            self.current = progress
            self.round_no = progress.round
            for task in progress.tasks.values():
                owner = self._registry.host_of(task.site_id)
                owner.queue.append(task)
                owner.wake.set()
            self._lock.notify_all()

    def take_tasks(self, worker_id: str, wait_s: float) -> tuple[list[Task], bool]:
        """The worker's queued tasks, waiting up to `wait_s` for some (a long poll), and
        whether the run is over for it (no task will come: `shutdown`)."""
        with self._lock:
            info = self._registry.workers[worker_id]
            # a poll proves the worker is alive: its sites may be selected again
            self._registry.revive(info.site_ids)
            idle = not info.queue and not self.done
            if idle:
                info.wake.clear()
        if idle:
            info.wake.wait(timeout=max(0.0, wait_s))
        with self._lock:
            tasks, info.queue = info.queue, []
            shutdown = self.done and not tasks
            if shutdown and not info.told_shutdown:
                info.told_shutdown = True
                self._lock.notify_all()
            return tasks, shutdown

    def wait_workers_told(self, timeout_s: float) -> bool:
        """Wait until every registered worker has been answered `shutdown`, or `timeout_s`
        (a worker that died or stopped polling is not waited for past it); whether all were."""
        with self._lock:
            return self._lock.wait_for(
                lambda: all(info.told_shutdown for info in self._registry.workers.values()),
                timeout=timeout_s,
            )

    def close_round(self, progress: RoundInProgress, deadline: float) -> tuple[list[str], int]:
        """Wait for every delta or time.monotonic() reaching `deadline`, then end the round.

        A delta accepted before the end may still be summing: it counts, and is waited
        for. Sites that missed the deadline are marked failed and dead (excluded until
        heard from), and FedAvg stops waiting on them. Returns (those sites, sorted; how
        many sites are dead now).
        """
        with self._lock:
            finished = self._lock.wait_for(
                progress.complete, timeout=max(0.0, deadline - time.monotonic())
            )
            self.current = None
            progress.partials.clear()  # interrupted uploads of the round can no longer finish
            self._lock.wait_for(lambda: not progress.accepting)
            missing = [] if finished else sorted(progress.expected - progress.received)
            progress.failed.update(missing)
            dead_now = self._registry.mark_dead(missing)
        if missing:  # off the state's lock, as every use of the accumulator's own
            progress.fedavg.skip(missing)
        return missing, dead_now

    # ---- for the other parts, under the lock -------------------------------------------
    def requeue_open_tasks(self, info: WorkerInfo) -> None:
        """Under the lock: a (re)joining worker gets the current round's tasks its sites
        still owe (the registry calls this on every registration)."""
        current = self.current
        if current is None:
            return
        done = current.received | current.failed
        for task in current.tasks.values():
            if task.site_id in info.site_ids and task.site_id not in done:
                info.queue.append(task)
                info.wake.set()

    def shut_down(self) -> None:
        """Under the lock: no task will come; wake every poller to see `shutdown`."""
        self.done = True
        for info in self._registry.workers.values():
            info.wake.set()
        self._lock.notify_all()
