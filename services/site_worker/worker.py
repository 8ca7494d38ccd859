"""What a worker does: register, long-poll, download the model once per version, train
each of its virtual sites on that site's own partition, stream the delta back.

With `train_threads` > 1 the worker trains that many groups of sites at once, each on its
own model replica in its own thread (torch releases the GIL inside its kernels), and each
thread uploads its deltas while the others train. One worker with a thread per core keeps
every core busy whichever of its sites a round selects; one process per core idles a core
whenever a selection falls unevenly between the processes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat

import grpc
import numpy as np
import torch

from powertrip.core import deltacodec
from powertrip.core.batched import SiteJob, train_sites
from powertrip.core.profiles import site_index
from powertrip.core.workloads import get_workload
from powertrip.rpc.channels import deadline_for, open_channel
from powertrip.rpc.chunkwire import AggregatorStub, encode_chunks
from powertrip.rpc.tensors import TensorAssembler, encode_tensors
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from services.site_worker.config import WorkerConfig, spec_settings
from services.site_worker.metrics import SiteWorkerMetrics
from services.site_worker.telemetry import energy_delta

log = logging.getLogger("site_worker")

#: A broken upload stream is resumed on these (ABORTED: a resume the aggregator could not
#: match, e.g. its copy moved on meanwhile; the next UploadStatus tells where it stands)
RESUMABLE_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}
)
#: An upload and its resumes get this many times the first stream's deadline in all
UPLOAD_WINDOW = 2.0
#: Pause before a resume: first, then doubling up to the second
RESUME_BACKOFF_S = (0.25, 4.0)
STATUS_TIMEOUT_S = 30.0


def _delta_messages(
    header: aggregator_pb2.DeltaHeader,
    arrays: dict,
    start: tuple[int, int] | None = None,
    wire_chunks: bool = False,
    delta_encoding: str = "fp32",
) -> Iterator[aggregator_pb2.UploadDeltaRequest | bytes]:
    """The upload stream: the header, then the chunks, encoded as the run says
    (powertrip/core/deltacodec.py); from `start` (tensor index, encoded byte offset) on,
    with the header's `resume` set, when continuing an interrupted upload.
    With `wire_chunks` (the stub is `chunkwire.AggregatorStub`) the chunks are serialized
    here, each tensor's data copied once; else they are messages for a generated stub."""
    if start is not None:
        resumed = aggregator_pb2.DeltaHeader()
        resumed.CopyFrom(header)
        resumed.resume.SetInParent()  # present even at (0, 0)
        resumed.resume.tensor_index, resumed.resume.offset = start
        header = resumed
    yield aggregator_pb2.UploadDeltaRequest(header=header)
    if wire_chunks:
        chunks = encode_chunks(
            arrays, start=start or (0, 0), upload=True, delta_encoding=delta_encoding
        )
        yield from (wire for wire, _ in chunks)
    else:
        yield from encode_tensors(
            arrays,
            into=aggregator_pb2.UploadDeltaRequest,
            start=start or (0, 0),
            delta_encoding=delta_encoding,
        )


def _wire_chunks(stub) -> bool:
    """Whether `stub` takes pre-serialized chunks (`chunkwire.AggregatorStub` does; the
    generated stub, which tests and other clients use, does not)."""
    return getattr(stub, "wire_chunks", False)


@dataclass
class WorkerCounters:
    tasks_done: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    state: str = "registering"


