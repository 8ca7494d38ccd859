"""transfer_MBps: a model down and a delta up through the real aggregator vs raw TCP.

The service path is the site worker's own download/upload code against a real aggregator
(and its profiler and policy) on loopback; the reference is a plain socket moving the same
bytes.  bare_grpc_MBps (no target) moves them through gRPC alone, Python gRPC's ceiling;
checked_tcp_MBps (no target) moves them over a plain socket between two processes that do
only the per-byte work the contract requires, the ceiling of any transport that keeps it.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import WORKLOAD, femnist_sites, median_ratio


@dataclass(frozen=True)
class Moved:
    """One model down and one delta up: bytes and seconds of each."""

    down_bytes: int
    down_s: float
    up_bytes: int
    up_s: float

    @property
    def total_bytes(self) -> int:
        return self.down_bytes + self.up_bytes

    @property
    def MBps(self) -> float:  # noqa: N802 - the unit's spelling
        return self.total_bytes / (self.down_s + self.up_s) / 1e6

    @property
    def down_MBps(self) -> float:  # noqa: N802
        return self.down_bytes / self.down_s / 1e6

    @property
    def up_MBps(self) -> float:  # noqa: N802
        return self.up_bytes / self.up_s / 1e6


def raw_tcp_MBps(payload: bytes) -> float:
    """A plain socket on loopback sending the same bytes: the wire's reference."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def sink():
        conn, _ = server.accept()
        buf = bytearray(1 << 20)
        while conn.recv_into(buf):
            pass
        conn.close()

    thread = threading.Thread(target=sink)
    thread.start()
    client = socket.create_connection(("127.0.0.1", port))
    start = time.perf_counter()
    client.sendall(payload)
    client.shutdown(socket.SHUT_WR)
    thread.join()
    elapsed = time.perf_counter() - start
    client.close()
    server.close()
    return len(payload) / elapsed / 1e6


def _views(arrays: dict[str, np.ndarray], chunk_bytes: int):
    """Every tensor's bytes as chunk-sized views, in order, without a copy: the model's
    download, whose chunks the aggregator checksummed once for every site."""
    for array in arrays.values():
        raw = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        for offset in range(0, len(raw), chunk_bytes):
            yield raw[offset : offset + chunk_bytes]


def _checked_sink(layout, ports, quit_) -> None:
    """CheckedTcp's receiving process: each transfer is a model (received as a site worker
    does: CRC-32C per chunk, the finite check per tensor) and then a delta (as the
    aggregator does: the same checks and the float64 FedAvg add), each straight into its
    tensor's memory; one byte back when both are in."""
    from powertrip.core.fedavg import StreamingFedAvg
    from powertrip.rpc.heap import keep_buffers_on_heap
    from powertrip.rpc.tensors import CHUNK_BYTES, crc32c_of

    keep_buffers_on_heap()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    ports.put(server.getsockname()[1])
    conn, _ = server.accept()
    template = {name: np.zeros(shape, dtype) for name, shape, dtype in layout}
    while not quit_.is_set():
        for direction in ("down", "up"):
            arrays = {name: np.empty_like(a) for name, a in template.items()}
            for array in arrays.values():
                raw = memoryview(array.reshape(-1).view(np.uint8))
                for offset in range(0, len(raw), CHUNK_BYTES):
                    chunk = raw[offset : offset + CHUNK_BYTES]
                    got = 0
                    while got < len(chunk):
                        n = conn.recv_into(chunk[got:])
                        if not n:
                            return  # the bench closed the connection
                        got += n
                    crc32c_of(chunk)
                if not np.isfinite(array).all():
                    raise ValueError("non-finite bytes in the bench's payload")
            if direction == "up":
                fedavg = StreamingFedAvg(["bench"], template)
                fedavg.add("bench", arrays, 1.0)
                fedavg.result()
        conn.sendall(b"k")


