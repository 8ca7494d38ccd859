"""Aggregator configuration: the resolved run plus where the other services are."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from powertrip.config import RunConfig


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
