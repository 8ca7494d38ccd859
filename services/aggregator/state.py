"""State shared by the aggregator's gRPC handlers and its round loop, under one lock.

Handlers only touch this object; the round loop installs a round, waits on the condition
for uploads, and advances the model, only through its methods. FedAvg arithmetic is not
done under this lock (see accumulator.py). Nothing here is global: one instance per process.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from powertrip.rpc.chunkwire import encode_chunks
from powertrip.rpc.tensors import TensorAssembler, TensorSpec, layout_of
from powertrip.v1 import aggregator_pb2, common_pb2
from services.aggregator.accumulator import RoundAccumulator
from services.aggregator.columns import site_rows


class RegistrationError(Exception):
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
    queue: list[aggregator_pb2.Task] = field(default_factory=list)
    #: set when tasks arrive or the run ends: a long poll waits on its own worker's event,
    #: so one upload does not wake every parked poller (1,000 of them under load)
    wake: threading.Event = field(default_factory=threading.Event)
    #: a poll of this worker was answered `shutdown` (the run is over and it knows)
    told_shutdown: bool = False


#: Verified bytes of interrupted uploads one worker may leave held at once (their tensor
#: buffers); at least one model's worth is always allowed. Past it the oldest held
#: upload of that worker is dropped (its site then re-sends everything).
HELD_BYTES_PER_WORKER = 4 << 30


@dataclass(eq=False)
class PartialUpload:
    """One site's delta as it arrives in a round: its header (without `resume`) and the
    assembler holding the chunks that passed their checks. One stream writes to it at a
    time, under `lock`: `owner` is that stream's handle; None while it is held for a resume
    after its stream broke. A stream that finds another owner was superseded by a resume."""

    header: aggregator_pb2.DeltaHeader
    assembler: TensorAssembler
    owner: object | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    held_since: float = 0.0

    @property
    def worker_id(self) -> str:
        return self.header.worker_id


@dataclass
class RoundInProgress:
    round: int
    model_version: int
    tasks: dict[str, aggregator_pb2.Task]  # task_id -> task
    fedavg: RoundAccumulator
    received: set[str] = field(default_factory=set)  # site ids whose delta was accepted
    #: site ids whose delta passed the checks and is being summed (off the state lock)
    accepting: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    train_loss: dict[str, float] = field(default_factory=dict)
    bytes_up: int = 0
    #: time.monotonic() when the tasks were handed out (install_round), and, per site whose
    #: delta was accepted, when that happened plus what its worker reported: the wall
    #: clock's round breakdown is measured from these, and `steps` shows each site really
    #: trained what its task asked (the data-parallel work model varies it per site)
    started_at: float = 0.0
    finished_at: dict[str, float] = field(default_factory=dict)
    compute_wall_s: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    #: per accepted site: its training samples, and the joules NVML measured (when sent)
    num_samples: dict[str, int] = field(default_factory=dict)
    energy_j: dict[str, float] = field(default_factory=dict)
    #: site id -> its FedAvg weight where the work model sets it (power-split: the samples
    #: its task trains on, local_steps x its batch); other sites weigh by num_samples
    fedavg_weights: dict[str, float] = field(default_factory=dict)
    #: site id -> its latest upload of this round that is streaming or was cut mid-stream
    #: (held for a resume); gone once complete or rejected, all dropped at the round's close
    partials: dict[str, PartialUpload] = field(default_factory=dict)

    @property
    def expected(self) -> set[str]:
        return {t.site_id for t in self.tasks.values()}

    def complete(self) -> bool:
        return self.received | self.failed >= self.expected

    def has_delta(self, site: str) -> bool:
        """The site's delta was accepted or is being summed: another one is a duplicate."""
        return site in self.received or site in self.accepting


