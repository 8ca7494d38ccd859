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
past a per-worker cap (upload_ledger.HELD_BYTES_PER_WORKER).
"""

from __future__ import annotations

import logging

import grpc

from powertrip.rpc.tensors import CHUNK_BYTES, TensorStreamError
from powertrip.v1 import aggregator_pb2
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.registry import WorkerInfo, WorkerRegistry
from services.aggregator.round import PartialUpload
from services.aggregator.upload_ledger import FINISHED, UploadLedger, UploadRefused

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
_FINISHED = FINISHED

#: the status code of each reason the ledger refuses an upload for (UploadRefused)
REFUSED_CODES = {
    "unknown_site": grpc.StatusCode.NOT_FOUND,
    "wrong_identity": grpc.StatusCode.PERMISSION_DENIED,
    "future_round": grpc.StatusCode.FAILED_PRECONDITION,
    "stale_round": grpc.StatusCode.FAILED_PRECONDITION,
    "unknown_task": grpc.StatusCode.NOT_FOUND,
    "stale_model": grpc.StatusCode.FAILED_PRECONDITION,
    "duplicate": grpc.StatusCode.ALREADY_EXISTS,
    "resume_missing": grpc.StatusCode.ABORTED,
    "resume_mismatch": grpc.StatusCode.ABORTED,
    "resume_offset": grpc.StatusCode.ABORTED,
}

_UPLOAD_STATES = {
    "accepted": aggregator_pb2.UPLOAD_STATE_ACCEPTED,
    "partial": aggregator_pb2.UPLOAD_STATE_PARTIAL,
}


class Rejected(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason = code, reason
        self.task = ""  # the upload's task id, once its header was read (for the log)

    @classmethod
    def of(cls, refused: UploadRefused) -> Rejected:
        return cls(REFUSED_CODES[refused.reason], refused.reason, str(refused))


class DeltaReceiver:
    """Receives, checks and books delta uploads; answers where a held upload stands.
    Workers are authenticated by the `registry`; the `ledger` books under the state lock."""

    def __init__(self, registry: WorkerRegistry, ledger: UploadLedger, metrics: AggregatorMetrics):
        self.registry = registry
        self.ledger = ledger
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
        info = self.registry.authenticate(header.worker_id, header.session_token)
        if info is None:
            raise Rejected(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated", "bad session token")
        hosted = self.registry.hosted_sites(info)
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
        self.ledger.drop_partial(upload)
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
        if self.ledger.hold_partial(upload, stream):
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
            self.ledger.drop_partial(upload)

    def _open(self, header, stream: object) -> PartialUpload:
        """A fresh upload: it replaces whatever the site's earlier uploads left held."""
        try:
            return self.ledger.open_upload(header.round, header.site_id, _identity(header), stream)
        except UploadRefused as exc:
            raise Rejected.of(exc) from None

    def _resume(self, header, stream: object) -> PartialUpload:
        """Take over the held upload this stream continues; ABORTED (retry after
        UploadStatus) when there is none for this session and task, it stands elsewhere,
        or the header differs from the held one (which is then dropped)."""
        site = header.site_id
        want = (header.resume.tensor_index, header.resume.offset)
        wire = _identity(header).SerializeToString(deterministic=True)
        try:
            upload, kept = self.ledger.resume_upload(
                header.round, site, header.task_id, header.worker_id, header.session_token,
                want, stream,
                same_header=lambda held: wire == held.SerializeToString(deterministic=True),
            )  # fmt: skip
        except UploadRefused as exc:
            raise Rejected.of(exc) from None
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
        try:
            where = self.ledger.upload_state(
                info, request.site_id, request.round, request.task_id, request.worker_id,
                request.session_token,
            )  # fmt: skip
        except UploadRefused as exc:
            context.abort(REFUSED_CODES[exc.reason], str(exc))
        reply = aggregator_pb2.UploadStatusResponse(total_bytes=where.total_bytes)
        if where.state in _UPLOAD_STATES:
            reply.state = _UPLOAD_STATES[where.state]
        if where.state == "partial":
            reply.next.tensor_index, reply.next.offset = where.next
            reply.bytes_held = where.bytes_held
        return reply

    def _check_task(self, header, hosted: list[str]) -> None:
        if not self.registry.is_known(header.site_id):
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
        try:
            self.ledger.check_task(
                header.round, header.task_id, header.site_id, header.model_version
            )
        except UploadRefused as exc:
            raise Rejected.of(exc) from None

    def _accept(self, header, arrays, received: int) -> None:
        """Claim the site's place under the state lock, sum its delta under the round's own
        lock, then book it: polls and authentication never wait on FedAvg arithmetic. A
        claimed delta is summed exactly once; a second upload of the site is a duplicate."""
        site = header.site_id
        try:
            current = self.ledger.claim_delta(header.round, site)
        except UploadRefused as exc:
            raise Rejected.of(exc) from None
        try:
            weight = current.fedavg_weights.get(site, float(header.num_samples))
            current.fedavg.add(site, arrays, weight)
        except BaseException:
            self.ledger.release_delta(current, site)
            raise
        self.ledger.book_delta(
            current, site, train_loss=header.train_loss, compute_wall_s=header.compute_wall_s,
            steps=header.steps, num_samples=header.num_samples, energy_j=header.energy_j,
            bytes_up=received, encoding_error=header.encoding_error,
        )  # fmt: skip


def _identity(header: aggregator_pb2.DeltaHeader) -> aggregator_pb2.DeltaHeader:
    """The header without `resume`: what every stream of one upload must repeat exactly."""
    out = aggregator_pb2.DeltaHeader()
    out.CopyFrom(header)
    out.ClearField("resume")
    return out
