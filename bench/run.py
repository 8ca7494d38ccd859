"""`make bench`: PowerTrip's speed as ratios against references measured in the same run.

Figures (issue 7), each next to its reference, measured interleaved (reference, candidate,
reference, ...) `--repeat` times so that a machine whose speed drifts (shared cores) moves
both alike; the ratio is the median of the pairwise ratios:

* train_site_steps_per_s: the system's simulated rounds (4 services as processes, gRPC, real
  deltas, `static` k sites of FEMNIST, the LEAF CNN, batch 20) vs loop_site_steps_per_s (a
  bare sequential torch loop doing the same steps, written plainly below, all cores' threads)
  and flower_site_steps_per_s (Flower's simulation of the same work; `pip install .[bench]`);
  train_gflops (steps/s x FLOPs per step from torch's FLOP counter) and train_vs_peak.
* transfer_MBps: a 26 MB model download + delta upload through the real aggregator service
  and the site worker's own client code on loopback vs raw_tcp_MBps (a plain socket, same
  bytes).
* fedavg_GBps over 100 CNN deltas vs memcpy_GBps, with the aggregating process's peak RSS.
* select_ms_p99 for SelectSites over gRPC at 100, 1,000 and 10,000 sites.
* bare_grpc_MBps (no target): the same bytes through gRPC alone, Python gRPC's own ceiling.
* gpu_site_steps_per_s (where torch sees a CUDA GPU): 100 FEMNIST sites in one vmap call
  on the GPU vs gpu_loop_site_steps_per_s, the plain sequential loop on the same GPU.
* demo_wall_s (only with --demo: it takes minutes): the default `make demo` comparison.

Writes bench/results/latest.json and prints a table. `--quick` is a smoke run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOAD = "femnist"
LR = 0.1  # configs/demo.yaml
BATCH = 20
NUM_SITES = 100


# ---- training -------------------------------------------------------------------------------
def femnist_sites():
    from powertrip.workloads import get_workload

    workload = get_workload(WORKLOAD)
    data = workload.load()
    part = workload.partition(data, NUM_SITES, 0)
    return workload, data, part


def bare_loop_steps_per_s(sites: list[int], steps: int, threads: int) -> float:
    """The reference: the same local work written plainly, one site after another.

    Each site starts from the global weights, takes `steps` SGD steps on its own batches of
    20 and hands back trained - global, as the system's sites do."""
    import torch

    torch.set_num_threads(threads)
    workload, data, part = femnist_sites()
    torch.manual_seed(0)
    model = workload.build_model()
    global_weights = {k: v.clone() for k, v in model.state_dict().items()}
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.perf_counter()
    for s in sites:
        ix = part.site_indices[s]
        x = torch.from_numpy(data.train.x[ix])
        y = torch.from_numpy(data.train.y[ix])
        model.load_state_dict(global_weights)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        gen = torch.Generator().manual_seed(s)
        order = torch.cat([torch.randperm(len(y), generator=gen) for _ in range(steps)])
        for step in range(steps):
            batch = order[step * BATCH : (step + 1) * BATCH]
            optimizer.zero_grad()
            loss = loss_fn(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
        _delta = {k: v - global_weights[k] for k, v in model.state_dict().items()}
    return len(sites) * steps / (time.perf_counter() - start)


def system_steps_per_s(
    sites: int, steps: int, rounds: int, out: Path, extra: list[str]
) -> tuple[float, list[int]]:
    """The system's simulated rounds (services, gRPC, real deltas): the rounds' wall time from
    selection until the last delta is in (evaluation excluded), warm-up round skipped."""
    run_dir = out / "system-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [
        sys.executable, "-m", "powertrip.cli", "run",
        "--workload", WORKLOAD, "--sites", str(NUM_SITES),
        "--policy", "static", "--param", f"k={sites}",
        "--max-rounds", str(rounds), "--target-accuracy", "1.0",
        "--out", str(run_dir), "--quiet", *extra,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"system run failed: {done.stderr[-2000:]}")
    rows = list(csv.DictReader((run_dir / "wall.csv").open()))[1:]
    train_s = sum(float(r["wall_train_s"]) for r in rows)
    chosen = next(csv.DictReader((run_dir / "rounds.csv").open()))["sites"].split(";")
    return len(rows) * sites * steps / train_s, [int(s.split("-")[-1]) for s in chosen]


