"""scale_*: what a round costs outside training, and the aggregator's memory, as sites grow.

Issue 19, item 4. At each size (100, 1,000, 10,000 and 100,000 sites by default;
`--scale-sizes`): the four services as processes, real gRPC on loopback, started as `powertrip
run` starts them (one site worker hosting every site), the synthetic workload (a site makes
its samples when it trains), the `random` policy at k = 100 with its 7 shadow decisions, a
warm-up round and `--rounds` measured rounds. From the aggregator's wall.csv, per round:

* overhead: profiles + selection + dispatch + aggregation + records (files, metrics,
  checkpoint), i.e. everything but the sites' training and the evaluation, and each phase;
* from /proc: the aggregator's largest RSS while the measured rounds ran (sampled with
  each status poll, every 0.2 s), and per site its difference to the smallest size's
  divided by the extra sites; its peak over the whole run (VmHWM: the summary written at
  the end lists every site), and the profiler's and policy's RSS at the end, beside it.

The profile table crosses the wire in GetProfiles and SelectSites: about 4.5 MB at
100,000 sites, which the internal services' message limit (`CONTROL_MESSAGE_BYTES`,
powertrip.rpc.server) allows.

Sizes interleave within each repetition (100, 1k, 10k, 100k, 100, ...), so a machine whose
speed drifts moves all alike. Each figure is the median over all measured rounds of all
repetitions, with the range of the per-repetition medians as its spread; growth is the
ratio of the medians of consecutive sizes (linear growth: at most the sites' ratio).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

from bench.render import target_of

SIZES = (100, 1_000, 10_000, 100_000)
QUICK_SIZES = (100, 1_000)
K = 100
#: the target (issue 19): milliseconds outside training per round at 10,000 sites (declared
#: with the others in bench/render.py)
TARGET_MS_AT_10K = target_of("scale_overhead_ms_10000")
PHASES = ("profiles", "select", "dispatch", "aggregate", "record")


def proc_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, KiB, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def wait_done(aggregator, watched: list, rounds: int, timeout_s: float) -> tuple[str, int]:
    """Poll the aggregator's status until the run is over: its final state, and its
    largest RSS (KiB) while rounds 2..`rounds` were under way (after the first round, before
    the last: the summary written after it, with every site's profile, is not a round's)."""
    import grpc

    from powertrip.rpc.channels import open_channel
    from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc

    deadline = time.monotonic() + timeout_s
    rounds_kb = 0
    with open_channel(aggregator.target) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        while time.monotonic() < deadline:
            try:
                status = stub.GetStatus(aggregator_pb2.GetStatusRequest(), timeout=5)
            except grpc.RpcError:
                status = aggregator_pb2.RunStatus()
            if status.state in ("done", "failed"):
                return status.state, rounds_kb
            if status.state == "running" and 1 <= status.round < rounds:
                rounds_kb = max(rounds_kb, proc_kb(aggregator.process.pid)["VmRSS"])
            dead = [s for s in watched if not s.alive()]
            if dead:
                raise RuntimeError(dead[0].exit_report())
            time.sleep(0.2)
    raise RuntimeError(f"the run did not finish within {timeout_s:.0f} s")


def run_size(sites: int, rounds: int, out: Path) -> dict:
    """One run at `sites` sites: per measured round its overhead and phases (ms), and the
    services' memory once it is over."""
    from powertrip.app.experiments.launcher import start_service, stop_services
    from powertrip.app.experiments.runner import site_args
    from powertrip.core import runfiles
    from powertrip.core.config import RunConfig
    from powertrip.core.profiles import site_id

    run_dir = out / f"sites-{sites}"
    run_dir.mkdir(parents=True, exist_ok=True)
    config = RunConfig(
        workload="synthetic", num_sites=sites, max_rounds=rounds + 1, seed=0, policy="random",
        policy_params={"k": float(min(K, sites))}, target_accuracy=0.999,
    )  # fmt: skip
    path = run_dir / "run.yaml"
    config.write_yaml(path)
    logs = run_dir / "logs"
    services = []
    started = time.monotonic()
    try:
        profiler = start_service("profiler", ["--config", str(path)], logs, timeout_s=300)
        services.append(profiler)
        policy = start_service("policy", [], logs)
        services.append(policy)
        aggregator = start_service(
            "aggregator",
            ["--config", str(path), "--out", str(run_dir / "run"),
             "--profiler", profiler.target, "--policy", policy.target],
            logs, timeout_s=300,
        )  # fmt: skip
        services.append(aggregator)
        worker_args = [
            "--aggregator", aggregator.target,
            *site_args([site_id(i) for i in range(sites)]),
            "--worker-id", "worker-0", "--threads", "1", "--train-threads", "0",
        ]  # fmt: skip
        services.append(start_service("site_worker:0", worker_args, logs, wait_serving=False))
        state, rounds_kb = wait_done(aggregator, services, rounds + 1, timeout_s=600)
        if state != "done":
            raise RuntimeError(f"{sites} sites: the run {state}; see {logs}")
        memory = {s.name: proc_kb(s.process.pid) for s in services[:3]}
        # rounds too quick for a poll to see: the RSS at the end stands in
        memory["aggregator"]["rounds"] = rounds_kb or memory["aggregator"]["VmRSS"]
    finally:
        stop_services(reversed(services))
    rows = list(csv.DictReader((run_dir / "run" / runfiles.WALL).open()))[1:]  # warm-up
    if not rows:
        raise RuntimeError(f"{sites} sites: no measured round in {run_dir / 'run'}")
    phases = {p: [1000 * float(r[f"wall_{p}_s"]) for r in rows] for p in PHASES}
    return {
        "overhead_ms": [sum(values) for values in zip(*phases.values(), strict=True)],
        "phases_ms": phases,
        "memory_kb": memory,
        "run_s": time.monotonic() - started,
    }


