"""Resumable uploads over a cut link (issue #18, item 3), real processes and real gRPC.

The link: client -> ThinLink (this file: forwards the client's bytes at RATE bytes/s and
counts the bytes that enter the link) -> delay_relay.py (its own process, 5 ms each way)
-> aggregator. Cutting the link is SIGKILL of the relay, mid-chunk; a new relay on the
same port is the link coming back. What the cut costs is counted in link bytes: the
interrupted upload's bytes over all its connections (its UploadStatus call included) minus
those of an uninterrupted upload of a delta of the same size. Without resumption the cost
would be everything sent before the cut, and the whole delta is sent again.

The delta is accepted once and the next model is the FedAvg of the accepted deltas, bit
for bit; a resumed stream passes the same checks as a fresh one (session, stale round,
duplicate), a resume at the wrong position or with a different header is refused.
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from powertrip.core.config import RunConfig
from powertrip.core.fedavg import StreamingFedAvg, apply_delta
from powertrip.linkshaping.relay import RELAY_SCRIPT
from powertrip.rpc.channels import open_channel
from powertrip.rpc.tensors import CHUNK_BYTES, TensorAssembler, encode_tensors, layout_of
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from services.site_worker.config import WorkerConfig
from services.site_worker.metrics import SiteWorkerMetrics
from services.site_worker.worker import SiteWorker
from tests.reliability.procs import free_port, scrape, wait_for

pytestmark = pytest.mark.slow

RATE = 4e6  # bytes/s through the thin link: the 3.3 MB delta takes ~0.8 s
#: a resumed upload's own overhead besides the lost part of a chunk: a new connection,
#: an UploadStatus call and a second header (HTTP/2 and gRPC framing), plus what was in
#: flight inside the relay (RATE x 5 ms = 20 kB)
HEADERS_ALLOWANCE = 64 * 1024
SITES = ["site-000", "site-001"]
ABORTED, ACCEPTED = grpc.StatusCode.ABORTED, aggregator_pb2.UPLOAD_STATE_ACCEPTED


# ---- the link -----------------------------------------------------------------------------
class ThinLink:
    """A loopback TCP relay that forwards client->server bytes at `rate` bytes/s (in 16 KiB
    pieces, no idle credit) and counts them; server->client bytes flow freely. When either
    side goes, both are shut down."""

    def __init__(self, target: tuple[str, int], rate: float):
        self.target = target
        self.rate = rate
        self.up_bytes = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._clients: list[socket.socket] = []
        self._dropped: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            for sock in (conn, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [conn, upstream]
                self._clients.append(conn)
            threading.Thread(target=self._pump, args=(conn, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, False), daemon=True).start()

    def drop_route(self) -> None:
        """Reset the clients' side of every open connection and leave the aggregator's
        side open and silent, as when a route drops: the client sees its connection go,
        the aggregator sees nothing (its handler still waits for the next chunk)."""
        with self._lock:
            self._dropped.update(self._clients)
            for conn in self._clients:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self._clients.clear()

    def _pump(self, src: socket.socket, dst: socket.socket, throttled: bool) -> None:
        due = time.monotonic()
        try:
            while data := src.recv(16384):
                if throttled:
                    due = max(due, time.monotonic()) + len(data) / self.rate
                    time.sleep(max(0.0, due - time.monotonic()))
                dst.sendall(data)
                if throttled:
                    with self._lock:
                        self.up_bytes += len(data)
        except OSError:
            pass
        finally:
            client = src if throttled else dst
            with self._lock:
                dropped = client in self._dropped
            for sock in (client,) if dropped else (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def settle(self, quiet_s: float = 0.5) -> None:
        """Wait until nothing has crossed for `quiet_s`: bytes a closed connection left in
        the link's buffers must not be counted in the next measurement."""
        last, since = self.up_bytes, time.monotonic()
        while time.monotonic() - since < quiet_s:
            time.sleep(0.05)
            if self.up_bytes != last:
                last, since = self.up_bytes, time.monotonic()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a pump blocked on it; close won't
                sock.close()


