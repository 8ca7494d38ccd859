"""gRPC face of the aggregator: registration, long-poll tasks, model download, delta upload.

The delta-upload path (UploadDelta, UploadStatus: checks, rejections, resumable uploads)
lives in services.aggregator.uploads.DeltaReceiver, which the servicer owns and delegates
to.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import grpc

from powertrip.core.config import ConfigError
from powertrip.rpc.certificates import CertificateFacts, RevocationList, certificate_facts
from powertrip.rpc.runsettings import settings_message
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from services.aggregator.config import AggregatorConfig
from services.aggregator.control_client import round_record_message
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.registry import RegistrationError, tokens_match
from services.aggregator.run_status import RunStatus
from services.aggregator.state import AggregatorState
from services.aggregator.tasks import DATA_SCOPE_POOLED, Task
from services.aggregator.uploads import DeltaReceiver

SERVICE = aggregator_pb2.DESCRIPTOR.services_by_name["Aggregator"]
SERVICE_NAME = SERVICE.full_name
MAX_LONG_POLL_S = 30.0
log = logging.getLogger("aggregator")


def run_spec(config: AggregatorConfig) -> aggregator_pb2.RunSpec:
    """What every worker is told about the run when it registers."""
    run = config.run
    return aggregator_pb2.RunSpec(
        run_id=config.out_dir.name,
        workload=run.workload,
        num_sites=run.num_sites,
        seed=run.seed,
        data_dir=run.data_dir or "",
        peft=run.peft,
        delta_encoding=run.delta_encoding,
        settings=settings_message(run, "site_worker"),
    )


class AggregatorServicer(aggregator_pb2_grpc.AggregatorServicer):
    def __init__(
        self,
        state: AggregatorState,
        spec: aggregator_pb2.RunSpec,
        metrics: AggregatorMetrics,
        join_token: str = "",
        site_tokens: dict[str, str] | None = None,
        site_certs: bool = False,
        revocations: RevocationList | None = None,
    ):
        self.registry = state.registry
        self.queue = state.queue
        self.model = state.model
        self.status = state.status
        self.spec = spec
        self.metrics = metrics
        self.join_token = join_token
        self.site_tokens = dict(site_tokens or {})
        self._token_owner = {token: site for site, token in self.site_tokens.items()}
        self.site_certs = site_certs
        self.revocations = revocations
        self.uploads = DeltaReceiver(state.registry, state.uploads, metrics)

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

    def _check_site_certificate(self, request, context) -> None:
        """--site-certs: every site the worker asks for must be named by its client
        certificate (its CN or a subjectAltName), so a bundle cannot host another site."""
        names = certificate_names(context)
        if not request.site_ids:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "site_ids: this aggregator binds sites to certificates; name the sites to host",
            )
        foreign = [s for s in request.site_ids if s not in names]
        if foreign:
            self.metrics.auth_failures.labels("site_certificate").inc()
            shown = ", ".join(sorted(names)) or "none (no client certificate)"
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"site(s) {', '.join(foreign[:5])}: not named by the caller's certificate "
                f"(it names {shown})",
            )

    def _check_revoked(self, sites, context) -> None:
        """--revoked: refuse a caller whose certificate, or any site it hosts or asks for, is
        on the revocation list (reloaded when the file changes)."""
        if self.revocations is None:
            return
        cert = peer_certificate(context)
        names = cert.names if cert else frozenset()
        why = self.revocations.get().refuses(set(sites) | names, cert.fingerprint if cert else "")
        if why:
            self.metrics.auth_failures.labels("revoked").inc()
            log.warning("refused a call from %s: %s", context.peer(), why)
            context.abort(grpc.StatusCode.PERMISSION_DENIED, f"revoked: {why}")

    def _note_certificate(self, sites, context) -> None:
        """Each registered site's client certificate expiry, for the expiry alert."""
        cert = peer_certificate(context)
        if cert is not None:
            for site in sites:
                self.metrics.site_certificate_expiry.labels(site).set(cert.expires_at_s)

    def Register(self, request, context):
        if self.join_token and not tokens_match(request.join_token, self.join_token):
            self.metrics.auth_failures.labels("join_token").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong join token")
        self._check_revoked(request.site_ids, context)
        if self.site_certs:
            self._check_site_certificate(request, context)
        if self.site_tokens:
            self._check_site_tokens(request, context)
        try:
            info = self.registry.register(
                request.worker_id, list(request.site_ids), request.site_count,
                request.energy_meter,
            )  # fmt: skip
        except RegistrationError as exc:
            code = {
                "unknown_site": grpc.StatusCode.NOT_FOUND,
                "taken": grpc.StatusCode.ALREADY_EXISTS,
            }.get(exc.code, grpc.StatusCode.INVALID_ARGUMENT)
            context.abort(code, str(exc))
        self._note_certificate(info.site_ids, context)
        log.info(
            "worker %s (%s) registered %d site(s)%s",
            info.worker_id,
            request.device or "device not given",
            len(info.site_ids),
            f"; energy measured by {request.energy_meter}" if request.energy_meter else "",
        )
        return aggregator_pb2.RegisterResponse(
            worker_id=info.worker_id,
            site_ids=info.site_ids,
            spec=self.spec,
            session_token=info.session_token,
        )

    def _worker(self, worker_id: str, token: str, context):
        info = self.registry.authenticate(worker_id, token)
        if info is None:
            self.metrics.auth_failures.labels("session").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown worker or bad session token")
        self._check_revoked(info.site_ids, context)
        return info

    def NextTask(self, request, context):
        self._worker(request.worker_id, request.session_token, context)
        wait = min(max(request.wait_s, 0.0), MAX_LONG_POLL_S)
        tasks, shutdown = self.queue.take_tasks(request.worker_id, wait)
        return aggregator_pb2.NextTaskResponse(
            tasks=[task_message(task) for task in tasks], shutdown=shutdown
        )

    def DownloadModel(self, request, context):
        self._worker(request.worker_id, request.session_token, context)
        chunks = self.model.chunks(request.model_version)
        if chunks is None:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"model version {request.model_version} is not current ({self.model.version})",
            )
        sent = self.metrics.transfer.labels("down")
        for wire, data_bytes in chunks:  # serialized once per model version (chunkwire)
            sent.inc(data_bytes)
            yield wire

    def UploadDelta(self, request_iterator, context):
        # the stream's header names the worker; its certificate is checked before it is read
        self._check_revoked((), context)
        return self.uploads.upload(request_iterator, context)

    def UploadStatus(self, request, context):
        """Where the task's upload stands: accepted, held up to a position, or nothing."""
        info = self._worker(request.worker_id, request.session_token, context)
        return self.uploads.status(request, info, context)

    def GetStatus(self, request, context):
        return status_message(self.status.now())