class AggregatorState:
    def __init__(self, site_ids: list[str]):
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.all_sites = list(site_ids)
        self._known = set(site_ids)
        self.site_owner: dict[str, str] = {}
        self.workers: dict[str, WorkerInfo] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.layout: list[TensorSpec] = []
        self.model_bytes = 0
        self.model_version = 0
        self._chunks: list[tuple[bytes, int]] = []
        self.current: RoundInProgress | None = None
        self.round_no = 0  # the last round installed
        #: sites that missed a round's deadline and have not been heard from since; the
        #: policy sees them as alive=False until their worker polls or registers again
        self.dead: set[str] = set()
        self.done = False
        self.status = aggregator_pb2.RunStatus(state="waiting_for_sites", num_sites=len(site_ids))

    # ---- model -------------------------------------------------------------------------
    def set_model(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Install new global weights; chunks are serialized once and sent as they are to
        every download (`chunkwire`: the data copied once, not once per site)."""
        chunks = list(encode_chunks(weights))
        with self.lock:
            self.weights = weights
            self.layout = layout_of(weights)
            self.model_bytes = sum(s.nbytes for s in self.layout)
            self.model_version = version
            self._chunks = chunks

    def model_chunks(self, version: int) -> list[tuple[bytes, int]] | None:
        """(serialized TensorChunk, its data bytes) of model `version`; None if not current."""
        with self.lock:
            return self._chunks if version == self.model_version else None

    # ---- registration ------------------------------------------------------------------
    def register(self, worker_id: str, wanted: list[str], count: int) -> WorkerInfo:
        with self.lock:
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
                self._drop_partials(worker_id)  # held under the old session: unusable now
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
            self._requeue_open_tasks(info)
            self.status.registered_sites = len(self.site_owner)
            self.changed.notify_all()
            return info

    def _drop_partials(self, worker_id: str) -> None:
        current = self.current
        if current is not None:
            for site, upload in list(current.partials.items()):
                if upload.worker_id == worker_id:
                    del current.partials[site]

    # ---- interrupted uploads -------------------------------------------------------------
    def hold_partial(self, upload: PartialUpload, stream: object) -> bool:
        """`stream` broke: keep its upload's verified bytes for a resume, if it is still
        the site's latest upload in the current round and still `stream`'s, within the
        worker's cap (older held uploads of the worker make room first). True if held."""
        with self.lock:
            current = self.current
            site = upload.header.site_id
            if current is None or current.round != upload.header.round:
                return False
            if current.partials.get(site) is not upload:
                return False
            with upload.lock:
                if upload.owner is not stream:
                    return False  # a resume took it over: that stream decides now
                upload.owner = None
                upload.held_since = time.monotonic()
            cap = max(HELD_BYTES_PER_WORKER, self.model_bytes)
            held = sorted(
                (p for p in current.partials.values()
                 if p.worker_id == upload.worker_id and p.owner is None),
                key=lambda p: p.held_since,
            )  # fmt: skip
            total = sum(p.assembler.bytes_allocated for p in held)
            for oldest in held:
                if total <= cap:
                    break
                total -= oldest.assembler.bytes_allocated
                del current.partials[oldest.header.site_id]
            return current.partials.get(site) is upload

    def drop_partial(self, upload: PartialUpload) -> None:
        """The upload completed or was rejected: nothing of it may be resumed."""
        with self.lock:
            current = self.current
            site = upload.header.site_id
            if current is not None and current.partials.get(site) is upload:
                del current.partials[site]

    def _requeue_open_tasks(self, info: WorkerInfo) -> None:
        """A (re)joining worker gets the current round's tasks its sites still owe."""
        current = self.current
        if current is None:
            return
        done = current.received | current.failed
        for task in current.tasks.values():
            if task.site_id in info.site_ids and task.site_id not in done:
                info.queue.append(task)
                info.wake.set()

    def wait_registered(self, count: int, deadline: float) -> bool:
        """Block until `count` sites are hosted or time.monotonic() reaches `deadline`."""
        with self.lock:
            return self.changed.wait_for(
                lambda: len(self.site_owner) >= count,
                timeout=max(0.0, deadline - time.monotonic()),
            )

    # ---- liveness ----------------------------------------------------------------------
    def restore_dead(self, sites) -> None:
        with self.lock:
            self.dead = set(sites) & self._known

    def wait_any_alive(self, timeout_s: float) -> bool:
        """Block until some registered site is not dead (a poll or registration revives)."""
        with self.lock:
            return self.changed.wait_for(
                lambda: any(s not in self.dead for s in self.site_owner), timeout=timeout_s
            )

    def hide_dead(self, columns: common_pb2.SiteColumns) -> common_pb2.SiteColumns:
        """`columns` with dead sites marked unavailable (the policy must not pick them): a
        marked copy, or `columns` itself when no site is dead (copying 100,000 sites' columns
        costs milliseconds every round)."""
        dead = self.dead_sites()
        if not dead:
            return columns
        marked = common_pb2.SiteColumns()
        marked.CopyFrom(columns)
        rows = site_rows(columns, dead)
        for site in dead:
            row = rows.get(site)
            if row is not None:
                marked.alive[row] = False
        return marked

    def dead_sites(self) -> set[str]:
        with self.lock:
            return set(self.dead)

    def authenticate(self, worker_id: str, token: str) -> WorkerInfo | None:
        with self.lock:
            info = self.workers.get(worker_id)
            return info if info and tokens_match(info.session_token, token) else None

    def registered_count(self) -> int:
        with self.lock:
            return len(self.site_owner)

    # ---- rounds ------------------------------------------------------------------------
    def install_round(self, progress: RoundInProgress) -> None:
        with self.lock:
            progress.started_at = time.monotonic()
            self.current = progress
            self.round_no = progress.round
            for task in progress.tasks.values():
                owner = self.workers[self.site_owner[task.site_id]]
                owner.queue.append(task)
                owner.wake.set()
            self.changed.notify_all()

    def take_tasks(self, worker_id: str, wait_s: float) -> tuple[list[aggregator_pb2.Task], bool]:
        with self.lock:
            info = self.workers[worker_id]
            # a poll proves the worker is alive: its sites may be selected again
            if self.dead.intersection(info.site_ids):
                self.dead.difference_update(info.site_ids)
                self.changed.notify_all()
            idle = not info.queue and not self.done
            if idle:
                info.wake.clear()
        if idle:
            info.wake.wait(timeout=max(0.0, wait_s))
        with self.lock:
            tasks, info.queue = info.queue, []
            shutdown = self.done and not tasks
            if shutdown and not info.told_shutdown:
                info.told_shutdown = True
                self.changed.notify_all()
            return tasks, shutdown

    def wait_workers_told(self, timeout_s: float) -> bool:
        """Wait until every registered worker has been answered `shutdown`, or `timeout_s`
        (a worker that died or stopped polling is not waited for past it); whether all were."""
        with self.lock:
            return self.changed.wait_for(
                lambda: all(info.told_shutdown for info in self.workers.values()),
                timeout=timeout_s,
            )

    def close_round(self, progress: RoundInProgress, deadline: float) -> tuple[list[str], int]:
        """Wait for every delta or time.monotonic() reaching `deadline`, then end the round.

        A delta accepted before the end may still be summing: it counts, and is waited
        for. Sites that missed the deadline are marked failed and dead (excluded until
        heard from). Returns (those sites, sorted; how many sites are dead now).
        """
        with self.lock:
            finished = self.changed.wait_for(
                progress.complete, timeout=max(0.0, deadline - time.monotonic())
            )
            self.current = None
            progress.partials.clear()  # interrupted uploads of the round can no longer finish
            self.changed.wait_for(lambda: not progress.accepting)
            missing = [] if finished else sorted(progress.expected - progress.received)
            progress.failed.update(missing)
            self.dead.update(missing)
            return missing, len(self.dead)

    # ---- status --------------------------------------------------------------------------
    def start_running(self, max_rounds: int) -> None:
        with self.lock:
            self.status.state = "running"
            self.status.max_rounds = max_rounds

    def restore_status(self, last: common_pb2.RoundRecord, rounds: int) -> None:
        """A resumed run shows its last checkpointed round until the next one finishes."""
        with self.lock:
            self.status.last.CopyFrom(last)
            self.status.round = rounds

    def publish_round(self, last: common_pb2.RoundRecord) -> None:
        with self.lock:
            s = self.status
            s.state, s.round, s.accuracy, s.sim_time_s, s.k = (
                "running",
                last.round,
                last.accuracy,
                last.sim_time_s,
                last.k,
            )
            s.last.CopyFrom(last)

    def finish(self, state: str, message: str) -> None:
        """The run is over (`state` done or failed): wake every poller to see `shutdown`."""
        with self.lock:
            self.status.state = state
            self.status.message = message
            self.done = True
            for info in self.workers.values():
                info.wake.set()
            self.changed.notify_all()
