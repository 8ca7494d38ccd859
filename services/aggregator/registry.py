"""Who hosts which site: worker registration, session tokens, and which sites are dead.

One part of the aggregator's state (state.py builds it), under the state's one lock. The
task queue and the upload ledger act on a (re)registration through join listeners, called
under that same lock, so a worker never sees the registration without its re-sent tasks.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from services.aggregator.domain import Profiles
from services.aggregator.tasks import Task


class RegistrationError(Exception):
    """A registration refused; `code` picks its status code (servicer.Register)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def tokens_match(given: str, want: str) -> bool:
    """Constant-time comparison of two tokens of any characters.

    `secrets.compare_digest` raises TypeError on a str with non-ASCII characters, which a
    caller controls: compare the UTF-8 bytes instead, so a strange token is just wrong."""
    return secrets.compare_digest(given.encode("utf-8"), want.encode("utf-8"))


@dataclass
class WorkerInfo:
    worker_id: str
    session_token: str
    site_ids: list[str]
    queue: list[Task] = field(default_factory=list)
    #: set when tasks arrive or the run ends: a long poll waits on its own worker's event,
    #: so one upload does not wake every parked poller (1,000 of them under load)
    wake: threading.Event = field(default_factory=threading.Event)
    #: a poll of this worker was answered `shutdown` (the run is over and it knows)
    told_shutdown: bool = False


#: called under the state lock once a worker registered: (its info, whether it had
#: registered before, i.e. its earlier session is void)
JoinListener = Callable[[WorkerInfo, bool], None]


