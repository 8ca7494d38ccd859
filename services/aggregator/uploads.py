"""Delta uploads for the aggregator: UploadDelta's receiving path and UploadStatus.

Every rejected delta gets a specific status code and a `powertrip_delta_rejected_total`
increment with its reason, and never reaches FedAvg.

Resumable uploads: every upload's checked chunks go into a PartialUpload of the round (in
memory only). When the stream breaks under us (the link was cut, the client vanished) its
verified bytes stay held; UploadStatus tells the worker where they end, and a new stream
whose header repeats the old one plus `resume` = that position sends only the rest, into
the same assembler. The same authentication and task checks run on every stream; a delta
is verified whole (every tensor complete, finite) and aggregated once, only when complete.
A resumed header that differs from the held one (another loss, sample count, ...) is
refused (ABORTED, resume_mismatch) and the held bytes are dropped: the next stream starts
over. Held bytes go at the round's close, on a rejected chunk, on re-registration, and
past a per-worker cap (state.HELD_BYTES_PER_WORKER).
"""

from __future__ import annotations

import logging
import math
import time

import grpc

from powertrip.rpc.tensors import CHUNK_BYTES, TensorAssembler, TensorStreamError
from powertrip.v1 import aggregator_pb2
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.state import AggregatorState, PartialUpload, WorkerInfo, tokens_match

log = logging.getLogger("aggregator")

#: Largest single upload message: one <= 1 MiB chunk plus its fields. Anything bigger is
#: refused by us (RESOURCE_EXHAUSTED, reason oversized_message) before gRPC's own 4 MiB cap.
MAX_UPLOAD_MESSAGE_BYTES = CHUNK_BYTES + 64 * 1024


def stream_error_status(reason: str) -> grpc.StatusCode:
    """Too much data is a resource problem; every other malformed stream is a bad argument."""
    return (
        grpc.StatusCode.RESOURCE_EXHAUSTED
        if reason == "oversized"
        else (grpc.StatusCode.INVALID_ARGUMENT)
    )


#: owner of a PartialUpload whose delta was assembled: nothing may resume or add to it
_FINISHED = object()


