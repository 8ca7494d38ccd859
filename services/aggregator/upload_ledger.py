"""The open round's uploads as the state sees them: held, resumed, claimed and booked.

One part of the aggregator's state (state.py builds it), under the state's one lock.
uploads.py (DeltaReceiver) decides what to check and receives the bytes; this ledger reads
the round and books what arrived under the lock, so an upload never races the round's close
or a worker's re-registration.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from powertrip.rpc.tensors import TensorAssembler
from services.aggregator.broadcast import ModelBroadcast
from services.aggregator.registry import WorkerInfo, WorkerRegistry, tokens_match
from services.aggregator.round import PartialUpload, RoundInProgress
from services.aggregator.task_queue import TaskQueue

#: Verified bytes of interrupted uploads one worker may leave held at once (their tensor
#: buffers); at least one model's worth is always allowed. Past it the oldest held
#: upload of that worker is dropped (its site then re-sends everything).
HELD_BYTES_PER_WORKER = 4 << 30


#: owner of a PartialUpload whose delta was assembled: nothing may resume or add to it
FINISHED = object()


class UploadRefused(Exception):
    """An upload (or a question about one) the state cannot take; `reason` says why, in
    the words of `powertrip_delta_rejected_total` (uploads.py gives each its status code)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class UploadState:
    """Where one task's upload stands (UploadStatus): `state` accepted, partial (held up
    to tensor `next[0]` byte `next[1]`) or none; `total_bytes` is the delta's size as
    it crosses the wire (encoded as the run says)."""

    state: str
    total_bytes: int
    next: tuple[int, int] = (0, 0)
    bytes_held: int = 0


class UploadLedger:
    """Uploads of the round `queue.current`: each site's latest one (streaming or held
    for a resume after its stream broke) and the deltas claimed and booked."""

    def __init__(
        self,
        lock: threading.Condition,
        registry: WorkerRegistry,
        queue: TaskQueue,
        model: ModelBroadcast,
    ):
        self._lock = lock
        self._registry = registry
        self._queue = queue
        self._model = model

    # ---- interrupted uploads -------------------------------------------------------------
    def hold_partial(self, upload: PartialUpload, stream: object) -> bool:
        """`stream` broke: keep its upload's verified bytes for a resume, if it is still
        the site's latest upload in the current round and still `stream`'s, within the
        worker's cap (older held uploads of the worker make room first). True if held."""
        with self._lock:
            current = self._queue.current
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
            cap = max(HELD_BYTES_PER_WORKER, self._model.nbytes)
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
        with self._lock:
            current = self._queue.current
            site = upload.header.site_id
            if current is not None and current.partials.get(site) is upload:
                del current.partials[site]

    # ---- uploads (uploads.py decides what to check; these read and book under the lock) --
    def check_task(self, round_no: int, task_id: str, site: str, model_version: int) -> None:
        """A delta for task `task_id` of `site` in round `round_no`, against model
        `model_version`, fits the open round; UploadRefused says why it does not."""
        with self._lock:
            current = self._queue.current
            if current is None or round_no != current.round:
                have = current.round if current else self._queue.round_no
                raise UploadRefused(
                    "future_round" if round_no > have else "stale_round",
                    f"delta for round {round_no}; {_open_round(current, have)}",
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
        with self._lock:
            layout, limit = list(self._model.delta_layout), self._model.nbytes
            current = self._queue.current
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
        with self._lock:
            current = self._queue.current
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
        with self._lock:
            if not self._registry.is_known(site):
                raise UploadRefused("unknown_site", f"unknown site {site!r}")
            if not self._registry.hosts(info, site):
                raise UploadRefused(
                    "wrong_identity", f"worker {worker_id!r} does not host {site!r}"
                )
            current = self._queue.current
            if current is None or current.round != round_no:
                raise UploadRefused(
                    "stale_round",
                    f"upload for round {round_no}; {_open_round(current, self._queue.round_no)}",
                )
            task = current.tasks.get(task_id)
            if task is None or task.site_id != site:
                raise UploadRefused("unknown_task", f"no task {task_id!r}")
            total = self._model.delta_nbytes
            if current.has_delta(site):
                return UploadState("accepted", total)
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
                            total,
                            upload.assembler.position,
                            upload.assembler.bytes_held,
                        )
            return UploadState("none", total)

    def claim_delta(self, round_no: int, site: str) -> RoundInProgress:
        """Claim `site`'s place in the open round for a delta about to be summed (off this
        lock); the round. A claimed delta is booked or released, never both."""
        with self._lock:
            current = self._queue.current
            if current is None or current.round != round_no:
                raise UploadRefused("stale_round", "round ended")
            if current.has_delta(site):
                raise UploadRefused("duplicate", "delta already received")
            current.accepting.add(site)
            return current

    def release_delta(self, progress: RoundInProgress, site: str) -> None:
        """Summing the claimed delta failed: the site has no delta in the round."""
        with self._lock:
            progress.accepting.discard(site)
            self._lock.notify_all()

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
        encoding_error: float = 0.0,
    ) -> None:
        """The claimed delta was summed: the site delivered, with what its worker reported."""
        with self._lock:
            progress.accepting.discard(site)
            progress.received.add(site)
            progress.train_loss[site] = train_loss
            progress.finished_at[site] = time.monotonic()
            progress.compute_wall_s[site] = compute_wall_s
            progress.steps[site] = steps
            progress.num_samples[site] = num_samples
            if 0 < energy_j < math.inf:  # NaN and inf are not a measurement
                progress.energy_j[site] = energy_j
            if 0 <= encoding_error < math.inf:
                progress.encoding_error[site] = encoding_error
            progress.bytes_up += bytes_up
            self._lock.notify_all()

    # ---- for the other parts, under the lock -------------------------------------------
    def drop_worker_partials(self, info: WorkerInfo, returning: bool) -> None:
        """Under the lock (the registry calls this on every registration): uploads held
        under a returning worker's old session are unusable now."""
        current = self._queue.current
        if returning and current is not None:
            for site, upload in list(current.partials.items()):
                if upload.worker_id == info.worker_id:
                    del current.partials[site]


def _open_round(current: RoundInProgress | None, last_round: int) -> str:
    """Which round takes uploads now, in words (a closed round is not 'current')."""
    if current is not None:
        return f"the open round is {current.round}"
    return f"no round is open (the last was {last_round})"
