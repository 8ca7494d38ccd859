"""The link and the worker's calls of the resumable-upload tests (issue #18, item 3):
test_resumable_upload_cut.py, test_resumable_upload_worker.py,
test_resumable_upload_route_drop.py; their fixture `link_stack` is in conftest.py.

The link: client -> ThinLink (forwards the client's bytes at RATE bytes/s and counts the
bytes that enter the link) -> delay_relay.py (its own process, 5 ms each way) ->
aggregator. Cutting the link is SIGKILL of the relay, mid-chunk; a new relay on the same
port is the link coming back. What the cut costs is counted in link bytes: the interrupted
upload's bytes over all its connections (its UploadStatus call included) minus those of an
uninterrupted upload of a delta of the same size. Without resumption the cost would be
everything sent before the cut, and the whole delta is sent again.
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

import grpc
import numpy as np

from powertrip.core.fedavg import StreamingFedAvg, apply_delta
from powertrip.linkshaping.relay import RELAY_SCRIPT
from powertrip.rpc.tensors import TensorAssembler, encode_tensors
from powertrip.v1 import aggregator_pb2
from tests.reliability.procs import free_port, scrape, wait_for

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