class Relay:
    """delay_relay.py in its own process on a fixed port: kill() is the link cut."""

    def __init__(self, target: str):
        self.port = free_port()
        self.target = target
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        for _ in range(50):  # the port of a killed relay may take a moment to be free
            process = subprocess.Popen(
                [sys.executable, str(RELAY_SCRIPT), "--listen", f"127.0.0.1:{self.port}",
                 "--target", self.target, "--delay-ms", "5"],
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            assert process.stderr is not None
            if "listening on" in process.stderr.readline():
                self.process = process
                return
            process.wait(timeout=10)
            time.sleep(0.1)
        raise RuntimeError(f"delay_relay could not listen on {self.port}")

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.kill()


@pytest.fixture()
def link_stack(stack_factory, tmp_path):
    """An aggregator for two shakespeare sites (3.3 MB model), the link in front of it."""
    config = RunConfig(
        workload="shakespeare", num_sites=2, max_rounds=2, seed=5, policy="all",
        target_accuracy=0.999, round_deadline_s=300, eval_samples=32,
    )  # fmt: skip
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    metrics_port = free_port()
    out = tmp_path / "run"
    _, _, aggregator = stack_factory(path, out, "--metrics-port", str(metrics_port))
    relay = Relay(aggregator.target)
    link = ThinLink(("127.0.0.1", relay.port), RATE)
    yield SimpleNamespace(
        aggregator=aggregator, relay=relay, link=link, metrics_port=metrics_port, out=out
    )
    link.close()
    relay.stop()


# ---- a worker's calls -----------------------------------------------------------------------
def _register(stub, worker: str, site: str):
    return stub.Register(
        aggregator_pb2.RegisterRequest(worker_id=worker, site_ids=[site]), timeout=10
    )


def _task(stub, worker: str, session: str) -> aggregator_pb2.Task:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        polled = stub.NextTask(
            aggregator_pb2.NextTaskRequest(worker_id=worker, wait_s=2, session_token=session),
            timeout=10,
        )
        if polled.tasks:
            return polled.tasks[0]
    raise AssertionError(f"no task for {worker}")


def _site_tasks(stub, worker: str, session: str) -> dict[str, aggregator_pb2.Task]:
    """Both sites' tasks of the round, for a worker hosting both."""
    tasks: dict[str, aggregator_pb2.Task] = {}
    deadline = time.monotonic() + 120
    while len(tasks) < len(SITES) and time.monotonic() < deadline:
        polled = stub.NextTask(
            aggregator_pb2.NextTaskRequest(worker_id=worker, wait_s=2, session_token=session),
            timeout=10,
        )
        tasks.update({t.site_id: t for t in polled.tasks})
    assert len(tasks) == len(SITES), tasks
    return tasks


def _download(stub, worker: str, session: str, version: int) -> dict[str, np.ndarray]:
    assembler = TensorAssembler()
    request = aggregator_pb2.DownloadModelRequest(
        worker_id=worker, model_version=version, session_token=session
    )
    for chunk in stub.DownloadModel(request, timeout=60):
        assembler.add(chunk)
    return {k: v.copy() for k, v in assembler.finish().items()}


def _header(task, worker: str, session: str, samples: int, **kw) -> aggregator_pb2.DeltaHeader:
    return aggregator_pb2.DeltaHeader(
        task_id=task.task_id, site_id=task.site_id, round=task.round,
        model_version=task.model_version, num_samples=samples, train_loss=1.5,
        compute_wall_s=0.25, steps=3, worker_id=worker, session_token=session, **kw,
    )  # fmt: skip


def _stream(header, delta, start=(0, 0)):
    yield aggregator_pb2.UploadDeltaRequest(header=header)
    yield from encode_tensors(delta, into=aggregator_pb2.UploadDeltaRequest, start=start)


def _status(stub, task, worker: str, session: str) -> aggregator_pb2.UploadStatusResponse:
    return stub.UploadStatus(
        aggregator_pb2.UploadStatusRequest(
            task_id=task.task_id, site_id=task.site_id, round=task.round,
            worker_id=worker, session_token=session,
        ),
        timeout=10,
    )  # fmt: skip


def _random_delta(model: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(v.shape) * 1e-3).astype(v.dtype) for k, v in model.items()}


