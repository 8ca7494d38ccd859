"""Aggregator configuration: the resolved run plus where the other services are, and
what follows from it (the run's site ids). The spec workers get is the servicer's
(`servicer.run_spec`): the wire form stays at the edge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from powertrip.core.config import RunConfig
from powertrip.core.profiles import site_id as make_site_id


@dataclass(frozen=True)
class AggregatorConfig:
    run: RunConfig  # resolved (workload defaults filled in)
    profiler: str  # host:port
    policy: str  # host:port
    out_dir: Path
    register_timeout_s: float = 300.0
    #: round 1 starts once this many sites are hosted (0: all of them); the others join the
    #: ranking from the round after their worker registers
    min_sites: int = 0
    exit_when_done: bool = False
    join_token: str = ""  # when set, workers must present it to register
    resume: bool = False  # continue from out_dir/checkpoint
    credentials: object = None  # grpc.ChannelCredentials for profiler/policy (mutual TLS)
    audit_dir: Path | None = None  # keep every accepted delta here (audit.py), or not


def all_site_ids(num_sites: int) -> list[str]:
    return [make_site_id(i) for i in range(num_sites)]
