"""Load harness: one real aggregator (plus real profiler and policy processes) with N
virtual sites registered and long-polling over gRPC, K of them selected and uploading per
round. The virtual sites are asyncio coroutines in this process (one gRPC connection per
100 of them); they download the real model and upload a small random delta, so the
aggregator does everything it does in production, minus waiting for training.

    python -m tests.reliability.load --sites 1000 --k 100 --rounds 20 --out runs/reliability

Reports registration time, round times, health-check latency under load (p50/p99/max),
and the aggregator's RSS, threads and open fds over the run, as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from powertrip.app.experiments.launcher import start_service
from powertrip.core.config import RunConfig
from powertrip.core.profiles import site_id
from powertrip.rpc.server import MAX_MESSAGE_BYTES
from powertrip.rpc.tensors import TensorAssembler, encode_tensors
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc

SITES_PER_CHANNEL = 100


def proc_sample(pid: int) -> dict[str, int]:
    """RSS (KiB), threads and open fds of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {
        "rss_kb": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
    }


class Sampler(threading.Thread):
    """Samples a process every `period_s` with the run's current round."""

    def __init__(self, pid: int, round_of, period_s: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.round_of, self.period_s = pid, round_of, period_s
        self.samples: list[dict] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append({"round": self.round_of(), **proc_sample(self.pid)})
            except (OSError, KeyError):
                return
            self.stop.wait(self.period_s)


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


async def _virtual_site(i: int, stub, stats: dict, rng: np.random.Generator) -> None:
    worker = f"v{i:05d}"
    reply = await stub.Register(
        aggregator_pb2.RegisterRequest(worker_id=worker, site_ids=[site_id(i)]), timeout=120
    )
    stats["registered"] += 1
    session = reply.session_token
    encoding = reply.spec.delta_encoding or "fp32"  # as a real worker sends (int8 by default)
    while True:
        polled = await stub.NextTask(
            aggregator_pb2.NextTaskRequest(worker_id=worker, wait_s=20, session_token=session),
            timeout=60,
        )
        stats["polls"] += 1
        if polled.shutdown:
            stats["shutdown"] = True  # the run is over: the aggregator exits soon
            return
        for task in polled.tasks:
            assembler = TensorAssembler()
            async for chunk in stub.DownloadModel(
                aggregator_pb2.DownloadModelRequest(
                    worker_id=worker, model_version=task.model_version, session_token=session
                ),
                timeout=60,
            ):
                assembler.add(chunk)
            model = assembler.finish()
            delta = {
                k: (rng.standard_normal(v.shape) * 1e-3).astype(v.dtype) for k, v in model.items()
            }
            header = aggregator_pb2.DeltaHeader(
                task_id=task.task_id, site_id=task.site_id, round=task.round,
                model_version=task.model_version, num_samples=50, train_loss=1.0,
                worker_id=worker, session_token=session,
            )  # fmt: skip
            messages = [aggregator_pb2.UploadDeltaRequest(header=header)] + [
                aggregator_pb2.UploadDeltaRequest(chunk=c)
                for c in encode_tensors(delta, delta_encoding=encoding)
            ]
            try:
                await stub.UploadDelta(iter(messages), timeout=60)
                stats["uploads"] += 1
            except grpc.aio.AioRpcError as exc:
                stats["rejected"] += 1
                stats.setdefault("reject_codes", []).append(exc.code().name)


async def _health_probe(
    target: str, latencies: list[tuple[bool, float]], done: asyncio.Event, stats: dict, sites: int
) -> None:
    """Health-check latency, tagged with whether all sites had registered yet, until the run
    is over: once a site has seen `shutdown` the aggregator is leaving (--exit-when-done),
    and a check it no longer answers is not a failure of the running service."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while not done.is_set() and not stats.get("shutdown"):
            registered = stats["registered"] >= sites
            start = time.perf_counter()
            try:
                await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
                latencies.append((registered, time.perf_counter() - start))
            except grpc.aio.AioRpcError:
                if not stats.get("shutdown"):
                    latencies.append((registered, float("inf")))
            await asyncio.sleep(0.2)


async def _drive(target: str, sites: int, stats: dict, latencies: list[float]) -> float:
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.use_local_subchannel_pool", 1),  # one real connection per channel
    ]
    channels = [
        grpc.aio.insecure_channel(target, options=options)
        for _ in range(-(-sites // SITES_PER_CHANNEL))
    ]
    stubs = [aggregator_pb2_grpc.AggregatorStub(c) for c in channels]
    rng = np.random.default_rng(0)
    done = asyncio.Event()
    probe = asyncio.create_task(_health_probe(target, latencies, done, stats, sites))
    start = time.monotonic()
    try:
        await asyncio.gather(
            *(_virtual_site(i, stubs[i // SITES_PER_CHANNEL], stats, rng) for i in range(sites))
        )
    finally:
        done.set()
        await probe
        for channel in channels:
            await channel.close()
    return time.monotonic() - start


def run_load(out: Path, sites: int = 1000, k: int = 100, rounds: int = 20) -> dict:
    """Start the services, drive the virtual sites, return the measured figures."""
    out.mkdir(parents=True, exist_ok=True)
    config = RunConfig(
        workload="synthetic", num_sites=sites, max_rounds=rounds, seed=0, policy="random",
        policy_params={"k": float(k)}, target_accuracy=0.999, round_deadline_s=300,
        shadow=False,
    )  # fmt: skip
    path = out / "run.yaml"
    config.write_yaml(path)
    logs = out / "logs"
    services = []
    try:
        services.append(start_service("profiler", ["--config", str(path)], logs))
        services.append(start_service("policy", [], logs))
        aggregator = start_service(
            "aggregator",
            ["--config", str(path), "--out", str(out / "run"), "--exit-when-done",
             "--profiler", services[0].target, "--policy", services[1].target,
             "--max-threads", str(sites + 100), "--register-timeout-s", "600"],
            logs,
            timeout_s=120,
        )  # fmt: skip
        services.append(aggregator)
        rows_path = out / "run" / "rounds.csv"

        def current_round() -> int:
            try:
                return max(0, len(rows_path.read_text().splitlines()) - 1)
            except OSError:
                return 0

        sampler = Sampler(aggregator.process.pid, current_round)
        sampler.start()
        stats = {"registered": 0, "polls": 0, "uploads": 0, "rejected": 0}
        latencies: list[tuple[bool, float]] = []
        wall = asyncio.run(_drive(aggregator.target, sites, stats, latencies))
        sampler.stop.set()
        sampler.join()
        aggregator.process.wait(timeout=60)
    finally:
        for service in reversed(services):
            service.stop()
    walls = [
        float(line.split(",")[1])
        for line in (out / "run" / "wall.csv").read_text().splitlines()[1:]
    ]
    samples = sampler.samples
    after_first = [s for s in samples if s["round"] >= 1] or samples

    def health(during_rounds: bool | None) -> dict:
        chosen = [x for r, x in latencies if during_rounds is None or r == during_rounds]
        finite = [x for x in chosen if x != float("inf")]
        return {
            "n": len(chosen),
            "failed": len(chosen) - len(finite),
            "p50": round(1000 * _percentile(finite, 50), 2),
            "p99": round(1000 * _percentile(finite, 99), 2),
            "max": round(1000 * max(finite), 2) if finite else None,
        }

    result = {
        "sites": sites,
        "k": k,
        "rounds": current_round(),
        "wall_s": round(wall, 1),
        "uploads": stats["uploads"],
        "rejected": stats["rejected"],
        "polls": stats["polls"],
        "round_wall_s": {
            "mean": round(statistics.fmean(walls), 3),
            "max": round(max(walls), 3),
        },
        "health_check_ms": health(None),
        "health_check_ms_while_registering": health(False),
        "health_check_ms_during_rounds": health(True),
        "aggregator": {
            "rss_mb_after_round_1": round(after_first[0]["rss_kb"] / 1024, 1),
            "rss_mb_peak": round(max(s["rss_kb"] for s in samples) / 1024, 1),
            "rss_mb_last": round(samples[-1]["rss_kb"] / 1024, 1),
            "threads_peak": max(s["threads"] for s in samples),
            "fds_peak": max(s["fds"] for s in samples),
        },
    }
    (out / "load.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default="runs/reliability/load")
    args = parser.parse_args()
    print(json.dumps(run_load(Path(args.out), args.sites, args.k, args.rounds), indent=2))


if __name__ == "__main__":
    main()