class CheckedTcp:
    """The ceiling of any transport that keeps this contract's checks: raw TCP between two
    processes carrying the model down and a delta up, with only the per-byte work the
    service path cannot skip. The sender computes each upload chunk's CRC-32C (the
    aggregator's download chunks are made once per model version, so their CRCs are not
    charged); the receiver checks every chunk's CRC-32C and every tensor's finiteness and
    adds the delta into a float64 FedAvg sum, with the data received straight into the
    tensors (no framing, no copy). No gRPC, no protobuf, no authentication."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays

    def __enter__(self) -> CheckedTcp:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        ports, self.quit = context.Queue(), context.Event()
        layout = [(name, a.shape, a.dtype.str) for name, a in self.arrays.items()]
        self.process = context.Process(target=_checked_sink, args=(layout, ports, self.quit))
        self.process.start()
        self.sock = socket.create_connection(("127.0.0.1", ports.get(timeout=60)))
        return self

    def once(self) -> Moved:
        from powertrip.rpc.tensors import CHUNK_BYTES, chunk_pieces

        nbytes = sum(a.nbytes for a in self.arrays.values())
        try:
            start = time.perf_counter()
            for chunk in _views(self.arrays, CHUNK_BYTES):
                self.sock.sendall(chunk)
            middle = time.perf_counter()  # sent, not yet received: only the total is exact
            # the upload as a site worker makes it: a chunk's CRC-32C, then its bytes
            for _chunk, data in chunk_pieces(self.arrays, CHUNK_BYTES):
                self.sock.sendall(data)
            acked = self.sock.recv(1) == b"k"
        except OSError as exc:
            raise RuntimeError(f"the checked TCP sink stopped ({exc})") from exc
        if not acked:
            raise RuntimeError("the checked TCP sink stopped (its error is on stderr)")
        return Moved(nbytes, middle - start, nbytes, time.perf_counter() - middle)

    def __exit__(self, *exc) -> None:
        self.quit.set()
        self.sock.close()
        self.process.join(timeout=10)


def _bare_grpc_server(ports, stop) -> None:
    """BareGrpc's server process: 1 MiB `bytes` messages, a generic handler, no protobuf."""
    from concurrent import futures

    import grpc

    chunk = bytes(1 << 20)

    def upload(messages, _context):
        return sum(len(m) for m in messages).to_bytes(8, "little")

    def download(request, _context):
        total = int.from_bytes(request, "little")
        for offset in range(0, total, len(chunk)):
            yield chunk[: min(len(chunk), total - offset)]

    handler = grpc.method_handlers_generic_handler(
        "bench.Bytes",
        {
            "Up": grpc.stream_unary_rpc_method_handler(upload),
            "Down": grpc.unary_stream_rpc_method_handler(download),
        },
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", 8 << 20)]
    )
    server.add_generic_rpc_handlers((handler,))
    ports.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    stop.wait()
    server.stop(0)


class BareGrpc:
    """gRPC itself, without PowerTrip: 1 MiB `bytes` messages streamed down and then up
    between two processes through a generic handler; no protobuf, no checksum, no
    aggregation. Not a target's reference: it shows how much of raw TCP Python gRPC
    leaves for the service path."""

    def __enter__(self) -> BareGrpc:
        import multiprocessing

        import grpc

        context = multiprocessing.get_context("spawn")  # no fork after gRPC has started
        ports, self.stop = context.Queue(), context.Event()
        self.process = context.Process(target=_bare_grpc_server, args=(ports, self.stop))
        self.process.start()
        port = ports.get(timeout=60)
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 8 << 20)]
        )
        self.up = self.channel.stream_unary("/bench.Bytes/Up")
        self.down = self.channel.unary_stream("/bench.Bytes/Down")
        return self

    def once(self, payload: bytes) -> Moved:
        """Half the payload down, the other half up, as the service path moves a model down
        and a delta up."""
        half = len(payload) // 2
        start = time.perf_counter()
        received = sum(len(m) for m in self.down(half.to_bytes(8, "little")))
        middle = time.perf_counter()
        self.up(payload[o : o + (1 << 20)] for o in range(half, len(payload), 1 << 20))
        return Moved(received, middle - start, len(payload) - half, time.perf_counter() - middle)

    def __exit__(self, *exc) -> None:
        self.channel.close()
        self.stop.set()
        self.process.join(timeout=10)


