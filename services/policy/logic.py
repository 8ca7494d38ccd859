"""Pure glue between the wire and the policies: build a Context, decide, add shadows."""

from __future__ import annotations

from dataclasses import dataclass

from services.policy.config import PolicyConfig
from services.policy.policies import (
    ALIASES,
    REGISTRY,
    Context,
    Decision,
    PolicyError,
    SiteTable,
    get_policy,
)
from services.policy.policies.base import RoundOutcome


@dataclass
class Shadow:
    policy: str
    k: int
    predicted_round_time_s: float
    order: list[int]


def site_table(
    profiles, update_size_bytes: float, directions: int, config: PolicyConfig
) -> SiteTable:
    """Columns from SiteProfile messages; measured link values win when present."""
    latency, bandwidth = [], []
    for p in profiles:
        measured = config.prefer_measured and p.measured_bandwidth_bytes_per_s > 0
        latency.append(p.measured_latency_s if measured else p.latency_s)
        bandwidth.append(p.measured_bandwidth_bytes_per_s if measured else p.bandwidth_bytes_per_s)
    return SiteTable.build(
        ids=[p.site_id for p in profiles],
        power=[p.power_fraction for p in profiles],
        distance_miles=[p.distance_miles for p in profiles],
        latency_s=latency,
        bandwidth_bytes_per_s=bandwidth,
        update_size_bytes=update_size_bytes,
        directions=directions or 2,
        alive=[p.alive for p in profiles],
    )


def context_from_request(request, config: PolicyConfig) -> Context:
    if request.update_size_bytes < 0:
        raise PolicyError("update_size_bytes must be >= 0")
    if request.tau_s <= 0:
        raise PolicyError("tau_s must be > 0")
    estimator = request.estimator or config.default_estimator
    if estimator not in ("paper", "clock"):
        raise PolicyError(f"estimator {estimator!r} is not one of paper, clock")
    return Context(
        table=site_table(request.sites, request.update_size_bytes, request.comm_directions, config),
        update_size_bytes=request.update_size_bytes,
        tau_s=request.tau_s,
        history=tuple(
            RoundOutcome(h.round, h.k, h.accuracy, h.round_time_s) for h in request.history
        ),
        target_accuracy=request.target_accuracy or 1.0,
        seed=request.seed,
        round=request.round,
        estimator=estimator,
        params=dict(request.params),
    )


def decide(name: str, ctx: Context) -> Decision:
    return get_policy(name).select(ctx)


def shadows(chosen: str, ctx: Context) -> list[Shadow]:
    """What every other policy would pick now, with its default parameters."""
    plain = Context(**{**ctx.__dict__, "params": {}})
    out = []
    for name in REGISTRY:
        if name == chosen or name in ALIASES:
            continue
        decision = get_policy(name).select(plain)
        out.append(
            Shadow(
                name, len(decision.order), decision.predicted_round_time_s, decision.order.tolist()
            )
        )
    return out