def _cut_when_held(direct, task, worker, session, relay: Relay, at_bytes: int) -> int:
    """Once the aggregator holds `at_bytes` verified bytes of the upload, let the next chunk
    get well under way, then kill the relay: the link is cut mid-chunk. The bytes held then."""
    wait_for(
        lambda: _status(direct, task, worker, session).bytes_held >= at_bytes,
        60, "the upload to get under way", poll_s=0.01,
    )  # fmt: skip
    time.sleep(0.1)  # ~400 kB into the next 1 MiB chunk
    relay.kill()
    time.sleep(0.3)  # what reached the aggregator before the cut is checked and held by now
    return _status(direct, task, worker, session).bytes_held


def _round_sites(out, round_no: int) -> list[str] | None:
    try:
        rows = list(csv.DictReader((out / "rounds.csv").open()))
    except OSError:
        return None
    row = next((r for r in rows if int(r["round"]) == round_no), None)
    return row["sites"].split(";") if row else None


def _expected_model(out, model, deltas: dict[str, tuple[dict, float]]) -> dict[str, np.ndarray]:
    """The aggregator's own FedAvg, in its own (dispatch) order, over the accepted deltas."""
    wait_for(lambda: _round_sites(out, 1) is not None, 60, "round 1 in rounds.csv")
    order = _round_sites(out, 1)
    assert sorted(order) == sorted(deltas)
    fedavg = StreamingFedAvg(order, model)
    for site in order:
        fedavg.add(site, *deltas[site])
    return apply_delta(model, fedavg.result())


def _assert_model_is(stub, worker, session, expected: dict[str, np.ndarray]) -> None:
    task = _task(stub, worker, session)
    assert task.round == 2
    new = _download(stub, worker, session, task.model_version)
    for key, want in expected.items():
        assert np.array_equal(new[key], want), f"{key}: not the FedAvg of the accepted deltas"


def _metric(port: int, name: str) -> float:
    return scrape(port).get(name, 0.0)


def _rejected(port: int, reason: str) -> float:
    return _metric(port, f'powertrip_delta_rejected_total{{reason="{reason}"}}')


