"""Policy-service configuration: which estimator and link source to use by default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyConfig:
    #: use measured latency/bandwidth when a profile carries them (wall-clock deployments)
    prefer_measured: bool = True
    default_estimator: str = "paper"