def summarise(sizes: list[int], runs: dict[int, list[dict]]) -> dict:
    """The figures from every size's repetitions (see the module docstring)."""
    out: dict = {}
    medians = {}
    for n in sizes:
        reps = runs[n]
        every = [ms for rep in reps for ms in rep["overhead_ms"]]
        per_rep = [statistics.median(rep["overhead_ms"]) for rep in reps]
        medians[n] = statistics.median(every)
        out[f"scale_overhead_ms_{n}"] = medians[n]
        out[f"scale_overhead_ms_{n}_spread"] = f"{min(per_rep):.1f}-{max(per_rep):.1f}"
        out[f"scale_phases_ms_{n}"] = {
            p: round(statistics.median(v for rep in reps for v in rep["phases_ms"][p]), 2)
            for p in PHASES
        }
        out[f"scale_aggregator_rss_mb_{n}"] = statistics.median(
            rep["memory_kb"]["aggregator"]["rounds"] / 1024 for rep in reps
        )
        out[f"scale_aggregator_end_peak_mb_{n}"] = statistics.median(
            rep["memory_kb"]["aggregator"]["VmHWM"] / 1024 for rep in reps
        )
        out[f"scale_rss_mb_{n}_profiler_policy"] = [
            round(statistics.median(rep["memory_kb"][s]["VmRSS"] / 1024 for rep in reps), 1)
            for s in ("profiler", "policy")
        ]
    for small, big in zip(sizes, sizes[1:], strict=False):
        out[f"scale_growth_{small}_to_{big}"] = medians[big] / medians[small]
        rss = out[f"scale_aggregator_rss_mb_{big}"] - out[f"scale_aggregator_rss_mb_{sizes[0]}"]
        out[f"scale_aggregator_bytes_per_site_{big}"] = rss * 2**20 / (big - sizes[0])
    if 10_000 in medians:
        met = medians[10_000] <= TARGET_MS_AT_10K
        out["scale_target_10k"] = f"<= {TARGET_MS_AT_10K:g} ms: {'met' if met else 'not met'}"
    return out


def measure(args: argparse.Namespace, work: Path, results: dict) -> dict:
    """Every size once per repetition, interleaved."""
    sizes = list(QUICK_SIZES if args.quick else SIZES)
    if getattr(args, "scale_sizes", None):
        sizes = sorted(int(s) for s in args.scale_sizes.split(","))
    runs: dict[int, list[dict]] = {n: [] for n in sizes}
    for rep in range(args.repeat):
        for n in sizes:
            print(f"scale: {n} sites, {args.rounds} rounds (repetition {rep + 1}) ...", flush=True)
            runs[n].append(run_size(n, args.rounds, work / "scale" / f"rep{rep}"))
    out = summarise(sizes, runs)
    out["scale_setup"] = (
        f"synthetic, random k={K} (+7 shadows), 1 worker, {args.rounds} rounds after 1 "
        f"warm-up, x{args.repeat}"
    )
    return out
