"""Drive one run on the embedded deployment: aggregator + site workers, progress, results.

While a run is under way the driver watches every process it depends on (profiler and
policy, the aggregator, each site worker): one that exits before the aggregator reports the
run over, or an aggregator that exits non-zero, ends the run at once with ChildExited
(`powertrip` exits 3), naming the process, its exit code and the last lines of its log.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc
from tqdm import tqdm

from powertrip.app.experiments.launcher import (
    Deployment,
    LaunchError,
    ServiceProcess,
    await_started,
    bind_failed,
    free_port,
    spawn_service,
    split_sites,
    start_service,
    stop_services,
)
from powertrip.core import runfiles
from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc, policy_pb2, policy_pb2_grpc

#: max_rounds for runs that the time budget ends, not a round count (compare, sweep): a
#: round cap would stop policies with short rounds earlier in time than the others.
UNBOUNDED_ROUNDS = 100_000


#: a worker's site list longer than this (bytes) is asked for by count instead: Linux caps
#: one command-line argument at 128 KiB (about 11,000 site ids)
MAX_SITES_ARG_BYTES = 100_000


def site_args(sites: list[str]) -> list[str]:
    """A worker's `--sites` flag, or `--site-count` when the list is too long for one
    argument (the aggregator then hands it that many free sites: a contiguous block, not
    the round-robin deal; results do not depend on which worker trains a site)."""
    text = ",".join(sites)
    if len(text) <= MAX_SITES_ARG_BYTES:
        return ["--sites", text]
    return ["--site-count", str(len(sites))]


#: seconds between two looks at the aggregator's status and the processes' exits
POLL_S = 0.3
#: the states in which the aggregator has finished the run (workers may then leave)
FINISHED = ("done", "failed")


class RunError(RuntimeError):
    pass


class ChildExited(RunError):
    """A service or site worker of the run exited before the run was over (or the
    aggregator exited non-zero): the message names it, its code and its log's last lines."""


class WorkerPlacement(Protocol):
    """Where a run's site workers run when not beside the driver (`powertrip run --ray`:
    powertrip.app.experiments.rayworkers). The aggregator then serves on `aggregator_host`
    with `aggregator_args` added, and `start` starts each (name, site-worker args) and
    returns them started (their port line read), as ServiceProcess stand-ins."""

    aggregator_host: str

    def aggregator_args(self) -> list[str]: ...

    def start(
        self, workers: Sequence[tuple[str, list[str]]], log_dir: Path
    ) -> list[ServiceProcess]: ...


@dataclass
class RunOutcome:
    out_dir: Path
    summary: dict

    @property
    def time_to_target_s(self) -> float | None:
        return self.summary.get("time_to_target_s")


def policy_names(deployment: Deployment) -> list[str]:
    with open_channel(deployment.policy.target) as channel:
        reply = policy_pb2_grpc.PolicyStub(channel).ListPolicies(
            policy_pb2.ListPoliciesRequest(), timeout=10
        )
    return [p.name for p in reply.policies]