class Rejected(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason = code, reason
        self.task = ""  # the upload's task id, once its header was read (for the log)


class DeltaReceiver:
    """Receives, checks and books delta uploads; answers where a held upload stands."""

    def __init__(self, state: AggregatorState, metrics: AggregatorMetrics):
        self.state = state
        self.metrics = metrics

    def upload(self, request_iterator, context) -> aggregator_pb2.UploadDeltaResponse:
        try:
            header, arrays, received = self._receive(request_iterator, context)
        except Rejected as exc:
            self.metrics.rejected.labels(exc.reason).inc()
            of = f" for {exc.task}" if exc.task else ""
            log.warning("rejected delta%s: %s (%s)", of, exc, exc.reason)
            context.abort(exc.code, f"{exc} [reason={exc.reason}]")
        self.metrics.transfer.labels("up").inc(received)
        try:
            self._accept(header, arrays, received)
        except Rejected as exc:
            self.metrics.rejected.labels(exc.reason).inc()
            context.abort(exc.code, f"{exc} [reason={exc.reason}]")
        return aggregator_pb2.UploadDeltaResponse(accepted=True, bytes_received=received)

    def _receive(self, request_iterator, context):
        iterator = iter(request_iterator)
        try:
            first = next(iterator, None)
        except grpc.RpcError:
            raise self._aborted() from None
        if first is None or first.WhichOneof("part") != "header":
            raise Rejected(
                grpc.StatusCode.INVALID_ARGUMENT, "no_header", "stream must start with a header"
            )
        header = first.header
        try:
            return self._receive_stream(header, iterator)
        except Rejected as exc:
            exc.task = header.task_id
            raise

    def _receive_stream(self, header, iterator):
        """The rest of `_receive`, once the stream's header is known."""
        info = self.state.authenticate(header.worker_id, header.session_token)
        if info is None:
            raise Rejected(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated", "bad session token")
        with self.state.lock:
            hosted = [s for s in info.site_ids if self.state.site_owner.get(s) == info.worker_id]
        self._check_task(header, hosted)
        stream = object()  # this stream's claim on the upload
        if header.HasField("resume"):
            upload = self._resume(header, stream)
        else:
            upload = self._open(header, stream)
        try:
            for message in iterator:
                if message.WhichOneof("part") != "chunk":
                    raise Rejected(
                        grpc.StatusCode.INVALID_ARGUMENT, "order", "second header in stream"
                    )
                if message.ByteSize() > MAX_UPLOAD_MESSAGE_BYTES:
                    raise Rejected(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        "oversized_message",
                        f"a {message.ByteSize()}-byte message; chunks are at most "
                        f"{CHUNK_BYTES} bytes",
                    )
                with upload.lock:
                    self._claimed(upload, stream)
                    upload.assembler.add(message.chunk)
            with upload.lock:
                self._claimed(upload, stream)
                try:
                    arrays = upload.assembler.finish(check_finite=True)
                except TensorStreamError as exc:
                    if exc.reason != "truncated":
                        raise
                    short = exc
                else:
                    short = None
                    upload.owner = _FINISHED
            if short is not None:
                # The stream ended early. A client that was cancelled or cut off can look
                # just like one that closed its stream too soon (gRPC may end the request
                # iterator before it marks the call cancelled): refuse the delta as
                # truncated, and hold what arrived verified in case it was a cut.
                self._hold(upload, stream, header)
                raise Rejected(stream_error_status(short.reason), short.reason, str(short))
        except TensorStreamError as exc:
            self._drop(upload, stream)
            raise Rejected(stream_error_status(exc.reason), exc.reason, str(exc)) from None
        except grpc.RpcError:
            self._hold(upload, stream, header)
            raise self._aborted() from None
        except Rejected as exc:
            if exc.reason not in ("superseded", "truncated"):
                self._drop(upload, stream)
            raise
        self.state.drop_partial(upload)
        return header, arrays, upload.assembler.bytes_received

    @staticmethod
    def _claimed(upload: PartialUpload, stream: object) -> None:
        """Under upload.lock: this stream still writes the upload (a resume did not take it)."""
        if upload.owner is not stream:
            raise Rejected(
                grpc.StatusCode.ABORTED,
                "superseded",
                "a resumed stream took this upload over",
            )

    def _hold(self, upload: PartialUpload, stream: object, header) -> None:
        """The stream broke or ended early: keep its verified bytes for a resume."""
        if self.state.hold_partial(upload, stream):
            where = upload.assembler.position
            log.info(
                "upload of %s cut at tensor %d byte %d: %d verified bytes held for a resume",
                header.site_id, where[0], where[1], upload.assembler.bytes_held,
            )  # fmt: skip

    def _drop(self, upload: PartialUpload, stream: object) -> None:
        """A rejected stream's upload is not held (unless a resume took it over meanwhile)."""
        with upload.lock:
            mine = upload.owner is stream
            if mine:
                upload.owner = _FINISHED
        if mine:
            self.state.drop_partial(upload)

    def _open(self, header, stream: object) -> PartialUpload:
        """A fresh upload: it replaces whatever the site's earlier uploads left held."""
        with self.state.lock:
            layout, limit = list(self.state.layout), self.state.model_bytes
            current = self.state.current
            if current is None or current.round != header.round:
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "stale_round", "round ended")
            assembler = TensorAssembler(expected=layout, max_total_bytes=limit)
            upload = PartialUpload(_identity(header), assembler, owner=stream)
            current.partials[header.site_id] = upload
        return upload

    def _resume(self, header, stream: object) -> PartialUpload:
        """Take over the held upload this stream continues; ABORTED (retry after
        UploadStatus) when there is none for this session and task, it stands elsewhere,
        or the header differs from the held one (which is then dropped)."""
        site = header.site_id
        want = (header.resume.tensor_index, header.resume.offset)
        with self.state.lock:
            current = self.state.current
            if current is None or current.round != header.round:
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "stale_round", "round ended")
            upload = current.partials.get(site)
            held = upload.header if upload is not None else None
            if (
                held is None
                or held.task_id != header.task_id
                or held.worker_id != header.worker_id
                or not tokens_match(held.session_token, header.session_token)
            ):
                raise Rejected(
                    grpc.StatusCode.ABORTED,
                    "resume_missing",
                    "nothing of this upload is held (ask UploadStatus; send it all)",
                )
            if _identity(header).SerializeToString(deterministic=True) != held.SerializeToString(
                deterministic=True
            ):
                del current.partials[site]
                raise Rejected(
                    grpc.StatusCode.ABORTED,
                    "resume_mismatch",
                    "the resumed header differs from the interrupted one: held bytes dropped",
                )
            with upload.lock:
                where = upload.assembler.position
                if upload.owner is _FINISHED:
                    raise Rejected(
                        grpc.StatusCode.ABORTED, "resume_missing", "the upload already ended"
                    )
                if where != want:
                    raise Rejected(
                        grpc.StatusCode.ABORTED,
                        "resume_offset",
                        f"held up to tensor {where[0]} byte {where[1]}; the stream resumes at "
                        f"tensor {want[0]} byte {want[1]} (ask UploadStatus)",
                    )
                upload.owner = stream
                kept = upload.assembler.bytes_held
        self.metrics.upload_resumes.inc()
        log.info("upload of %s resumed at tensor %d byte %d (%d bytes kept)", site, *want, kept)
        return upload

    @staticmethod
    def _aborted() -> Rejected:
        """gRPC broke the stream under us: a message over the transport's 4 MiB cap (the
        client already has RESOURCE_EXHAUSTED) or a client that vanished mid-upload (its
        verified bytes are held for a resume)."""
        return Rejected(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "stream_aborted",
            "the upload stream broke (message over the size cap, or the client went away)",
        )

    def status(self, request, info: WorkerInfo, context) -> aggregator_pb2.UploadStatusResponse:
        """Where the task's upload stands (for an authenticated worker): accepted, held up
        to a position, or nothing."""
        state = self.state
        with state.lock:
            site = request.site_id
            if site not in state.site_owner and site not in set(state.all_sites):
                context.abort(grpc.StatusCode.NOT_FOUND, f"unknown site {site!r}")
            if site not in info.site_ids or state.site_owner.get(site) != info.worker_id:
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"worker {request.worker_id!r} does not host {site!r}",
                )
            current = state.current
            if current is None or current.round != request.round:
                context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"upload for round {request.round}; {_open_round(current, state.round_no)}",
                )
            task = current.tasks.get(request.task_id)
            if task is None or task.site_id != site:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no task {request.task_id!r}")
            reply = aggregator_pb2.UploadStatusResponse(total_bytes=state.model_bytes)
            if current.has_delta(site):
                reply.state = aggregator_pb2.UPLOAD_STATE_ACCEPTED
                return reply
            upload = current.partials.get(site)
            if (
                upload is not None
                and upload.header.task_id == request.task_id
                and upload.worker_id == request.worker_id
                and tokens_match(upload.header.session_token, request.session_token)
            ):
                with upload.lock:
                    if upload.owner is not _FINISHED:
                        where = upload.assembler.position
                        reply.state = aggregator_pb2.UPLOAD_STATE_PARTIAL
                        reply.next.tensor_index, reply.next.offset = where
                        reply.bytes_held = upload.assembler.bytes_held
            return reply

    def _check_task(self, header, hosted: list[str]) -> None:
        state = self.state
        if header.site_id not in state.site_owner and header.site_id not in set(state.all_sites):
            raise Rejected(
                grpc.StatusCode.NOT_FOUND, "unknown_site", f"unknown site {header.site_id!r}"
            )
        if header.site_id not in hosted:
            raise Rejected(
                grpc.StatusCode.PERMISSION_DENIED,
                "wrong_identity",
                f"worker {header.worker_id!r} does not host {header.site_id!r}",
            )
        if header.num_samples < 1:
            raise Rejected(
                grpc.StatusCode.INVALID_ARGUMENT, "num_samples", "num_samples must be >= 1"
            )
        with state.lock:
            current = state.current
            if current is None or header.round != current.round:
                have = current.round if current else state.round_no
                raise Rejected(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "future_round" if header.round > have else "stale_round",
                    f"delta for round {header.round}; {_open_round(current, have)}",
                )
            task = current.tasks.get(header.task_id)
            if task is None or task.site_id != header.site_id:
                raise Rejected(
                    grpc.StatusCode.NOT_FOUND, "unknown_task", f"no task {header.task_id!r}"
                )
            if header.model_version != task.model_version:
                raise Rejected(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "stale_model",
                    f"delta against model {header.model_version}, task was {task.model_version}",
                )
            if current.has_delta(header.site_id):
                raise Rejected(
                    grpc.StatusCode.ALREADY_EXISTS, "duplicate", "delta already received"
                )

    def _accept(self, header, arrays, received: int) -> None:
        """Claim the site's place under the state lock, sum its delta under the round's own
        lock, then book it: polls and authentication never wait on FedAvg arithmetic. A
        claimed delta is summed exactly once; a second upload of the site is a duplicate."""
        site = header.site_id
        with self.state.lock:
            current = self.state.current
            if current is None or current.round != header.round:
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "stale_round", "round ended")
            if current.has_delta(site):
                raise Rejected(
                    grpc.StatusCode.ALREADY_EXISTS, "duplicate", "delta already received"
                )
            current.accepting.add(site)
        try:
            weight = current.fedavg_weights.get(site, float(header.num_samples))
            current.fedavg.add(site, arrays, weight)
        except BaseException:
            with self.state.lock:
                current.accepting.discard(site)
                self.state.changed.notify_all()
            raise
        with self.state.lock:
            current.accepting.discard(site)
            current.received.add(site)
            current.train_loss[site] = header.train_loss
            current.finished_at[site] = time.monotonic()
            current.compute_wall_s[site] = header.compute_wall_s
            current.steps[site] = header.steps
            current.num_samples[site] = header.num_samples
            if 0 < header.energy_j < math.inf:  # NaN and inf are not a measurement
                current.energy_j[site] = header.energy_j
            current.bytes_up += received
            self.state.changed.notify_all()


def _open_round(current, last_round: int) -> str:
    """Which round takes uploads now, in words (a closed round is not 'current')."""
    if current is not None:
        return f"the open round is {current.round}"
    return f"no round is open (the last was {last_round})"


def _identity(header: aggregator_pb2.DeltaHeader) -> aggregator_pb2.DeltaHeader:
    """The header without `resume`: what every stream of one upload must repeat exactly."""
    out = aggregator_pb2.DeltaHeader()
    out.CopyFrom(header)
    out.ClearField("resume")
    return out
