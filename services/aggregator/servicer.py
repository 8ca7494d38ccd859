"""gRPC face of the aggregator: registration, long-poll tasks, model download, delta upload.

Every rejected delta gets a specific status code and a `powertrip_delta_rejected_total`
increment with its reason, and never reaches FedAvg.
"""

from __future__ import annotations

import logging
import time

import grpc

from powertrip.rpc.tensors import CHUNK_BYTES, TensorAssembler, TensorStreamError
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.state import AggregatorState, RegistrationError, tokens_match

SERVICE_NAME = aggregator_pb2.DESCRIPTOR.services_by_name["Aggregator"].full_name
MAX_LONG_POLL_S = 30.0
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


class Rejected(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason = code, reason


class AggregatorServicer(aggregator_pb2_grpc.AggregatorServicer):
    def __init__(
        self,
        state: AggregatorState,
        spec: aggregator_pb2.RunSpec,
        metrics: AggregatorMetrics,
        join_token: str = "",
        site_tokens: dict[str, str] | None = None,
    ):
        self.state = state
        self.spec = spec
        self.metrics = metrics
        self.join_token = join_token
        self.site_tokens = dict(site_tokens or {})
        self._token_owner = {token: site for site, token in self.site_tokens.items()}

    def _check_site_tokens(self, request, context) -> None:
        """Per-site tokens: a worker may host a site only with that site's own token."""
        if not request.site_ids:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "site_ids: this aggregator uses per-site join tokens; name the sites to host",
            )
        for site in request.site_ids:
            given = request.site_tokens.get(site, "")
            want = self.site_tokens.get(site)
            if want is not None and given and tokens_match(given, want):
                continue
            owner = self._token_owner.get(given)
            if owner is not None:
                self.metrics.auth_failures.labels("wrong_site_token").inc()
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"site_tokens[{site}]: that is the token of {owner}, not of {site}",
                )
            self.metrics.auth_failures.labels("site_token").inc()
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED, f"site_tokens[{site}]: missing or wrong token"
            )

    def Register(self, request, context):
        if self.join_token and not tokens_match(request.join_token, self.join_token):
            self.metrics.auth_failures.labels("join_token").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong join token")
        if self.site_tokens:
            self._check_site_tokens(request, context)
        try:
            info = self.state.register(
                request.worker_id, list(request.site_ids), request.site_count
            )
        except RegistrationError as exc:
            code = {
                "unknown_site": grpc.StatusCode.NOT_FOUND,
                "taken": grpc.StatusCode.ALREADY_EXISTS,
            }.get(exc.code, grpc.StatusCode.INVALID_ARGUMENT)
            context.abort(code, str(exc))
        log.info(
            "worker %s (%s) registered %d site(s)",
            info.worker_id,
            request.device or "device not given",
            len(info.site_ids),
        )
        return aggregator_pb2.RegisterResponse(
            worker_id=info.worker_id,
            site_ids=info.site_ids,
            spec=self.spec,
            session_token=info.session_token,
        )

    def _worker(self, worker_id: str, token: str, context):
        info = self.state.authenticate(worker_id, token)
        if info is None:
            self.metrics.auth_failures.labels("session").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown worker or bad session token")
        return info

    def NextTask(self, request, context):
        self._worker(request.worker_id, request.session_token, context)
        wait = min(max(request.wait_s, 0.0), MAX_LONG_POLL_S)
        tasks, shutdown = self.state.take_tasks(request.worker_id, wait)
        return aggregator_pb2.NextTaskResponse(tasks=tasks, shutdown=shutdown)

    def DownloadModel(self, request, context):
        self._worker(request.worker_id, request.session_token, context)
        chunks = self.state.model_chunks(request.model_version)
        if chunks is None:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"model version {request.model_version} is not current "
                f"({self.state.model_version})",
            )
        for chunk in chunks:
            self.metrics.transfer.labels("down").inc(len(chunk.data))
            yield chunk

    def UploadDelta(self, request_iterator, context):
        try:
            header, arrays, received = self._receive(request_iterator, context)
        except Rejected as exc:
            self.metrics.rejected.labels(exc.reason).inc()
            log.warning("rejected delta: %s (%s)", exc, exc.reason)
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
        info = self.state.authenticate(header.worker_id, header.session_token)
        if info is None:
            raise Rejected(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated", "bad session token")
        with self.state.lock:
            hosted = [s for s in info.site_ids if self.state.site_owner.get(s) == info.worker_id]
        self._check_task(header, hosted)
        with self.state.lock:
            layout, limit = list(self.state.layout), self.state.model_bytes
        assembler = TensorAssembler(expected=layout, max_total_bytes=limit)
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
                assembler.add(message.chunk)
            arrays = assembler.finish(check_finite=True)
        except TensorStreamError as exc:
            raise Rejected(stream_error_status(exc.reason), exc.reason, str(exc)) from None
        except grpc.RpcError:
            raise self._aborted() from None
        return header, arrays, assembler.bytes_received

    @staticmethod
    def _aborted() -> Rejected:
        """gRPC broke the stream under us: a message over the transport's 4 MiB cap (the
        client already has RESOURCE_EXHAUSTED) or a client that vanished mid-upload."""
        return Rejected(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "stream_aborted",
            "the upload stream broke (message over the size cap, or the client went away)",
        )

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
                    f"delta for round {header.round}, current round is {have}",
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
            current.fedavg.add(site, arrays, float(header.num_samples))
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
            current.bytes_up += received
            self.state.changed.notify_all()

    def GetStatus(self, request, context):
        with self.state.lock:
            status = aggregator_pb2.RunStatus()
            status.CopyFrom(self.state.status)
            return status