def certificate_names(context) -> set[str]:
    """The names the caller's verified client certificate gives: its common name and its
    subjectAltNames (empty without mutual TLS)."""
    auth = context.auth_context() or {}
    names: set[str] = set()
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        names.update(v.decode(errors="replace") for v in auth.get(key, []))
    return names


def peer_certificate(context) -> CertificateFacts | None:
    """The caller's verified client certificate (None without mutual TLS)."""
    pems = (context.auth_context() or {}).get("x509_pem_cert", [])
    return _facts(pems[0]) if pems else None


@lru_cache(maxsize=1024)
def _facts(pem: bytes) -> CertificateFacts | None:
    """Parsed once per certificate: workers poll many times a minute."""
    try:
        return certificate_facts(pem)
    except ConfigError:  # gRPC verified it against the CA: not expected
        return None


def task_message(task: Task) -> aggregator_pb2.Task:
    return aggregator_pb2.Task(
        task_id=task.task_id,
        round=task.round,
        site_id=task.site_id,
        model_version=task.model_version,
        local_steps=task.local_steps,
        lr=task.lr,
        batch_size=task.batch_size,
        seed=task.seed,
        data_scope=(
            aggregator_pb2.DATA_SCOPE_POOLED
            if task.data_scope == DATA_SCOPE_POOLED
            else aggregator_pb2.DATA_SCOPE_SITE
        ),
    )


def status_message(status: RunStatus) -> aggregator_pb2.RunStatus:
    message = aggregator_pb2.RunStatus(
        state=status.state,
        round=status.round,
        max_rounds=status.max_rounds,
        accuracy=status.accuracy,
        sim_time_s=status.sim_time_s,
        k=status.k,
        registered_sites=status.registered_sites,
        num_sites=status.num_sites,
        message=status.message,
        dead_sites=status.dead_sites,
    )
    if status.last is not None:
        message.last.CopyFrom(round_record_message(status.last))
    return message
