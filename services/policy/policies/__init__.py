"""Policy registry: a policy is one module here plus one entry below."""

from __future__ import annotations

from services.policy.policies.all_sites import AllSites
from services.policy.policies.base import Context, Decision, Policy, PolicyError, SiteTable
from services.policy.policies.centralized import Centralized, Centralized25, Centralized50
from services.policy.policies.highest_power import HighestPower
from services.policy.policies.lowest_latency import LowestLatency
from services.policy.policies.powertrip import PowerTrip
from services.policy.policies.radius import Radius
from services.policy.policies.random_k import RandomK
from services.policy.policies.static import StaticK

REGISTRY: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        PowerTrip,
        StaticK,
        RandomK,
        Centralized,
        Centralized25,
        Centralized50,
        Radius,
        HighestPower,
        LowestLatency,
        AllSites,
    )
}
#: Names that are another policy with different defaults; shadows skip them.
ALIASES = frozenset({"centralized-25", "centralized-50"})


def get_policy(name: str) -> Policy:
    try:
        return REGISTRY[name]()
    except KeyError:
        raise PolicyError(
            f"unknown policy {name!r}; valid policies: {', '.join(REGISTRY)}"
        ) from None


__all__ = [
    "ALIASES",
    "REGISTRY",
    "Context",
    "Decision",
    "Policy",
    "PolicyError",
    "SiteTable",
    "get_policy",
]