class SiteWorker:
    def __init__(self, config: WorkerConfig, metrics: SiteWorkerMetrics | None = None):
        self.config = config
        self.metrics = metrics
        self.counters = WorkerCounters()
        self.site_ids: list[str] = []
        self._stop = False
        self._channel: grpc.Channel | None = None
        self._count_lock = threading.Lock()
        #: how deltas cross the wire: the run's (RunSpec.delta_encoding, set by `register`)
        self.delta_encoding = "fp32"
        torch.set_num_threads(config.threads)

    def stop(self) -> None:
        """Stop promptly (SIGTERM): take no more tasks, train no further site, upload
        nothing more, and cut the long poll or transfer in flight (closing the channel ends
        its calls with CANCELLED). A site whose training has begun is not interrupted; the
        process leaves without it (services.site_worker.__main__.STOP_WAIT_S)."""
        self._stop = True
        channel = self._channel
        if channel is not None:
            channel.close()

    @property
    def stopping(self) -> bool:
        return self._stop

    # ---- set-up ------------------------------------------------------------------------
    def register(self, stub: aggregator_pb2_grpc.AggregatorStub) -> aggregator_pb2.RegisterResponse:
        request = aggregator_pb2.RegisterRequest(
            worker_id=self.config.worker_id,
            site_ids=self.config.site_ids,
            site_count=self.config.site_count,
            device=self.config.device,
            energy_meter=self.config.energy_meter if self.config.power_meter else "",
            join_token=self.config.join_token,
            site_tokens=self.config.site_tokens,
        )
        deadline = time.monotonic() + self.config.register_timeout_s
        while True:
            try:
                reply = stub.Register(request, timeout=10, wait_for_ready=True)
                # how this worker's deltas cross: the run's, known from registration on
                self.delta_encoding = spec_settings(reply.spec)["delta_encoding"]
                return reply
            except grpc.RpcError as exc:
                retriable = exc.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def load_data(self, spec: aggregator_pb2.RunSpec) -> None:
        self.spec = spec
        run = spec_settings(spec)
        self.config = self.config.with_run(run)  # how the run trains: its settings win
        self.workload = get_workload(run["workload"], run["peft"])
        # a site's samples are asked for when it trains: a workload may make them then
        self.sites = self.workload.site_data(
            self.config.data_dir or run["data_dir"], run["num_sites"], run["seed"]
        )
        self.train_x, self.train_y = self.sites.pooled.x, self.sites.pooled.y
        for site in self.site_ids:
            self.sites.check(site_index(site))
        # one replica per training thread; a thread takes a free one for each group
        self.replicas: queue.SimpleQueue[torch.nn.Module] = queue.SimpleQueue()
        for _ in range(self.config.train_threads):
            self.replicas.put(self.workload.build_model(self.config.device).to(self.config.device))
        log.info(
            "%s: run %s, %d site(s), %s",
            self.config.worker_id,
            spec.run_id or "(unnamed)",
            len(self.site_ids),
            self.sites.note,
        )

    # ---- work --------------------------------------------------------------------------
    def download(self, stub, session: str, version: int) -> dict[str, np.ndarray]:
        assembler = TensorAssembler()
        request = aggregator_pb2.DownloadModelRequest(
            worker_id=self.config.worker_id, model_version=version, session_token=session
        )
        for chunk in stub.DownloadModel(request, timeout=deadline_for(64 << 20)):
            assembler.add(chunk)
        self.counters.bytes_down += assembler.bytes_received
        if self.metrics is not None:
            self.metrics.download_bytes.inc(assembler.bytes_received)
        return assembler.finish()

    def train(self, tasks: list, weights: dict[str, np.ndarray]) -> list:
        """Train tasks that share a model version; [(LocalResult, wall seconds, joules)] in
        order, joules measured by NVML (0 without a power meter).

        With the vmap trainer up to `site_batch` sites go through one forward/backward; the
        wall time and energy of a batched call are split evenly between its sites."""
        model = self.replicas.get()
        try:
            return self._train_on(model, tasks, weights)
        finally:
            self.replicas.put(model)

    def _train_on(self, model: torch.nn.Module, tasks: list, weights: dict) -> list:
        # load_state_dict copies into the parameters, so the received arrays can be used as is
        model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        jobs = []
        for task in tasks:
            if task.data_scope == aggregator_pb2.DATA_SCOPE_POOLED:
                x, y = self.train_x, self.train_y
            else:
                x, y = self.sites.site(site_index(task.site_id))
            jobs.append(SiteJob(x, y, task.seed))
        first = tasks[0]
        meter = self.config.power_meter
        before = meter.read() if meter is not None else None
        start = time.monotonic()
        results = train_sites(
            self.workload,
            model,
            jobs,
            # a task names its own step count (the data-parallel work model gives each
            # site its share of the round's work); 0 means the run's default
            steps=first.local_steps or self.spec.local_steps,
            lr=first.lr,
            batch_size=first.batch_size,
            trainer=self.config.trainer,
            site_batch=self.config.site_batch,
            channels_last=self.config.channels_last,
            optimizer=self.workload.defaults.optimizer,
            fused_sgd=self.config.fused_sgd,
        )
        elapsed = time.monotonic() - start
        joules = 0.0
        if meter is not None:
            after = meter.read()
            joules = energy_delta(before, after, elapsed) / len(tasks)
            if self.metrics is not None:
                self.metrics.gpu_power.set(after.power_w)
        if self.metrics is not None:
            for _ in tasks:
                self.metrics.train_seconds.observe(elapsed / len(tasks))
        return [(result, elapsed / len(tasks), joules) for result in results]

    def task_groups(self, tasks) -> list[list]:
        """Consecutive tasks that can share one batched call (same version and settings)."""
        size = self.config.site_batch if self.config.trainer == "vmap" else 1
        groups: list[list] = []
        for task in tasks:
            key = (task.model_version, task.local_steps, task.lr, task.batch_size)
            last = groups[-1] if groups else None
            if (
                last is not None
                and len(last) < size
                and (last[0].model_version, last[0].local_steps, last[0].lr, last[0].batch_size)
                == key
            ):
                last.append(task)
            else:
                groups.append([task])
        return groups

    def upload(
        self, stub, session: str, task, result, wall_s: float, energy_j: float = 0.0
    ) -> None:
        """Stream one delta. When the stream breaks (UNAVAILABLE: the link or connection
        went; DEADLINE_EXCEEDED) the upload resumes within its window (UPLOAD_WINDOW x the
        first attempt's deadline): UploadStatus says how much of it the aggregator holds,
        verified, and the next stream sends only the rest. The aggregator ends the window
        early when the round closes (FAILED_PRECONDITION: the delta is too late)."""
        arrays = {k: v.numpy() for k, v in result.delta.items()}
        encoding = self.delta_encoding
        nbytes = sum(a.nbytes for a in arrays.values())
        error = 0.0
        if encoding != "fp32":  # encoded once: what the error is measured on is what is sent
            encoded = deltacodec.encode_all(arrays, encoding)
            error = deltacodec.relative_error(arrays, encoded)
            arrays = encoded
        header = aggregator_pb2.DeltaHeader(
            task_id=task.task_id,
            site_id=task.site_id,
            round=task.round,
            model_version=task.model_version,
            num_samples=result.num_samples,
            train_loss=result.mean_loss,
            compute_wall_s=wall_s,
            steps=result.steps,
            energy_j=energy_j,
            encoding_error=error,
            worker_id=self.config.worker_id,
            session_token=session,
        )
        log.info(
            "uploading the delta of %s for %s: %d bytes", task.site_id, task.task_id, nbytes,
            extra={"round": task.round, "site": task.site_id, "task": task.task_id},
        )  # fmt: skip
        first_deadline = deadline_for(nbytes)
        started = time.monotonic()
        window_end = started + UPLOAD_WINDOW * first_deadline
        backoff = RESUME_BACKOFF_S[0]
        attempt = 0
        while True:
            try:
                if attempt == 0:
                    stub.UploadDelta(
                        _delta_messages(
                            header, arrays, wire_chunks=_wire_chunks(stub), delta_encoding=encoding
                        ),
                        timeout=first_deadline,
                    )
                else:
                    self._resume_upload(stub, header, arrays, window_end)
                break
            except grpc.RpcError as exc:
                left = window_end - time.monotonic()
                # a stopping worker resumes nothing: stop() closed the channel on purpose
                if self._stop or exc.code() not in RESUMABLE_CODES or left <= backoff:
                    raise
                log.info(
                    "upload for %s broke (%s: %s); resuming in %.2fs",
                    task.task_id, exc.code().name, exc.details(), backoff,
                )  # fmt: skip
                time.sleep(backoff)
                backoff = min(2 * backoff, RESUME_BACKOFF_S[1])
                attempt += 1
        with self._count_lock:  # training threads upload concurrently
            self.counters.bytes_up += nbytes
        if self.metrics is not None:
            self.metrics.show_upload(nbytes, time.monotonic() - started, attempt)

    def _resume_upload(self, stub, header, arrays: dict, window_end: float) -> None:
        """Ask where the aggregator's copy of this upload ends and send the rest; nothing
        if it already accepted the delta (the reply to the broken stream was what got lost)."""
        status = stub.UploadStatus(
            aggregator_pb2.UploadStatusRequest(
                task_id=header.task_id,
                site_id=header.site_id,
                round=header.round,
                worker_id=header.worker_id,
                session_token=header.session_token,
            ),
            timeout=max(0.1, min(STATUS_TIMEOUT_S, window_end - time.monotonic())),
            wait_for_ready=True,  # the link may still be coming back
        )
        if status.state == aggregator_pb2.UPLOAD_STATE_ACCEPTED:
            log.info("upload for %s: the aggregator already has it", header.task_id)
            return
        start = None
        if status.state == aggregator_pb2.UPLOAD_STATE_PARTIAL:
            start = (status.next.tensor_index, status.next.offset)
            log.info(
                "upload for %s resumes at tensor %d byte %d (%d bytes held)",
                header.task_id, *start, status.bytes_held,
            )  # fmt: skip
        stub.UploadDelta(
            _delta_messages(
                header,
                arrays,
                start,
                wire_chunks=_wire_chunks(stub),
                delta_encoding=self.delta_encoding,
            ),
            timeout=max(0.1, window_end - time.monotonic()),
            wait_for_ready=True,
        )

    def run(self) -> int:
        """Work until the aggregator says the run is over; return an exit code."""
        with open_channel(self.config.aggregator, self.config.credentials) as channel:
            self._channel = channel
            if self._stop:  # stopped before the channel existed
                return 0
            stub = AggregatorStub(channel)
            reply = self.register(stub)
            self.site_ids = list(reply.site_ids)
            self.load_data(reply.spec)
            session = reply.session_token
            self.counters.state = "working"
            threads = self.config.train_threads
            pool = ThreadPoolExecutor(threads, "train") if threads > 1 else None
            try:
                return self._work(stub, session, pool)
            finally:
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)

    def _work(self, stub, session: str, pool: ThreadPoolExecutor | None) -> int:
        """Long-poll for tasks and do them until the aggregator says the run is over."""
        cached: tuple[int, dict[str, np.ndarray]] | None = None
        while not self._stop:
            try:
                polled = stub.NextTask(
                    aggregator_pb2.NextTaskRequest(
                        worker_id=self.config.worker_id,
                        wait_s=self.config.poll_s,
                        session_token=session,
                    ),
                    timeout=self.config.poll_s + 10,
                )
            except grpc.RpcError as exc:
                if self._stop:
                    break
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    log.info("aggregator unavailable; the run is over or restarting")
                    self.counters.state = "done"
                    return 0
                raise
            if polled.shutdown:
                self.counters.state = "done"
                log.info("run finished; %d task(s) done", self.counters.tasks_done)
                return 0
            groups = self.task_groups(polled.tasks)
            for version in dict.fromkeys(group[0].model_version for group in groups):
                if self._stop:
                    break
                if cached is None or cached[0] != version:
                    cached = (version, self.download(stub, session, version))
                weights = cached[1]
                same = [group for group in groups if group[0].model_version == version]
                if pool is None:
                    for group in same:
                        self.train_and_upload(stub, session, group, weights)
                else:  # list() waits for every group and re-raises the first failure here
                    args = (repeat(stub), repeat(session), same, repeat(weights))
                    list(pool.map(self.train_and_upload, *args))
        if self._stop:
            log.info("stopped; %d task(s) done", self.counters.tasks_done)
            self.counters.state = "stopped"
        return 0

    def train_and_upload(self, stub, session: str, group: list, weights: dict) -> None:
        """Train one group of tasks and upload each delta; a rejected upload is logged and
        skipped (the aggregator has already counted it and closes the round without it).
        Once the worker is stopping nothing more is trained or uploaded."""
        if self._stop:
            return
        for task, (result, wall_s, joules) in zip(group, self.train(group, weights), strict=True):
            if self._stop:
                return
            try:
                self.upload(stub, session, task, result, wall_s, joules)
            except grpc.RpcError as exc:
                log.warning("upload for %s rejected: %s", task.task_id, exc.details())
                if self.metrics is not None:
                    self.metrics.tasks.labels("rejected").inc()
                continue
            with self._count_lock:
                self.counters.tasks_done += 1
            if self.metrics is not None:
                self.metrics.tasks.labels("accepted").inc()