class TransferBench:
    """A real aggregator (and its profiler and policy) on loopback, one site; the bench is
    the site worker, using the worker's own download/upload code. Each round: download the
    26 MB model, upload a 26 MB delta (zeros, so the model stays put)."""

    def __init__(self, work: Path):
        self.work = work

    def __enter__(self) -> TransferBench:
        import torch

        from powertrip.app.experiments.launcher import Deployment, start_service
        from powertrip.core.config import RunConfig
        from powertrip.core.training import LocalResult
        from powertrip.rpc.channels import open_channel
        from powertrip.rpc.chunkwire import AggregatorStub
        from powertrip.rpc.heap import keep_buffers_on_heap
        from services.site_worker.config import WorkerConfig
        from services.site_worker.worker import SiteWorker

        # fp32 deltas: the bytes the raw-TCP and bare-gRPC references move (int8's own
        # figures are bench/deltawire.py's)
        config = RunConfig(
            workload=WORKLOAD, num_sites=1, policy="all", max_rounds=1000,
            target_accuracy=1.0, eval_samples=20, checkpoint=False, shadow=False,
            delta_encoding="fp32",
        ).resolved(femnist_sites()[0].defaults)  # fmt: skip
        # this process plays the site worker, whose set-up does the same (and the references
        # measured next to it run under it too)
        keep_buffers_on_heap()
        config_path = self.work / "transfer.yaml"
        config.write_yaml(config_path)
        self.deployment = Deployment(config_path, self.work / "logs").__enter__()
        self.aggregator = start_service(
            "aggregator",
            [
                "--config", str(config_path), "--out", str(self.work / "transfer-run"),
                "--profiler", self.deployment.profiler.target,
                "--policy", self.deployment.policy.target,
            ],
            self.work / "logs", timeout_s=120,
        )  # fmt: skip
        self.channel = open_channel(self.aggregator.target).__enter__()
        self.stub = AggregatorStub(self.channel)
        self.worker = SiteWorker(
            WorkerConfig(aggregator=self.aggregator.target, worker_id="bench", site_count=1)
        )
        reply = self.worker.register(self.stub)
        self.session = reply.session_token
        template = {k: torch.zeros_like(v) for k, v in self.model_state().items()}
        self.result = LocalResult(delta=template, num_samples=10, mean_loss=0.0, steps=1)
        return self

    @staticmethod
    def model_state():
        import torch

        torch.manual_seed(0)
        return femnist_sites()[0].build_model().state_dict()

    def next_task(self):
        from powertrip.v1 import aggregator_pb2

        while True:
            polled = self.stub.NextTask(
                aggregator_pb2.NextTaskRequest(
                    worker_id="bench", wait_s=10, session_token=self.session
                ),
                timeout=30,
            )
            if polled.tasks:
                return polled.tasks[0]

    def once(self) -> Moved:
        """One download and one upload."""
        task = self.next_task()
        start = time.perf_counter()
        weights = self.worker.download(self.stub, self.session, task.model_version)
        middle = time.perf_counter()
        self.worker.upload(self.stub, self.session, task, self.result, 0.0)
        nbytes = sum(a.nbytes for a in weights.values())
        return Moved(nbytes, middle - start, nbytes, time.perf_counter() - middle)

    def __exit__(self, *exc) -> None:
        self.channel.__exit__(None, None, None)
        self.aggregator.stop()
        self.deployment.close()


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """Service path, raw TCP, bare gRPC and checked TCP interleaved, after one warm-up
    round; each direction on its own too (the upload includes the aggregator adding the
    delta to the round's sum before it answers). checked_tcp_vs_tcp is the most any
    transport keeping the checks could reach here: the ceiling a bulk channel beside gRPC
    would have."""
    out: dict = {}
    print("transfer: service path vs raw TCP ...", flush=True)
    service, raw, bare, checked = [], [], [], []
    arrays = {k: v.numpy() for k, v in TransferBench.model_state().items()}
    with TransferBench(work) as bench, BareGrpc() as bare_grpc, CheckedTcp(arrays) as ceiling:
        bench.once()  # warm-ups
        ceiling.once()
        for _ in range(max(3, args.repeat * 2)):
            moved = bench.once()
            service.append(moved)
            payload = np.random.default_rng(0).bytes(moved.total_bytes)
            raw.append(raw_tcp_MBps(payload))
            bare.append(bare_grpc.once(payload))
            checked.append(ceiling.once().MBps)
    out["transfer_bytes"] = service[-1].total_bytes
    out["transfer_MBps"] = statistics.median(m.MBps for m in service)
    out["raw_tcp_MBps"] = statistics.median(raw)
    out["transfer_vs_tcp"] = median_ratio([m.MBps for m in service], raw)
    out["bare_grpc_MBps"] = statistics.median(m.MBps for m in bare)
    out["bare_grpc_vs_tcp"] = median_ratio([m.MBps for m in bare], raw)
    out["checked_tcp_MBps"] = statistics.median(checked)
    out["checked_tcp_vs_tcp"] = median_ratio(checked, raw)
    out["transfer_vs_checked_tcp"] = median_ratio([m.MBps for m in service], checked)
    for way in ("down", "up"):
        rate = [getattr(m, f"{way}_MBps") for m in service]
        bare_rate = [getattr(m, f"{way}_MBps") for m in bare]
        out[f"transfer_{way}_MBps"] = statistics.median(rate)
        out[f"bare_grpc_{way}_MBps"] = statistics.median(bare_rate)
        out[f"transfer_{way}_vs_bare_grpc"] = median_ratio(rate, bare_rate)
    return out