class WorkerRegistry:
    """The run's sites, the workers hosting them, and the sites presumed dead.

    A dead site missed a round's deadline and was not heard from since: the policy sees it
    as unavailable until its worker polls or registers again, and another worker may take
    it over (a replacement host)."""

    def __init__(self, lock: threading.Condition, site_ids: list[str]):
        self._lock = lock
        self.all_sites = list(site_ids)
        self._known = set(site_ids)
        self.site_owner: dict[str, str] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.dead: set[str] = set()
        #: site -> what measures its energy (RegisterRequest.energy_meter), for the summary
        self.energy_meters: dict[str, str] = {}
        self._join_listeners: list[JoinListener] = []

    def on_join(self, listener: JoinListener) -> None:
        """Call `listener` under the lock after every registration (state.py wires them)."""
        self._join_listeners.append(listener)

    # ---- registration ------------------------------------------------------------------
    def register(
        self, worker_id: str, wanted: list[str], count: int, energy_meter: str = ""
    ) -> WorkerInfo:
        """Host `wanted` sites (or `count` free ones) on `worker_id` under a new session;
        RegistrationError (its `code` for the status code) says why not."""
        with self._lock:
            if not worker_id:
                raise RegistrationError("invalid", "worker_id must not be empty")
            previous = self.workers.get(worker_id)
            if wanted:
                unknown = [s for s in wanted if s not in self._known]
                if unknown:
                    raise RegistrationError("unknown_site", f"unknown site id(s): {unknown[:5]}")
                # a dead site may be taken over by another worker (a replacement host)
                taken = [
                    s
                    for s in wanted
                    if self.site_owner.get(s, worker_id) != worker_id and s not in self.dead
                ]
                if taken:
                    raise RegistrationError(
                        "taken", f"site(s) already hosted elsewhere: {taken[:5]}"
                    )
                sites = list(wanted)
            else:
                free = [s for s in self.all_sites if s not in self.site_owner]
                if count < 1 or count > len(free):
                    raise RegistrationError(
                        "count", f"site_count must be in 1..{len(free)} (free sites), got {count}"
                    )
                sites = free[:count]
            if previous:  # a re-registering worker keeps its old sites too
                sites = sorted(set(previous.site_ids) | set(sites))
            info = WorkerInfo(worker_id, secrets.token_hex(16), sites)
            self.workers[worker_id] = info
            for site in sites:
                owner = self.site_owner.get(site)
                if owner is not None and owner != worker_id and owner in self.workers:
                    old = self.workers[owner]
                    old.site_ids = [s for s in old.site_ids if s != site]
                    old.queue = [t for t in old.queue if t.site_id != site]
                self.site_owner[site] = worker_id
            self.dead.difference_update(sites)
            for site in sites:
                if energy_meter:
                    self.energy_meters[site] = energy_meter
                else:
                    self.energy_meters.pop(site, None)
            for listener in self._join_listeners:
                listener(info, previous is not None)
            self._lock.notify_all()
            return info

    def authenticate(self, worker_id: str, token: str) -> WorkerInfo | None:
        """The worker whose current session `token` is; None for an unknown or old one."""
        with self._lock:
            info = self.workers.get(worker_id)
            return info if info and tokens_match(info.session_token, token) else None

    def is_known(self, site: str) -> bool:
        """`site` is one of the run's sites (hosted or not)."""
        return site in self._known

    def hosted_sites(self, info: WorkerInfo) -> list[str]:
        """Those of the worker's sites it still hosts (another worker may have taken some)."""
        with self._lock:
            return [s for s in info.site_ids if self.site_owner.get(s) == info.worker_id]

    def registered_count(self) -> int:
        with self._lock:
            return len(self.site_owner)

    def wait_registered(self, count: int, deadline: float) -> bool:
        """Block until `count` sites are hosted or time.monotonic() reaches `deadline`."""
        with self._lock:
            return self._lock.wait_for(
                lambda: len(self.site_owner) >= count,
                timeout=max(0.0, deadline - time.monotonic()),
            )

    # ---- liveness ----------------------------------------------------------------------
    def restore_dead(self, sites: Iterable[str]) -> None:
        with self._lock:
            self.dead = set(sites) & self._known

    def wait_any_alive(self, timeout_s: float) -> bool:
        """Block until some registered site is not dead (a poll or registration revives)."""
        with self._lock:
            return self._lock.wait_for(
                lambda: any(s not in self.dead for s in self.site_owner), timeout=timeout_s
            )

    def hide_dead(self, profiles: Profiles) -> Profiles:
        """`profiles` with dead sites, and sites no worker has registered yet (a run that
        started with `--min-sites`), marked unavailable: the policy must not pick them. A
        marked copy, or `profiles` itself when every site is hosted and alive (copying
        100,000 sites' columns costs milliseconds every round)."""
        with self._lock:
            hidden = self.dead | self._unhosted()
        if not hidden:
            return profiles
        rows = profiles.rows_of(hidden)
        return profiles.with_dead(rows[site] for site in hidden if site in rows)

    def _unhosted(self) -> set[str]:
        """Sites of the run that no worker hosts yet (empty once all have registered)."""
        if len(self.site_owner) >= len(self._known):
            return set()
        return self._known.difference(self.site_owner)

    def dead_sites(self) -> set[str]:
        with self._lock:
            return set(self.dead)

    # ---- for the other parts, under the lock -------------------------------------------
    def host_of(self, site: str) -> WorkerInfo:
        """Under the lock: the worker hosting `site` (KeyError if none does)."""
        return self.workers[self.site_owner[site]]

    def hosts(self, info: WorkerInfo, site: str) -> bool:
        """Under the lock: `info`'s worker was given `site` and still hosts it."""
        return site in info.site_ids and self.site_owner.get(site) == info.worker_id

    def revive(self, sites: Collection[str]) -> None:
        """Under the lock: `sites` were heard from (their worker polled): alive again."""
        if self.dead.intersection(sites):
            self.dead.difference_update(sites)
            self._lock.notify_all()

    def mark_dead(self, sites: Iterable[str]) -> int:
        """Under the lock: `sites` missed a deadline; how many sites are dead now."""
        self.dead.update(sites)
        return len(self.dead)