def flops_per_step() -> float:
    """FLOPs of one forward + backward of the CNN on a batch of 20 (torch's FLOP counter)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from powertrip.workloads import get_workload

    model = get_workload(WORKLOAD).build_model()
    x = torch.randn(BATCH, 1, 28, 28)
    y = torch.randint(0, 62, (BATCH,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return float(counter.get_total_flops())


def peak_gflops(cores: int) -> tuple[float, str]:
    """fp32 peak of the cores: 2 x 256-bit FMA per cycle = 32 FLOP/cycle/core with AVX2+FMA."""
    mhz, flags = None, ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz") and mhz is None:
                mhz = float(line.split(":")[1])
            if line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    per_cycle = 32 if (" avx2" in flags and " fma" in flags) else 16
    ghz = (mhz or 3000.0) / 1000
    peak = cores * per_cycle * ghz
    return peak, (
        f"{cores} cores x {per_cycle} fp32 FLOP/cycle "
        f"({'AVX2 2xFMA' if per_cycle == 32 else 'SSE/AVX'}) x {ghz:.2f} GHz (/proc/cpuinfo)"
    )


# ---- GPU ------------------------------------------------------------------------------------
def gpu_loop_once(workload, model, jobs, steps: int) -> None:
    """The GPU reference, written plainly: one site after another on the same GPU, each from
    the global weights, its data moved to the GPU once, `steps` SGD steps, delta kept there."""
    import torch

    global_weights = {k: v.clone() for k, v in model.state_dict().items()}
    loss_fn = torch.nn.CrossEntropyLoss()
    for job in jobs:
        x = torch.from_numpy(job.x).cuda()
        y = torch.from_numpy(job.y).cuda()
        model.load_state_dict(global_weights)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        gen = torch.Generator().manual_seed(job.seed)
        order = torch.cat([torch.randperm(len(y), generator=gen) for _ in range(steps)]).cuda()
        for step in range(steps):
            batch = order[step * BATCH : (step + 1) * BATCH]
            optimizer.zero_grad()
            loss_fn(model(x[batch]), y[batch]).backward()
            optimizer.step()
        _delta = {k: v - global_weights[k] for k, v in model.state_dict().items()}
    model.load_state_dict(global_weights)
    torch.cuda.synchronize()


def gpu_figures(steps: int, repeat: int) -> dict:
    """gpu_site_steps_per_s: all 100 virtual sites in one `torch.func.vmap` call on CUDA
    (`powertrip.batched`, as a site worker runs with --device cuda --trainer vmap
    --site-batch 100), deltas back on the host; vs gpu_loop_site_steps_per_s, the plain
    sequential loop on the same GPU. Also the largest difference between the two trainers'
    deltas for the same sites and seeds (`powertrip.training.train_local` on the GPU)."""
    import torch

    from powertrip.batched import SiteJob, train_sites
    from powertrip.training import train_local

    if not torch.cuda.is_available():
        return {"gpu": f"not measured: torch {torch.__version__} sees no CUDA GPU"}
    workload, data, part = femnist_sites()
    torch.manual_seed(0)
    model = workload.build_model().cuda()
    jobs = [
        SiteJob(x=data.train.x[ix], y=data.train.y[ix], seed=site)
        for site, ix in enumerate(part.site_indices)
    ]

    def batched() -> None:
        train_sites(
            workload, model, jobs, steps=steps, lr=LR, batch_size=BATCH,
            trainer="vmap", site_batch=len(jobs),
        )  # fmt: skip
        torch.cuda.synchronize()

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return len(jobs) * steps / (time.perf_counter() - start)

    batched()  # warm-up: kernels, allocator, cuDNN plans
    gpu_loop_once(workload, model, jobs, steps)
    vmap_rates, loop_rates = [], []
    for _ in range(repeat):
        loop_rates.append(timed(lambda: gpu_loop_once(workload, model, jobs, steps)))
        vmap_rates.append(timed(batched))

    few = jobs[:4]  # same model update? vmap vs the plain per-site trainer, same seeds
    got = train_sites(
        workload, model, few, steps=steps, lr=LR, batch_size=BATCH,
        trainer="vmap", site_batch=len(few),
    )  # fmt: skip
    worst = 0.0
    for job, result in zip(few, got, strict=True):
        want = train_local(
            workload, model, job.x, job.y, steps=steps, lr=LR, batch_size=BATCH, seed=job.seed
        )
        for key, value in want.delta.items():
            scale = float(value.abs().max()) or 1.0
            worst = max(worst, float((result.delta[key] - value).abs().max()) / scale)
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu_name": f"{props.name}, {props.total_memory / 2**30:.0f} GiB, "
        f"torch {torch.__version__}, CUDA {torch.version.cuda}",
        "gpu_sites": len(jobs),
        "gpu_site_steps_per_s": statistics.median(vmap_rates),
        "gpu_loop_site_steps_per_s": statistics.median(loop_rates),
        "gpu_vs_loop": median_ratio(vmap_rates, loop_rates),
        "gpu_runs": [round(v, 1) for v in vmap_rates],
        "gpu_loop_runs": [round(v, 1) for v in loop_rates],
        "gpu_vmap_vs_loop_max_rel_diff": worst,
        "gpu_peak_mem_GiB": torch.cuda.max_memory_allocated() / 2**30,
    }


# ---- Flower ---------------------------------------------------------------------------------
def flower_steps_per_s(sites: int, steps: int, rounds: int) -> float:
    """Flower's simulation engine (Ray backend) doing the same work: 100 clients, `sites`
    sampled per round, each `steps` SGD steps of batch 20 from the global model, FedAvg.
    One CPU per client, so Ray runs as many clients at once as there are cores. Timed like
    the system: from configure_fit to the end of aggregate_fit, warm-up round skipped."""
    import logging

    import torch
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    cache: dict = {}

    def site_data(cid: int):
        if "data" not in cache:
            torch.set_num_threads(1)
            cache["data"] = femnist_sites()
            cache["model"] = cache["data"][0].build_model()
        workload, data, part = cache["data"]
        ix = part.site_indices[cid]
        return (
            cache["model"],
            torch.from_numpy(data.train.x[ix]),
            torch.from_numpy(data.train.y[ix]),
        )

    class Site(NumPyClient):
        def __init__(self, cid: int):
            self.cid = cid

        def fit(self, parameters, config):
            model, x, y = site_data(self.cid)
            keys = list(model.state_dict())
            state = {k: torch.from_numpy(v) for k, v in zip(keys, parameters, strict=True)}
            model.load_state_dict(state)
            optimizer = torch.optim.SGD(model.parameters(), lr=LR)
            loss_fn = torch.nn.CrossEntropyLoss()
            gen = torch.Generator().manual_seed(self.cid)
            order = torch.cat([torch.randperm(len(y), generator=gen) for _ in range(steps)])
            for step in range(steps):
                batch = order[step * BATCH : (step + 1) * BATCH]
                optimizer.zero_grad()
                loss_fn(model(x[batch]), y[batch]).backward()
                optimizer.step()
            return [v.detach().numpy() for v in model.state_dict().values()], len(y), {}

    def client_fn(context: Context):
        return Site(int(context.node_config["partition-id"])).to_client()

    times: list[tuple[float, float]] = []

    class TimedFedAvg(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            times.append((time.perf_counter(), 0.0))
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            if failures:
                raise RuntimeError(f"flower: {len(failures)} client failure(s): {failures[0]}")
            times[-1] = (times[-1][0], time.perf_counter())
            return out

    torch.manual_seed(0)
    model = femnist_sites()[0].build_model()
    initial = ndarrays_to_parameters([v.numpy() for v in model.state_dict().values()])

    def server_fn(context: Context):
        strategy = TimedFedAvg(
            fraction_fit=sites / NUM_SITES,
            min_fit_clients=sites,
            min_available_clients=NUM_SITES,
            fraction_evaluate=0.0,
            min_evaluate_clients=0,
            initial_parameters=initial,
        )
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    run_simulation(
        server_app=ServerApp(server_fn=server_fn),
        client_app=ClientApp(client_fn=client_fn),
        num_supernodes=NUM_SITES,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    done = [(a, b) for a, b in times if b > 0][1:]
    if not done:
        raise RuntimeError("flower finished no timed round")
    return len(done) * sites * steps / sum(b - a for a, b in done)


def flower_child(sites: int, steps: int, rounds: int) -> dict:
    """Flower in its own process (Ray leaves threads and a daemon behind); JSON on stdout."""
    command = [
        sys.executable, str(Path(__file__).resolve()), "--_flower",
        f"{sites},{steps},{rounds}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-600:]}"}


# ---- transfer -------------------------------------------------------------------------------
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

    def MBps(self, payload: bytes) -> float:
        """Half the payload down, the other half up, as the service path moves a model down
        and a delta up."""
        half = len(payload) // 2
        start = time.perf_counter()
        received = sum(len(m) for m in self.down(half.to_bytes(8, "little")))
        self.up(payload[o : o + (1 << 20)] for o in range(half, len(payload), 1 << 20))
        return (received + len(payload) - half) / (time.perf_counter() - start) / 1e6

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

        from powertrip.config import RunConfig
        from powertrip.experiments.launcher import Deployment, start_service
        from powertrip.heap import keep_buffers_on_heap
        from powertrip.rpc.channels import open_channel
        from powertrip.training import LocalResult
        from powertrip.v1 import aggregator_pb2_grpc
        from services.site_worker.config import WorkerConfig
        from services.site_worker.worker import SiteWorker

        config = RunConfig(
            workload=WORKLOAD, num_sites=1, policy="all", max_rounds=1000,
            target_accuracy=1.0, eval_samples=20, checkpoint=False, shadow=False,
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
        self.stub = aggregator_pb2_grpc.AggregatorStub(self.channel)
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

    def once(self) -> tuple[int, float]:
        """(bytes moved, seconds) for one download + one upload."""
        task = self.next_task()
        start = time.perf_counter()
        weights = self.worker.download(self.stub, self.session, task.model_version)
        self.worker.upload(self.stub, self.session, task, self.result, 0.0)
        elapsed = time.perf_counter() - start
        nbytes = 2 * sum(a.nbytes for a in weights.values())
        return nbytes, elapsed

    def __exit__(self, *exc) -> None:
        self.channel.__exit__(None, None, None)
        self.aggregator.stop()
        self.deployment.close()


# ---- FedAvg ---------------------------------------------------------------------------------
def fedavg_child(num_deltas: int) -> dict:
    """Streaming FedAvg over CNN-sized deltas in a fresh process, so its peak RSS is the
    aggregation's: RSS before the first delta vs at the end says whether memory is O(model)."""
    import resource

    from powertrip.fedavg import StreamingFedAvg

    def rss_mb() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return 0.0

    # the CNN's tensors, as the aggregator holds them
    shapes = {
        "0.weight": (32, 1, 5, 5), "0.bias": (32,), "3.weight": (64, 32, 5, 5), "3.bias": (64,),
        "7.weight": (2048, 3136), "7.bias": (2048,), "9.weight": (62, 2048), "9.bias": (62,),
    }  # fmt: skip
    rng = np.random.default_rng(0)
    template = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    delta = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    nbytes = sum(v.nbytes for v in delta.values())
    buf = {k: np.empty_like(v) for k, v in delta.items()}
    sites = [f"s{i}" for i in range(num_deltas)]
    fedavg_s, memcpy_s = [], []
    rss_before = rss_mb()
    for _ in range(3):  # interleaved: copy, aggregate, copy, aggregate, ...
        start = time.perf_counter()
        for _site in sites:
            for k, v in delta.items():
                np.copyto(buf[k], v)
        memcpy_s.append(time.perf_counter() - start)
        acc = StreamingFedAvg(sites, template)
        start = time.perf_counter()
        for site in sites:
            acc.add(site, delta, 10.0)
        acc.result()
        fedavg_s.append(time.perf_counter() - start)
        del acc  # one accumulator alive at a time, as in the aggregator
    ratios = [m / f for m, f in zip(memcpy_s, fedavg_s, strict=True)]
    return {
        "fedavg_GBps": num_deltas * nbytes / statistics.median(fedavg_s) / 1e9,
        "memcpy_GBps": num_deltas * nbytes / statistics.median(memcpy_s) / 1e9,
        "fedavg_vs_memcpy": statistics.median(ratios),
        "fedavg_peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "fedavg_rss_growth_MB": rss_mb() - rss_before,
        "model_MB": nbytes / 1e6,
    }