def run_once(
    config: RunConfig,
    out_dir: Path,
    deployment: Deployment,
    *,
    label: str = "",
    show_progress: bool = True,
    resume: bool = False,
    placement: WorkerPlacement | None = None,
) -> RunOutcome:
    """One run: write its config, start aggregator and workers, follow progress, collect.

    `resume` continues from the checkpoint in `out_dir` (see `powertrip run --resume`);
    `placement` puts the site workers elsewhere (None: processes beside this one)."""
    for service in deployment.services:
        if not service.alive():
            raise ChildExited(service.exit_report())
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / runfiles.REQUESTED_CONFIG
    config.write_yaml(config_path)
    log_dir = out_dir / runfiles.LOGS_DIR
    aggregator_args = [
        "--config",
        str(config_path),
        "--out",
        str(out_dir),
        "--exit-when-done",
        "--profiler",
        deployment.profiler.target,
        "--policy",
        deployment.policy.target,
        *(["--resume"] if resume else []),
    ]
    summary_path = out_dir / runfiles.SUMMARY
    summary_before = _mtime_ns(summary_path)  # a summary left from an earlier run is not ours
    processes: list[ServiceProcess] = []
    try:
        if placement is None:
            aggregator = _start_together(config, aggregator_args, log_dir, processes)
        else:
            aggregator = _start_placed(config, aggregator_args, log_dir, processes, placement)
        watched = [*deployment.services, *processes]
        exit_code = _follow(
            aggregator,
            watched,
            config,
            label or config.policy,
            show_progress,
            lambda: _mtime_ns(summary_path) != summary_before,
        )
    except LaunchError as exc:
        raise ChildExited(str(exc)) from None
    finally:
        stop_services(reversed(processes))
    summary = None
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
    if summary is not None and summary.get("status") == "failed":
        raise RunError(f"run failed: {summary.get('message')} (logs in {log_dir})")
    if exit_code not in (0, None):  # None: still up 30 s after the end, stopped by us
        raise ChildExited(aggregator.exit_report())
    if summary is None:
        raise RunError(f"the aggregator wrote no summary; see {log_dir}/aggregator.log")
    return RunOutcome(out_dir, summary)


def _worker_args(config: RunConfig, worker: int, sites: list[str], aggregator: str) -> list[str]:
    return [
        "--aggregator",
        aggregator,
        *site_args(sites),
        "--worker-id",
        f"worker-{worker}",
        "--threads",
        str(config.threads_per_worker),
        "--train-threads",
        str(config.train_threads),
        "--trainer",
        config.trainer,
        "--site-batch",
        str(config.site_batch),
        "--channels-last" if config.channels_last else "--no-channels-last",
        "--fused-sgd" if config.fused_sgd else "--no-fused-sgd",
    ]


def _start_together(
    config: RunConfig, aggregator_args: list[str], log_dir: Path, processes: list[ServiceProcess]
) -> ServiceProcess:
    """Start the aggregator and the site workers at once, appending them to `processes`;
    return the aggregator once it serves.

    Each process spends about 2 s importing torch and loading data before it can serve or
    register; started one after the other that was about 4 s of every run of `make demo`
    (docs/benchmarks.md at 291b5ac2). The aggregator gets a port picked here, so the workers
    can be given its address at once and wait for it (their Register waits for the
    channel)."""

    def spawn_workers(aggregator: ServiceProcess) -> None:
        for name, args in _workers(config, aggregator.target):
            processes.append(spawn_service(name, args, log_dir))

    aggregator = _serve_aggregator(aggregator_args, log_dir, processes, spawned=spawn_workers)
    for worker in processes[1:]:
        await_started(worker, wait_serving=False)
    return aggregator


def _start_placed(
    config: RunConfig,
    aggregator_args: list[str],
    log_dir: Path,
    processes: list[ServiceProcess],
    placement: WorkerPlacement,
) -> ServiceProcess:
    """The aggregator here, on the placement's address, then the site workers where the
    placement puts them (they dial it, so it is started and serving first)."""
    args = [*aggregator_args, *placement.aggregator_args()]
    aggregator = _serve_aggregator(args, log_dir, processes, host=placement.aggregator_host)
    processes.extend(placement.start(_workers(config, aggregator.target), log_dir))
    return aggregator


def _workers(config: RunConfig, aggregator: str) -> list[tuple[str, list[str]]]:
    """(name, site-worker args) of each worker process, its sites dealt round-robin."""
    return [
        (f"site_worker:{w}", _worker_args(config, w, sites, aggregator))
        for w, sites in enumerate(split_sites(config.num_sites, config.workers))
    ]


