"""What GetStatus shows of the run: its state, its last finished round, its sites.

One part of the aggregator's state (state.py builds it), under the state's one lock. The
round loop publishes here; the counts of hosted and dead sites are read from the registry
when the status is asked for, so they are never stale.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from services.aggregator.registry import WorkerRegistry
from services.aggregator.run_result import RoundRecord


@dataclass
class RunStatus:
    """What GetStatus shows of the run (the servicer sends it as an aggregator.v1
    RunStatus); `last` is the last finished round, None before one."""

    state: str = "waiting_for_sites"  # "waiting_for_sites" | "running" | "done" | "failed"
    round: int = 0
    max_rounds: int = 0
    accuracy: float = 0.0
    sim_time_s: float = 0.0
    k: int = 0
    registered_sites: int = 0
    num_sites: int = 0
    message: str = ""
    last: RoundRecord | None = None
    #: hosted sites that missed a deadline and were not heard from since (RunStatusBoard.now)
    dead_sites: int = 0


class RunStatusBoard:
    """The run's status as the round loop last published it."""

    def __init__(self, lock: threading.Condition, registry: WorkerRegistry):
        self._lock = lock
        self._registry = registry
        self._shown = RunStatus(num_sites=len(registry.all_sites))

    def start_running(self, max_rounds: int) -> None:
        with self._lock:
            self._shown.state = "running"
            self._shown.max_rounds = max_rounds

    def restore_status(self, last: RoundRecord, rounds: int) -> None:
        """A resumed run shows its last checkpointed round until the next one finishes."""
        with self._lock:
            self._shown.last = last
            self._shown.round = rounds

    def publish_round(self, last: RoundRecord) -> None:
        with self._lock:
            s = self._shown
            s.state, s.round, s.accuracy, s.sim_time_s, s.k = (
                "running",
                last.round,
                last.accuracy,
                last.sim_time_s,
                last.k,
            )
            s.last = last

    def now(self) -> RunStatus:
        """A copy of the run's status as it stands."""
        with self._lock:
            registry = self._registry
            return replace(
                self._shown,
                registered_sites=len(registry.site_owner),
                dead_sites=len(registry.dead),
            )

    # ---- for the other parts, under the lock -------------------------------------------
    def show_end(self, state: str, message: str) -> None:
        """Under the lock: the run is over, `state` done or failed (AggregatorState.finish)."""
        self._shown.state = state
        self._shown.message = message