# ---- SelectSites ----------------------------------------------------------------------------
def _select_times(stub, request, calls: int, label: str) -> dict:
    """p99 and median milliseconds of `calls` SelectSites calls, keyed by `label`."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        stub.SelectSites(request, timeout=60)
        times.append((time.perf_counter() - start) * 1000)
    return {
        f"select_ms_p99_{label}": float(np.percentile(times, 99)),
        f"select_ms_median_{label}": float(np.median(times)),
    }


def select_p99_ms(sizes: list[int], calls: int, log_dir: Path) -> dict:
    """SelectSites over gRPC as the aggregator calls it (the sites as SiteColumns, with the
    7 shadow decisions), at each size; at the largest, also without shadows and with the
    sites as one SiteProfile message each (the contract's other form)."""
    from powertrip.experiments.launcher import start_service
    from powertrip.heap import keep_buffers_on_heap
    from powertrip.profiles import PopulationSpec, generate_population
    from powertrip.rpc.channels import open_channel
    from powertrip.sitecolumns import columns_from_profiles
    from powertrip.v1 import common_pb2, policy_pb2, policy_pb2_grpc

    keep_buffers_on_heap()  # this process plays the aggregator, whose set-up does the same
    out = {}
    service = start_service("policy", [], log_dir)
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
                        gpus_available=s.gpus_available,
                        gpus_effective=int(s.power_fraction * s.gpus_available),
                        power_source="uniform",
                        alive=True,
                    )
                    for s in generate_population(PopulationSpec(num_sites=n, seed=0))
                ]
                history = [common_pb2.RoundRecord(round=1, k=max(2, n // 20), accuracy=0.1)]
                columns = columns_from_profiles(sites)
                # as the profiler sends them before any link is probed: no measured columns
                del columns.measured_latency_s[:], columns.measured_bandwidth_bytes_per_s[:]
                request = policy_pb2.SelectSitesRequest(
                    policy="powertrip",
                    site_columns=columns,
                    history=history,
                    update_size_bytes=1.5e9,
                    tau_s=60,
                    round=2,
                    comm_directions=2,
                    shadow=True,
                )
                stub.SelectSites(request, timeout=60)  # warm-up
                out.update(_select_times(stub, request, calls, str(n)))
            # the same at the largest size without the 7 shadow decisions (shadow=False)
            request.shadow = False
            out.update(_select_times(stub, request, calls, f"{sizes[-1]}_no_shadows"))
            # and with shadows, the sites as messages (what callers outside the aggregator
            # may send)
            request.shadow = True
            request.ClearField("site_columns")
            request.sites.extend(sites)
            out.update(_select_times(stub, request, calls, f"{sizes[-1]}_messages"))
    finally:
        service.stop()
    return out


# ---- demo -----------------------------------------------------------------------------------
def demo_wall_s(out: Path) -> float:
    demo_out = out / "demo-run"
    shutil.rmtree(demo_out, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(
        ["make", "demo", f"DEMO_OUT={demo_out}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


# ---- driver ---------------------------------------------------------------------------------
def median_ratio(candidate: list[float], reference: list[float]) -> float:
    return statistics.median(c / r for c, r in zip(candidate, reference, strict=True))


def contention() -> str:
    load1, load5, _ = os.getloadavg()
    return f"load average {load1:.1f} (1 min) / {load5:.1f} (5 min) on {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sites", type=int, default=20, help="sites per round (training)")
    parser.add_argument("--steps", type=int, default=10, help="local steps per site")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per system/Flower run")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved repetitions")
    parser.add_argument(
        "--system-args", default="", help="extra `powertrip run` flags, e.g. '--trainer vmap'"
    )
    parser.add_argument("--no-flower", action="store_true", help="skip the Flower reference")
    parser.add_argument("--demo", action="store_true", help="also time `make demo` (minutes)")
    parser.add_argument("--quick", action="store_true", help="smoke run: small and fast")
    parser.add_argument("--only", help="comma-separated: train,flower,transfer,fedavg,select,gpu")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "latest.json"))
    parser.add_argument("--_flower", help=argparse.SUPPRESS)
    parser.add_argument("--_fedavg", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args._flower:
        sites, steps, rounds = (int(v) for v in args._flower.split(","))
        print(json.dumps({"flower_site_steps_per_s": flower_steps_per_s(sites, steps, rounds)}))
        return 0
    if args._fedavg:
        print(json.dumps(fedavg_child(args._fedavg)))
        return 0
    if args.quick:
        args.sites, args.steps, args.rounds, args.repeat = 4, 3, 2, 1
    parts = set((args.only or "train,flower,transfer,fedavg,select,gpu").split(","))
    out_json = Path(args.out)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="powertrip-bench-"))
    cores = os.cpu_count() or 1
    results: dict = {
        "machine": f"{platform.processor() or platform.machine()} {cores} cores, "
        f"{platform.system()} {platform.release()}",
        "date": time.strftime("%F %T %Z"),
        "command": " ".join([Path(sys.executable).name, "bench/run.py", *sys.argv[1:]]),
        "load_at_start": contention(),
    }

    if "train" in parts:
        print(f"training: system vs bare loop, x{args.repeat} interleaved ...", flush=True)
        extra = args.system_args.split()
        system, loop = [], []
        for _ in range(args.repeat):
            rate, chosen = system_steps_per_s(args.sites, args.steps, args.rounds, work, extra)
            system.append(rate)
            loop.append(bare_loop_steps_per_s(chosen, args.steps, cores))
        results["train_site_steps_per_s"] = statistics.median(system)
        results["loop_site_steps_per_s"] = statistics.median(loop)
        results["train_vs_loop"] = median_ratio(system, loop)
        results["train_runs"] = [round(v, 2) for v in system]
        results["loop_runs"] = [round(v, 2) for v in loop]
        flops = flops_per_step()
        peak, assumption = peak_gflops(cores)
        results["gflop_per_step"] = flops / 1e9
        results["train_gflops"] = results["train_site_steps_per_s"] * flops / 1e9
        results["peak_gflops"] = peak
        results["peak_assumption"] = assumption
        results["train_vs_peak"] = results["train_gflops"] / peak

    if "flower" in parts and not args.no_flower:
        try:
            import flwr  # noqa: F401
        except ImportError:
            results["flower"] = "skipped: flwr is not installed (pip install -e '.[bench]')"
        else:
            print("training: Flower simulation (Ray) ...", flush=True)
            got = flower_child(args.sites, args.steps, args.rounds)
            if "error" in got:  # Ray's node start times out (30 s, fixed) on a loaded host
                print("Flower failed once; retrying ...", flush=True)
                got = flower_child(args.sites, args.steps, args.rounds)
            if "error" in got:
                results["flower"] = f"skipped: Flower failed: {got['error']}"
            else:
                results["flower_site_steps_per_s"] = got["flower_site_steps_per_s"]
                if "train_site_steps_per_s" in results:
                    results["train_vs_flower"] = (
                        results["train_site_steps_per_s"] / got["flower_site_steps_per_s"]
                    )

    if "transfer" in parts:
        print("transfer: service path vs raw TCP ...", flush=True)
        service, raw, bare = [], [], []
        with TransferBench(work) as bench, BareGrpc() as bare_grpc:
            bench.once()  # warm-up
            for _ in range(max(3, args.repeat * 2)):
                nbytes, seconds = bench.once()
                service.append(nbytes / seconds / 1e6)
                payload = np.random.default_rng(0).bytes(nbytes)
                raw.append(raw_tcp_MBps(payload))
                bare.append(bare_grpc.MBps(payload))
        results["transfer_bytes"] = nbytes
        results["transfer_MBps"] = statistics.median(service)
        results["raw_tcp_MBps"] = statistics.median(raw)
        results["transfer_vs_tcp"] = median_ratio(service, raw)
        results["bare_grpc_MBps"] = statistics.median(bare)
        results["bare_grpc_vs_tcp"] = median_ratio(bare, raw)

    if "fedavg" in parts:
        print("fedavg: 100 deltas vs memcpy ...", flush=True)
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--_fedavg", "100"],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        results.update(json.loads(done.stdout.strip().splitlines()[-1]))

    if "select" in parts:
        print("select: SelectSites p99 over gRPC ...", flush=True)
        results.update(select_p99_ms([100, 1000, 10000], 20 if args.quick else 100, work / "logs"))

    if "gpu" in parts:
        print("gpu: 100 sites batched on CUDA vs the sequential GPU loop ...", flush=True)
        results.update(gpu_figures(args.steps, max(3, args.repeat)))

    if args.demo:
        print("demo: make demo (minutes) ...", flush=True)
        results["demo_wall_s"] = demo_wall_s(work)
    else:
        results["demo_wall_s"] = "not measured (pass --demo)"

    results["load_at_end"] = contention()
    out_json.write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    width = max(len(k) for k in results)
    for key, value in results.items():
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {text}")
    print(f"written: {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
