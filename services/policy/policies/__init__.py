"""Policy registry: a policy is one module here plus one entry below."""

from __future__ import annotations

from services.policy.policies.adaptive import Adaptive
from services.policy.policies.all_sites import AllSites
from services.policy.policies.base import (
    CENTRALIZED,
    FEDERATED,
    Context,
    Decision,
    PastRound,
    Policy,
    PolicyError,
    SiteTable,
)
from services.policy.policies.centralized import Centralized, Centralized25, Centralized50
from services.policy.policies.highest_power import HighestPower
from services.policy.policies.lowest_latency import LowestLatency
from services.policy.policies.oort import Oort
from services.policy.policies.powertrip import PowerTrip
from services.policy.policies.radius import Radius
from services.policy.policies.random_k import RandomK
from services.policy.policies.static import StaticK

REGISTRY: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        PowerTrip,
        Adaptive,
        StaticK,
        RandomK,
        Centralized,
        Centralized25,
        Centralized50,
        Radius,
        HighestPower,
        LowestLatency,
        AllSites,
        Oort,
    )
}
#: Names that are another policy with different defaults; shadows skip them.
ALIASES = frozenset({"centralized-25", "centralized-50"})


def get_policy(name: str) -> Policy:
    """A fresh policy by name; an unknown name is a PolicyError listing the valid ones."""
    try:
        return REGISTRY[name]()
    except KeyError:
        raise PolicyError(
            f"unknown policy {name!r}; valid policies: {', '.join(REGISTRY)}"
        ) from None


def shadow_names(chosen: str) -> list[str]:
    """Every registered policy except the chosen one and the aliases (same policy again)."""
    return [n for n in REGISTRY if n != chosen and n not in ALIASES]


__all__ = [
    "ALIASES",
    "CENTRALIZED",
    "FEDERATED",
    "REGISTRY",
    "Context",
    "Decision",
    "Policy",
    "PolicyError",
    "PastRound",
    "SiteTable",
    "get_policy",
    "shadow_names",
]