# ---- the tests ------------------------------------------------------------------------------
def test_encode_from_a_position_continues_an_assembler_exactly():
    rng = np.random.default_rng(0)
    arrays = {
        "a": rng.standard_normal((300, 7)).astype(np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "b": rng.standard_normal(5000).astype(np.float64),
    }
    chunks = list(encode_tensors(arrays, chunk_bytes=1000))
    for cut in range(len(chunks) + 1):
        assembler = TensorAssembler(expected=layout_of(arrays))
        for chunk in chunks[:cut]:
            assembler.add(chunk)
        for chunk in encode_tensors(arrays, chunk_bytes=700, start=assembler.position):
            assembler.add(chunk)
        out = assembler.finish()
        assert all(np.array_equal(out[k], v) for k, v in arrays.items())
    assert list(encode_tensors(arrays, start=(3, 0))) == []


def test_cut_upload_resumes_from_held_bytes_and_is_accepted_once(link_stack, capsys):
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    a = _register(direct, "A", SITES[0])
    b = _register(direct, "B", SITES[1])
    task_a, task_b = _task(direct, "A", a.session_token), _task(direct, "B", b.session_token)
    model = _download(direct, "A", a.session_token, task_a.model_version)
    nbytes = sum(v.nbytes for v in model.values())
    delta_a, delta_b = _random_delta(model, 1), _random_delta(model, 2)
    head_a = _header(task_a, "A", a.session_token, samples=10)

    # ---- A's upload, cut mid-chunk by killing the relay
    before = s.link.up_bytes
    with open_channel(s.link.address) as channel:
        call = aggregator_pb2_grpc.AggregatorStub(channel).UploadDelta.future(
            _stream(head_a, delta_a), timeout=60
        )
        held = _cut_when_held(direct, task_a, "A", a.session_token, s.relay, 1_100_000)
        with pytest.raises(grpc.RpcError) as info:
            call.result(timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
    sent_before_cut = s.link.up_bytes - before
    status = _status(direct, task_a, "A", a.session_token)
    assert status.state == aggregator_pb2.UPLOAD_STATE_PARTIAL
    assert 0 < status.bytes_held == held < nbytes and status.total_bytes == nbytes
    where = (status.next.tensor_index, status.next.offset)

    # ---- resumed streams pass the same checks: session, position
    with pytest.raises(grpc.RpcError) as info:
        forged = _header(task_a, "A", "forged", samples=10, resume=status.next)
        direct.UploadDelta(_stream(forged, delta_a, where), timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    elsewhere = aggregator_pb2.UploadPosition(tensor_index=where[0], offset=where[1] + 4)
    with pytest.raises(grpc.RpcError) as info:
        off = _header(task_a, "A", a.session_token, samples=10, resume=elsewhere)
        direct.UploadDelta(_stream(off, delta_a, (where[0], where[1] + 4)), timeout=30)
    assert info.value.code() == ABORTED and "reason=resume_offset" in info.value.details()
    assert _status(direct, task_a, "A", a.session_token).bytes_held == held  # still held

    # ---- the link comes back; A asks where it stands and sends only the rest
    s.relay.start()
    s.link.settle()
    before = s.link.up_bytes
    with open_channel(s.link.address) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        status = _status(stub, task_a, "A", a.session_token)
        resumed = _header(task_a, "A", a.session_token, samples=10, resume=status.next)
        reply = stub.UploadDelta(_stream(resumed, delta_a, where), timeout=60)
    sent_after_cut = s.link.up_bytes - before
    assert reply.accepted and reply.bytes_received == nbytes
    assert _status(direct, task_a, "A", a.session_token).state == ACCEPTED
    with pytest.raises(grpc.RpcError) as info:  # accepted once: a second resume is a duplicate
        direct.UploadDelta(_stream(resumed, delta_a, where), timeout=30)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS

    # ---- B: cut by the client this time, then a "resume" with another header: refused,
    # and the held bytes are dropped, so B starts over
    head_b = _header(task_b, "B", b.session_token, samples=30)
    with open_channel(s.link.address) as channel:
        call = aggregator_pb2_grpc.AggregatorStub(channel).UploadDelta.future(
            _stream(head_b, _random_delta(model, 3)), timeout=60
        )
        wait_for(lambda: _status(direct, task_b, "B", b.session_token).bytes_held > 0, 60, "B held")
        call.cancel()
    wait_for(
        lambda: _status(direct, task_b, "B", b.session_token).state
        == aggregator_pb2.UPLOAD_STATE_PARTIAL,
        10, "B's cut upload to be held",
    )  # fmt: skip
    status = _status(direct, task_b, "B", b.session_token)
    other = _header(task_b, "B", b.session_token, samples=31, resume=status.next)
    with pytest.raises(grpc.RpcError) as info:
        direct.UploadDelta(
            _stream(other, delta_b, (status.next.tensor_index, status.next.offset)), timeout=30
        )
    assert info.value.code() == ABORTED and "reason=resume_mismatch" in info.value.details()
    assert _status(direct, task_b, "B", b.session_token).state == aggregator_pb2.UPLOAD_STATE_NONE

    # ---- B's whole delta, uninterrupted, over the same link: the baseline
    s.link.settle()
    before = s.link.up_bytes
    with open_channel(s.link.address) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        assert stub.UploadDelta(_stream(head_b, delta_b), timeout=60).accepted
    whole = s.link.up_bytes - before

    resent = sent_before_cut + sent_after_cut - whole
    with capsys.disabled():
        print(
            f"\n  resumable upload: delta {nbytes} B; link bytes of an uncut upload {whole}; "
            f"cut after {sent_before_cut} B ({held} B verified and held); "
            f"{sent_after_cut} B after the cut; re-sent {resent} B "
            f"({resent / CHUNK_BYTES:.2f} chunk). Without resumption: {sent_before_cut} B "
            f"lost and the whole {whole} B again."
        )
    assert 0 < held < nbytes
    assert resent < CHUNK_BYTES + HEADERS_ALLOWANCE, resent
    assert sent_after_cut < whole - held + HEADERS_ALLOWANCE

    # ---- the next model is the FedAvg of exactly the two accepted deltas
    expected = _expected_model(s.out, model, {SITES[0]: (delta_a, 10.0), SITES[1]: (delta_b, 30.0)})
    _assert_model_is(direct, "A", a.session_token, expected)
    # a stale round's resume is refused as one (held bytes went with the round)
    with pytest.raises(grpc.RpcError) as info:
        direct.UploadDelta(_stream(resumed, delta_a, where), timeout=30)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "reason=stale_round" in info.value.details()
    port = s.metrics_port
    assert _metric(port, "powertrip_upload_resumes_total") == 1
    assert _rejected(port, "resume_offset") == 1 and _rejected(port, "resume_mismatch") == 1
    assert _rejected(port, "duplicate") == 1
    direct_channel.close()


def test_site_worker_upload_resumes_after_the_link_is_cut(link_stack, capsys):
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    registry = CollectorRegistry()
    worker = SiteWorker(
        WorkerConfig(aggregator=s.link.address, worker_id="W", site_ids=SITES),
        SiteWorkerMetrics(registry),
    )
    channel = open_channel(s.link.address)
    stub = aggregator_pb2_grpc.AggregatorStub(channel)
    reply = stub.Register(aggregator_pb2.RegisterRequest(worker_id="W", site_ids=SITES), timeout=10)
    session = reply.session_token
    tasks = _site_tasks(stub, "W", session)
    model = _download(direct, "W", session, tasks[SITES[0]].model_version)
    nbytes = sum(v.nbytes for v in model.values())
    deltas = {site: _random_delta(model, 10 + i) for i, site in enumerate(SITES)}
    samples = {SITES[0]: 12, SITES[1]: 20}

    def result(site):
        return SimpleNamespace(
            delta={k: torch.from_numpy(v) for k, v in deltas[site].items()},
            num_samples=samples[site], mean_loss=0.5, steps=4,
        )  # fmt: skip

    def cut_and_restore() -> None:
        held.append(_cut_when_held(direct, tasks[SITES[0]], "W", session, s.relay, 1_100_000))
        time.sleep(0.5)
        s.relay.start()

    held: list[int] = []
    cutter = threading.Thread(target=cut_and_restore)
    before = s.link.up_bytes
    cutter.start()
    started = time.monotonic()
    worker.upload(stub, session, tasks[SITES[0]], result(SITES[0]), 0.1)  # resumes by itself
    took = time.monotonic() - started
    cutter.join()
    cut_upload = s.link.up_bytes - before
    s.link.settle()
    before = s.link.up_bytes
    worker.upload(stub, session, tasks[SITES[1]], result(SITES[1]), 0.1)
    whole = s.link.up_bytes - before
    resent = cut_upload - whole
    with capsys.disabled():
        print(
            f"\n  site worker: delta {nbytes} B; cut with {held[0]} B held; the cut upload "
            f"took {cut_upload} link bytes in {took:.1f}s, an uncut one {whole}: "
            f"re-sent {resent} B ({resent / CHUNK_BYTES:.2f} chunk)"
        )
    assert 0 < held[0] < nbytes
    assert resent < CHUNK_BYTES + HEADERS_ALLOWANCE, resent
    assert worker.counters.bytes_up == 2 * nbytes
    # the worker's own metrics: both uploads' bytes, the one resume, a throughput
    assert registry.get_sample_value("powertrip_site_upload_bytes_total") == 2 * nbytes
    assert registry.get_sample_value("powertrip_site_upload_resumes_total") == 1
    assert registry.get_sample_value("powertrip_site_upload_bytes_per_second") > 0
    assert _metric(s.metrics_port, "powertrip_upload_resumes_total") == 1
    assert _rejected(s.metrics_port, "duplicate") == 0
    expected = _expected_model(
        s.out, model, {site: (deltas[site], float(samples[site])) for site in SITES}
    )
    _assert_model_is(direct, "W", session, expected)
    channel.close()
    direct_channel.close()


def test_site_worker_gives_up_when_the_round_is_over(link_stack):
    """A worker whose link is down retries its upload, and stops at the aggregator's answer
    that the round is over (it closed meanwhile), not at the end of its own window."""
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    worker = SiteWorker(WorkerConfig(aggregator=s.link.address, worker_id="W", site_ids=SITES))
    reply = direct.Register(
        aggregator_pb2.RegisterRequest(worker_id="W", site_ids=SITES), timeout=10
    )
    session = reply.session_token
    tasks = _site_tasks(direct, "W", session)
    model = _download(direct, "W", session, tasks[SITES[0]].model_version)
    zeros = {k: np.zeros_like(v) for k, v in model.items()}
    for site in SITES:  # the round closes with these two
        head = _header(tasks[site], "W", session, samples=5)
        assert direct.UploadDelta(_stream(head, zeros), timeout=60).accepted
    wait_for(lambda: _round_sites(s.out, 1) is not None, 60, "round 1 to close")
    late = SimpleNamespace(
        delta={k: torch.from_numpy(v) for k, v in zeros.items()},
        num_samples=1, mean_loss=0.0, steps=1,
    )  # fmt: skip
    s.relay.kill()
    threading.Timer(1.0, s.relay.start).start()
    channel = open_channel(s.link.address)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        worker.upload(
            aggregator_pb2_grpc.AggregatorStub(channel), session, tasks[SITES[0]], late, 0.1
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value.details()
    assert time.monotonic() - started < 15
    channel.close()
    direct_channel.close()


def test_resume_takes_over_an_upload_the_aggregator_still_thinks_is_streaming(link_stack):
    """The route drops: the worker's connection goes, the aggregator's stays open and
    silent, its handler still waiting for the next chunk. The worker's resume takes the
    held bytes over from that stream; the stale stream, when it finally breaks, changes
    nothing. The delta is accepted once and the model is exact."""
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    reply = direct.Register(
        aggregator_pb2.RegisterRequest(worker_id="W", site_ids=SITES), timeout=10
    )
    session = reply.session_token
    tasks = _site_tasks(direct, "W", session)
    task = tasks[SITES[0]]
    model = _download(direct, "W", session, task.model_version)
    deltas = {site: _random_delta(model, 20 + i) for i, site in enumerate(SITES)}
    head = _header(task, "W", session, samples=7)
    with open_channel(s.link.address) as channel:
        call = aggregator_pb2_grpc.AggregatorStub(channel).UploadDelta.future(
            _stream(head, deltas[SITES[0]]), timeout=120
        )
        wait_for(
            lambda: _status(direct, task, "W", session).bytes_held >= 1_100_000, 60, "progress"
        )
        s.link.drop_route()
        with pytest.raises(grpc.RpcError) as info:
            call.result(timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
    time.sleep(0.3)  # bytes already past the link land first (else: ABORTED resume_offset)
    status = _status(direct, task, "W", session)  # still streaming, as far as it knows
    assert status.state == aggregator_pb2.UPLOAD_STATE_PARTIAL
    assert "upload of site-000 cut" not in s.aggregator.log_path.read_text()
    where = (status.next.tensor_index, status.next.offset)
    resumed = _header(task, "W", session, samples=7, resume=status.next)
    reply = direct.UploadDelta(_stream(resumed, deltas[SITES[0]], where), timeout=60)
    assert reply.accepted and reply.bytes_received == sum(v.nbytes for v in model.values())
    head_b = _header(tasks[SITES[1]], "W", session, samples=9)
    assert direct.UploadDelta(_stream(head_b, deltas[SITES[1]]), timeout=60).accepted
    expected = _expected_model(
        s.out, model, {SITES[0]: (deltas[SITES[0]], 7.0), SITES[1]: (deltas[SITES[1]], 9.0)}
    )
    _assert_model_is(direct, "W", session, expected)
    assert _metric(s.metrics_port, "powertrip_upload_resumes_total") == 1
    # the stale stream ends: refused as superseded if a chunk still in flight reaches it,
    # else as broken once its connection finally goes; either way nothing changes
    s.link.close()

    def stale_ended() -> float:
        return sum(_rejected(s.metrics_port, r) for r in ("stream_aborted", "superseded"))

    wait_for(lambda: stale_ended() == 1, 30, "the stale stream")
    assert _rejected(s.metrics_port, "duplicate") == 0
    direct_channel.close()
