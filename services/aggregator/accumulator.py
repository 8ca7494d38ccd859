"""One round's FedAvg sum behind its own lock, apart from the aggregator's state lock.

Uploads add their deltas here while the state lock is free, so long polls and
authentication never wait on arithmetic. StreamingFedAvg sums in the dispatch order
whatever order deltas arrive in (it parks early ones), so which upload takes this lock
first cannot change a byte of the result.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from powertrip.core.fedavg import StreamingFedAvg
from services.aggregator.audit import RoundAudit


class RoundAccumulator:
    """A StreamingFedAvg that several upload threads and the round loop share safely."""

    def __init__(
        self,
        order: Sequence[str],
        template: Mapping[str, np.ndarray],
        audit: RoundAudit | None = None,
    ):
        self._lock = threading.Lock()
        self._fedavg = StreamingFedAvg(order, template)
        self._audit = audit

    def add(self, site: str, delta: Mapping[str, np.ndarray], weight: float) -> None:
        with self._lock:
            self._fedavg.add(site, delta, weight)
            if self._audit is not None:
                self._audit.record(site, delta, weight)

    def skip(self, sites: Iterable[str]) -> None:
        """These sites will not contribute (they missed the deadline): stop waiting on them."""
        with self._lock:
            for site in sites:
                self._fedavg.skip(site)

    def result(self) -> dict[str, np.ndarray]:
        with self._lock:
            return self._fedavg.result()

    def commit_audit(self) -> None:
        """The round's model is installed: finalise its audit record (if one is kept)."""
        if self._audit is not None:
            self._audit.commit(self.contributors)

    @property
    def contributors(self) -> list[str]:
        """Sites whose deltas are in the sum, in the order they were added."""
        with self._lock:
            return list(self._fedavg.contributors)
