"""Drive one run on the embedded deployment: aggregator + site workers, progress, results."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from tqdm import tqdm

from powertrip import runfiles
from powertrip.config import RunConfig
from powertrip.experiments.launcher import (
    Deployment,
    LaunchError,
    ServiceProcess,
    split_sites,
    start_service,
)
from powertrip.rpc.channels import open_channel
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc, policy_pb2, policy_pb2_grpc

#: max_rounds for runs that the time budget ends, not a round count (compare, sweep): a
#: round cap would stop policies with short rounds earlier in time than the others.
UNBOUNDED_ROUNDS = 100_000


class RunError(RuntimeError):
    pass


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
) -> RunOutcome:
    """One run: write its config, start aggregator and workers, follow progress, collect.

    `resume` continues from the checkpoint in `out_dir` (see `powertrip run --resume`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / runfiles.REQUESTED_CONFIG
    config.write_yaml(config_path)
    log_dir = out_dir / runfiles.LOGS_DIR
    processes: list[ServiceProcess] = []
    try:
        aggregator = start_service(
            "aggregator",
            [
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
            ],
            log_dir,
            timeout_s=120,
        )
        processes.append(aggregator)
        for w, sites in enumerate(split_sites(config.num_sites, config.workers)):
            processes.append(
                start_service(
                    f"site_worker:{w}",
                    [
                        "--aggregator",
                        aggregator.target,
                        "--sites",
                        ",".join(sites),
                        "--worker-id",
                        f"worker-{w}",
                        "--threads",
                        str(config.threads_per_worker),
                        "--train-threads",
                        str(config.train_threads),
                        "--trainer",
                        config.trainer,
                        "--site-batch",
                        str(config.site_batch),
                        "--channels-last" if config.channels_last else "--no-channels-last",
                    ],
                    log_dir,
                    wait_serving=False,
                )
            )
        _follow(aggregator, processes, config, label or config.policy, show_progress)
    except LaunchError as exc:
        raise RunError(str(exc)) from None
    finally:
        for process in reversed(processes):
            process.stop()
    summary_path = out_dir / runfiles.SUMMARY
    if not summary_path.exists():
        raise RunError(f"the aggregator wrote no summary; see {log_dir}/aggregator.log")
    summary = json.loads(summary_path.read_text())
    if summary.get("status") == "failed":
        raise RunError(f"run failed: {summary.get('message')} (logs in {log_dir})")
    return RunOutcome(out_dir, summary)


def _follow(
    aggregator: ServiceProcess, processes, config: RunConfig, label: str, show: bool
) -> None:
    """Poll the aggregator's status until the run ends. The progress bar counts rounds, or
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
    with open_channel(aggregator.target) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        while aggregator.alive():
            for proc in processes[1:]:
                if not proc.alive() and proc.process.returncode not in (0, None):
                    raise RunError(
                        f"{proc.name} exited with {proc.process.returncode}:\n{proc.log_tail()}"
                    )
            try:
                status = stub.GetStatus(aggregator_pb2.GetStatusRequest(), timeout=5)
            except grpc.RpcError:
                time.sleep(0.3)
                continue
            if status.round > last_round:
                sim_h = status.sim_time_s / 3600
                if by_time:
                    bar.update(min(sim_h, config.max_sim_hours) - bar.n)
                else:
                    bar.update(status.round - last_round)
                last_round = status.round
                bar.set_postfix_str(
                    f"round {status.round} k={status.k} acc={status.accuracy:.3f} t={sim_h:.2f}h"
                )
            if status.state in ("done", "failed"):
                break
            time.sleep(0.3)
    bar.close()
    try:
        aggregator.process.wait(timeout=30)
    except Exception:  # noqa: BLE001 - stop() below handles a stuck process
        pass
    if aggregator.process.returncode not in (0, None):
        raise RunError(
            f"aggregator exited with {aggregator.process.returncode}:\n{aggregator.log_tail()}"
        )


__all__ = [
    "UNBOUNDED_ROUNDS",
    "RunError",
    "RunOutcome",
    "policy_names",
    "run_once",
    "split_sites",
]
