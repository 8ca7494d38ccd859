"""Aggregator configuration: the resolved run plus where the other services are, and
what follows from it (the spec workers get, the run's site ids)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from powertrip.core.config import RunConfig
from powertrip.core.profiles import site_id as make_site_id
from powertrip.v1 import aggregator_pb2


@dataclass(frozen=True)
class AggregatorConfig:
    run: RunConfig  # resolved (workload defaults filled in)
    profiler: str  # host:port
    policy: str  # host:port
    out_dir: Path
    register_timeout_s: float = 300.0
    exit_when_done: bool = False
    join_token: str = ""  # when set, workers must present it to register
    resume: bool = False  # continue from out_dir/checkpoint
    credentials: object = None  # grpc.ChannelCredentials for profiler/policy (mutual TLS)
    audit_dir: Path | None = None  # keep every accepted delta here (audit.py), or not


def run_spec(config: AggregatorConfig) -> aggregator_pb2.RunSpec:
    """What every worker is told about the run when it registers."""
    run = config.run
    return aggregator_pb2.RunSpec(
        run_id=config.out_dir.name,
        workload=run.workload,
        num_sites=run.num_sites,
        seed=run.seed,
        data_dir=run.data_dir or "",
    )


def all_site_ids(num_sites: int) -> list[str]:
    return [make_site_id(i) for i in range(num_sites)]
