"""gRPC face of the aggregator: registration, long-poll tasks, model download, delta upload.

Every rejected delta gets a specific status code and a `powertrip_delta_rejected_total`
increment with its reason, and never reaches FedAvg.
"""

from __future__ import annotations

import logging

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from powertrip.rpc.tensors import TensorAssembler, TensorStreamError
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from services.aggregator.state import AggregatorState, RegistrationError

SERVICE_NAME = aggregator_pb2.DESCRIPTOR.services_by_name["Aggregator"].full_name
MAX_LONG_POLL_S = 30.0
EXPECTED_REJECT_REASONS = (
    "checksum",
    "non_finite",
    "truncated",
    "oversized",
    "stale_round",
    "duplicate",
    "unauthenticated",
    "wrong_identity",
)
log = logging.getLogger("aggregator")


class AggregatorMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.round_duration = Histogram(
            "powertrip_round_duration_seconds",
            "Round time (simulated or wall)",
            ["clock"],
            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600),
            registry=registry,
        )
        self.round = Gauge("powertrip_round", "Last finished round", registry=registry)
        self.selected = Gauge(
            "powertrip_selected_sites", "Sites selected this round", registry=registry
        )
        self.accuracy = Gauge("powertrip_global_accuracy", "Held-out accuracy", registry=registry)
        self.sim_time = Gauge(
            "powertrip_sim_time_seconds", "Run clock", ["clock"], registry=registry
        )
        self.round_part = Gauge(
            "powertrip_round_part_seconds",
            "Straggler's compute/comm and mean wait of the last round",
            ["part"],
            registry=registry,
        )
        self.transfer = Counter(
            "powertrip_transfer_bytes",
            "Model and delta bytes moved",
            ["direction"],
            registry=registry,
        )
        self.rejected = Counter(
            "powertrip_delta_rejected", "Deltas rejected, by reason", ["reason"], registry=registry
        )
        # Export the common reasons at 0 from the start, so dashboards and alerts see the
        # series before the first rejection (a labelled counter has no samples until then).
        for reason in EXPECTED_REJECT_REASONS:
            self.rejected.labels(reason)
        self.policy_fallbacks = Counter(
            "powertrip_policy_fallbacks", "Rounds that reused the last selection", registry=registry
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
    ):
        self.state = state
        self.spec = spec
        self.metrics = metrics
        self.join_token = join_token

    def Register(self, request, context):
        if self.join_token and request.join_token != self.join_token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong join token")
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
        log.info("worker %s registered %d site(s)", info.worker_id, len(info.site_ids))
        return aggregator_pb2.RegisterResponse(
            worker_id=info.worker_id,
            site_ids=info.site_ids,
            spec=self.spec,
            session_token=info.session_token,
        )

    def _worker(self, worker_id: str, token: str, context):
        info = self.state.authenticate(worker_id, token)
        if info is None:
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
        first = next(iterator, None)
        if first is None or first.WhichOneof("part") != "header":
            raise Rejected(
                grpc.StatusCode.INVALID_ARGUMENT, "no_header", "stream must start with a header"
            )
        header = first.header
        info = self.state.authenticate(header.worker_id, header.session_token)
        if info is None:
            raise Rejected(grpc.StatusCode.UNAUTHENTICATED, "unauthenticated", "bad session token")
        self._check_task(header, info.site_ids)
        with self.state.lock:
            layout, limit = list(self.state.layout), self.state.model_bytes
        assembler = TensorAssembler(expected=layout, max_total_bytes=limit)
        try:
            for message in iterator:
                if message.WhichOneof("part") != "chunk":
                    raise Rejected(
                        grpc.StatusCode.INVALID_ARGUMENT, "order", "second header in stream"
                    )
                assembler.add(message.chunk)
            arrays = assembler.finish(check_finite=True)
        except TensorStreamError as exc:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, exc.reason, str(exc)) from None
        return header, arrays, assembler.bytes_received

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
                have = current.round if current else 0
                raise Rejected(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "stale_round",
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
                    "stale_round",
                    f"delta against model {header.model_version}, task was {task.model_version}",
                )
            if header.site_id in current.received:
                raise Rejected(
                    grpc.StatusCode.ALREADY_EXISTS, "duplicate", "delta already received"
                )

    def _accept(self, header, arrays, received: int) -> None:
        with self.state.lock:
            current = self.state.current
            if current is None or current.round != header.round:
                raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "stale_round", "round ended")
            if header.site_id in current.received:
                raise Rejected(
                    grpc.StatusCode.ALREADY_EXISTS, "duplicate", "delta already received"
                )
            current.fedavg.add(header.site_id, arrays, float(header.num_samples))
            current.received.add(header.site_id)
            current.train_loss[header.site_id] = header.train_loss
            current.bytes_up += received
            self.state.changed.notify_all()

    def GetStatus(self, request, context):
        with self.state.lock:
            status = aggregator_pb2.RunStatus()
            status.CopyFrom(self.state.status)
            return status
