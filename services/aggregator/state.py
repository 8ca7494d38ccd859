"""State shared by the aggregator's gRPC handlers and its round loop, under one lock.

Handlers only touch this object; the round loop installs a round, waits on the condition
for uploads, and advances the model, only through its methods. FedAvg arithmetic is not
done under this lock (see accumulator.py). Nothing here is global: one instance per process.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from powertrip.rpc.chunkwire import encode_chunks
from powertrip.rpc.tensors import TensorAssembler, TensorSpec, layout_of
from services.aggregator.domain import Profiles
from services.aggregator.round import PartialUpload, RoundInProgress
from services.aggregator.run_result import CheckpointRecord, RoundRecord
from services.aggregator.tasks import Task


class RegistrationError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class UploadRefused(Exception):
    """An upload (or a question about one) the state cannot take; `reason` says why, in
    the words of `powertrip_delta_rejected_total` (uploads.py gives each its status code)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


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
    #: hosted sites that missed a deadline and were not heard from since (status_now)
    dead_sites: int = 0


@dataclass(frozen=True)
class UploadState:
    """Where one task's upload stands (UploadStatus): `state` accepted, partial (held up
    to tensor `next[0]` byte `next[1]`) or none; `total_bytes` is the model's size."""

    state: str
    total_bytes: int
    next: tuple[int, int] = (0, 0)
    bytes_held: int = 0


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


#: Verified bytes of interrupted uploads one worker may leave held at once (their tensor
#: buffers); at least one model's worth is always allowed. Past it the oldest held
#: upload of that worker is dropped (its site then re-sends everything).
HELD_BYTES_PER_WORKER = 4 << 30