def _serve_aggregator(
    args: list[str],
    log_dir: Path,
    processes: list[ServiceProcess],
    *,
    host: str = "127.0.0.1",
    spawned: Callable[[ServiceProcess], None] = lambda _aggregator: None,
) -> ServiceProcess:
    """The aggregator on a port picked here, appended to `processes`, and returned once it
    serves; `spawned(aggregator)` is called as soon as it is started (to start workers that
    dial it meanwhile). Should another process take that port first, the aggregator exits
    ("cannot bind"): everything in `processes` is stopped and it is started again the old
    way, on port 0, waited for, then `spawned` called again."""
    aggregator = spawn_service("aggregator", args, log_dir, port=free_port(), host=host)
    processes.append(aggregator)
    spawned(aggregator)
    try:
        await_started(aggregator, timeout_s=120)
    except LaunchError:
        if not bind_failed(aggregator):
            raise
        stop_services(reversed(processes))
        processes.clear()
        aggregator = start_service("aggregator", args, log_dir, timeout_s=120, host=host)
        processes.append(aggregator)
        spawned(aggregator)
    return aggregator


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _status(stub) -> aggregator_pb2.RunStatus | None:
    try:
        return stub.GetStatus(aggregator_pb2.GetStatusRequest(), timeout=3)
    except grpc.RpcError:
        return None


def _culprit(watched: list[ServiceProcess]) -> ServiceProcess | None:
    """The exited process to blame: the first in `watched` order (profiler, policy,
    aggregator, workers: a cause before its effects) that failed, else the first that left
    (a worker whose aggregator was killed exits 0 after it; the aggregator is named)."""
    dead = [p for p in watched if not p.alive()]
    failed = [p for p in dead if p.returncode != 0]
    return (failed or dead or [None])[0]


def _follow(
    aggregator: ServiceProcess,
    watched: list[ServiceProcess],
    config: RunConfig,
    label: str,
    show: bool,
    summary_written: Callable[[], bool],
) -> int | None:
    """Poll the aggregator's status until the run ends, and every process in `watched`
    until then: one that exits first raises ChildExited, unless the aggregator has written
    this run's summary (`summary_written`: the run is over). Returns the aggregator's exit code
    (None if it has not exited 30 s after the end). The progress bar counts rounds, or
    hours of time spent when the time budget rather than a round cap ends the run."""
    by_time = config.max_sim_hours > 0 and config.max_rounds >= UNBOUNDED_ROUNDS
    bar = tqdm(
        total=config.max_sim_hours if by_time else config.max_rounds,
        desc=f"{label:>16}",
        unit="h" if by_time else "round",
        bar_format="{l_bar}{bar}| {n:.2f}/{total:.2f} h [{elapsed}{postfix}]" if by_time else None,
        disable=not show,
        dynamic_ncols=True,
        leave=True,
    )
    last_round = 0
    try:
        with open_channel(aggregator.target) as channel:
            stub = aggregator_pb2_grpc.AggregatorStub(channel)
            while True:
                status = _status(stub)
                if status is not None and status.round > last_round:
                    sim_h = status.sim_time_s / 3600
                    if by_time:
                        bar.update(min(sim_h, config.max_sim_hours) - bar.n)
                    else:
                        bar.update(status.round - last_round)
                    last_round = status.round
                    bar.set_postfix_str(
                        f"round {status.round} k={status.k} acc={status.accuracy:.3f} "
                        f"t={sim_h:.2f}h"
                    )
                if status is not None and status.state in FINISHED:
                    break
                culprit = _culprit(watched)
                if culprit is not None:
                    # workers leave once the aggregator has said the run is over, and the
                    # aggregator right after them, maybe before this loop saw it end; it
                    # wrote the run's summary before it said so
                    if summary_written():
                        break
                    raise ChildExited(culprit.exit_report())
                time.sleep(POLL_S)
    finally:
        bar.close()
    try:
        return aggregator.process.wait(timeout=30)
    except subprocess.TimeoutExpired:  # stop_services in run_once stops it
        return None


__all__ = [
    "UNBOUNDED_ROUNDS",
    "ChildExited",
    "RunError",
    "RunOutcome",
    "WorkerPlacement",
    "policy_names",
    "run_once",
    "split_sites",
]