#: owner of a PartialUpload whose delta was assembled: nothing may resume or add to it
FINISHED = object()


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
        self.status = RunStatus(num_sites=len(site_ids))

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

    # ---- uploads (uploads.py decides what to check; these read and book under the lock) --
    def is_known(self, site: str) -> bool:
        """`site` is one of the run's sites (hosted or not)."""
        return site in self._known

    def hosted_sites(self, info: WorkerInfo) -> list[str]:
        """Those of the worker's sites it still hosts (another worker may have taken some)."""
        with self.lock:
            return [s for s in info.site_ids if self.site_owner.get(s) == info.worker_id]

    def check_task(self, round_no: int, task_id: str, site: str, model_version: int) -> None:
        """A delta for task `task_id` of `site` in round `round_no`, against model
        `model_version`, fits the open round; UploadRefused says why it does not."""
        with self.lock:
            current = self.current
            if current is None or round_no != current.round:
                have = current.round if current else self.round_no
                raise UploadRefused(
                    "future_round" if round_no > have else "stale_round",
                    f"delta for round {round_no}; {open_round(current, have)}",
                )
            task = current.tasks.get(task_id)
            if task is None or task.site_id != site:
                raise UploadRefused("unknown_task", f"no task {task_id!r}")
            if model_version != task.model_version:
                raise UploadRefused(
                    "stale_model",
                    f"delta against model {model_version}, task was {task.model_version}",
                )
            if current.has_delta(site):
                raise UploadRefused("duplicate", "delta already received")

    def open_upload(self, round_no: int, site: str, header: Any, owner: object) -> PartialUpload:
        """A fresh upload of `site`'s delta (its `header` without `resume`) owned by stream
        `owner`: it replaces whatever the site's earlier uploads left held."""
        with self.lock:
            layout, limit = list(self.layout), self.model_bytes
            current = self.current
            if current is None or current.round != round_no:
                raise UploadRefused("stale_round", "round ended")
            assembler = TensorAssembler(expected=layout, max_total_bytes=limit)
            upload = PartialUpload(header, assembler, owner=owner)
            current.partials[site] = upload
        return upload

    def resume_upload(
        self,
        round_no: int,
        site: str,
        task_id: str,
        worker_id: str,
        session_token: str,
        want: tuple[int, int],
        stream: object,
        same_header: Callable[[Any], bool],
    ) -> tuple[PartialUpload, int]:
        """Hand the upload held for this session and task to `stream`, which continues it
        at `want` (tensor, byte); (the upload, its bytes kept). UploadRefused when there is
        none, it stands elsewhere, or `same_header` says the held header differs (the held
        bytes are then dropped)."""
        with self.lock:
            current = self.current
            if current is None or current.round != round_no:
                raise UploadRefused("stale_round", "round ended")
            upload = current.partials.get(site)
            held = upload.header if upload is not None else None
            if (
                held is None
                or held.task_id != task_id
                or held.worker_id != worker_id
                or not tokens_match(held.session_token, session_token)
            ):
                raise UploadRefused(
                    "resume_missing",
                    "nothing of this upload is held (ask UploadStatus; send it all)",
                )
            if not same_header(held):
                del current.partials[site]
                raise UploadRefused(
                    "resume_mismatch",
                    "the resumed header differs from the interrupted one: held bytes dropped",
                )
            with upload.lock:
                where = upload.assembler.position
                if upload.owner is FINISHED:
                    raise UploadRefused("resume_missing", "the upload already ended")
                if where != want:
                    raise UploadRefused(
                        "resume_offset",
                        f"held up to tensor {where[0]} byte {where[1]}; the stream resumes at "
                        f"tensor {want[0]} byte {want[1]} (ask UploadStatus)",
                    )
                upload.owner = stream
                kept = upload.assembler.bytes_held
        return upload, kept

    def upload_state(
        self,
        info: WorkerInfo,
        site: str,
        round_no: int,
        task_id: str,
        worker_id: str,
        session_token: str,
    ) -> UploadState:
        """Where the upload of task `task_id` of `site` stands, for the authenticated worker
        `info`; UploadRefused when the site, the round or the task is not its to ask about."""
        with self.lock:
            if not self.is_known(site):
                raise UploadRefused("unknown_site", f"unknown site {site!r}")
            if site not in info.site_ids or self.site_owner.get(site) != info.worker_id:
                raise UploadRefused(
                    "wrong_identity", f"worker {worker_id!r} does not host {site!r}"
                )
            current = self.current
            if current is None or current.round != round_no:
                raise UploadRefused(
                    "stale_round",
                    f"upload for round {round_no}; {open_round(current, self.round_no)}",
                )
            task = current.tasks.get(task_id)
            if task is None or task.site_id != site:
                raise UploadRefused("unknown_task", f"no task {task_id!r}")
            if current.has_delta(site):
                return UploadState("accepted", self.model_bytes)
            upload = current.partials.get(site)
            if (
                upload is not None
                and upload.header.task_id == task_id
                and upload.worker_id == worker_id
                and tokens_match(upload.header.session_token, session_token)
            ):
                with upload.lock:
                    if upload.owner is not FINISHED:
                        return UploadState(
                            "partial",
                            self.model_bytes,
                            upload.assembler.position,
                            upload.assembler.bytes_held,
                        )
            return UploadState("none", self.model_bytes)

    def claim_delta(self, round_no: int, site: str) -> RoundInProgress:
        """Claim `site`'s place in the open round for a delta about to be summed (off this
        lock); the round. A claimed delta is booked or released, never both."""
        with self.lock:
            current = self.current
            if current is None or current.round != round_no:
                raise UploadRefused("stale_round", "round ended")
            if current.has_delta(site):
                raise UploadRefused("duplicate", "delta already received")
            current.accepting.add(site)
            return current

    def release_delta(self, progress: RoundInProgress, site: str) -> None:
        """Summing the claimed delta failed: the site has no delta in the round."""
        with self.lock:
            progress.accepting.discard(site)
            self.changed.notify_all()

    def book_delta(
        self,
        progress: RoundInProgress,
        site: str,
        *,
        train_loss: float,
        compute_wall_s: float,
        steps: int,
        num_samples: int,
        energy_j: float,
        bytes_up: int,
    ) -> None:
        """The claimed delta was summed: the site delivered, with what its worker reported."""
        with self.lock:
            progress.accepting.discard(site)
            progress.received.add(site)
            progress.train_loss[site] = train_loss
            progress.finished_at[site] = time.monotonic()
            progress.compute_wall_s[site] = compute_wall_s
            progress.steps[site] = steps
            progress.num_samples[site] = num_samples
            if 0 < energy_j < math.inf:  # NaN and inf are not a measurement
                progress.energy_j[site] = energy_j
            progress.bytes_up += bytes_up
            self.changed.notify_all()

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

    def hide_dead(self, profiles: Profiles) -> Profiles:
        """`profiles` with dead sites, and sites no worker has registered yet (a run that
        started with `--min-sites`), marked unavailable: the policy must not pick them. A
        marked copy, or `profiles` itself when every site is hosted and alive (copying
        100,000 sites' columns costs milliseconds every round)."""
        with self.lock:
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

    def unhosted_count(self) -> int:
        with self.lock:
            return len(self._unhosted())

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

    def take_tasks(self, worker_id: str, wait_s: float) -> tuple[list[Task], bool]:
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
        heard from), and FedAvg stops waiting on them. Returns (those sites, sorted; how
        many sites are dead now).
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
            dead_now = len(self.dead)
        if missing:  # off the state's lock, as every use of the accumulator's own
            progress.fedavg.skip(missing)
        return missing, dead_now

    # ---- status --------------------------------------------------------------------------
    def start_running(self, max_rounds: int) -> None:
        with self.lock:
            self.status.state = "running"
            self.status.max_rounds = max_rounds

    def checkpoint_into(self, record: CheckpointRecord) -> None:
        """The state's part of a checkpoint: which sites are dead."""
        record.dead_sites = sorted(self.dead_sites())

    def restore_checkpoint(self, record: CheckpointRecord) -> None:
        """Resume from `record`: its model, its dead sites, and its last round on show."""
        self.set_model(record.weights, version=record.model_version)
        self.restore_dead(record.dead_sites)
        if record.result.history:
            self.restore_status(record.result.history[-1], record.result.rounds)

    def restore_status(self, last: RoundRecord, rounds: int) -> None:
        """A resumed run shows its last checkpointed round until the next one finishes."""
        with self.lock:
            self.status.last = last
            self.status.round = rounds

    def publish_round(self, last: RoundRecord) -> None:
        with self.lock:
            s = self.status
            s.state, s.round, s.accuracy, s.sim_time_s, s.k = (
                "running",
                last.round,
                last.accuracy,
                last.sim_time_s,
                last.k,
            )
            s.last = last

    def status_now(self) -> RunStatus:
        """A copy of the run's status as it stands."""
        with self.lock:
            return replace(self.status, dead_sites=len(self.dead))

    def finish(self, state: str, message: str) -> None:
        """The run is over (`state` done or failed): wake every poller to see `shutdown`."""
        with self.lock:
            self.status.state = state
            self.status.message = message
            self.done = True
            for info in self.workers.values():
                info.wake.set()
            self.changed.notify_all()


def open_round(current: RoundInProgress | None, last_round: int) -> str:
    """Which round takes uploads now, in words (a closed round is not 'current')."""
    if current is not None:
        return f"the open round is {current.round}"
    return f"no round is open (the last was {last_round})"
