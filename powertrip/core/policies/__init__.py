"""The policy catalogue: a policy is one module here plus one entry below.

Policies are pure (`Context -> Decision`, numpy only), so they live in the core: the policy
service serves them over gRPC and the CLI checks names and parameters against the same
`REGISTRY` (each class's `name`, `summary`, `details` and `Params`, the frozen dataclass
that declares its parameters beside it) before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping

from powertrip.core.policies.adaptive import Adaptive
from powertrip.core.policies.all_sites import AllSites
from powertrip.core.policies.base import (
    CENTRALIZED,
    FEDERATED,
    Context,
    Decision,
    PastRound,
    Policy,
    PolicyError,
    SiteTable,
)
from powertrip.core.policies.centralized import (
    Centralized,
    Centralized25,
    Centralized50,
    CentralizedGreen,
)
from powertrip.core.policies.highest_power import HighestPower
from powertrip.core.policies.lowcarb import Lowcarb
from powertrip.core.policies.lowest_latency import LowestLatency
from powertrip.core.policies.oort import Oort
from powertrip.core.policies.params import PolicyParams
from powertrip.core.policies.powertrip import PowerTrip
from powertrip.core.policies.radius import Radius
from powertrip.core.policies.random_k import RandomK
from powertrip.core.policies.static import StaticK

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
        CentralizedGreen,
        Radius,
        HighestPower,
        LowestLatency,
        AllSites,
        Oort,
        Lowcarb,
    )
}
#: Request parameters the policy service handles itself (they shape the site table, which
#: every policy and shadow share); all other parameters belong to the chosen policy.
SERVICE_PARAMS = ("use_measured",)
#: Names that are another policy with different defaults; shadows skip them.
ALIASES = frozenset({"centralized-25", "centralized-50"})


def catalogue() -> list[dict]:
    """Every policy as data (what `powertrip policies --format json` prints): its name,
    summary, details, the estimator it is built on (null: the run's), its default
    parameters as a run records them (`params`, an unset one as 0) and each parameter's
    declaration (`parameters`: type, default, allowed values, doc)."""
    return [
        {
            "name": name,
            "summary": cls.summary,
            "details": cls.details,
            "estimator": cls.estimator,
            "params": cls.Params().as_numbers(),
            "parameters": [
                {
                    "name": spec.name,
                    "type": spec.kind,
                    "default": spec.default,
                    "allowed": spec.bounds.allowed(),
                    "doc": spec.doc,
                }
                for spec in cls.Params.specs()
            ],
        }
        for name, cls in REGISTRY.items()
    ]


def get_policy(name: str, params: Mapping[str, float | None] | None = None) -> Policy:
    """A fresh policy by name, `params` its defaults' overrides, checked here; an unknown
    name is a PolicyError listing the valid ones, a bad parameter one naming it."""
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise PolicyError(
            f"unknown policy {name!r}; valid policies: {', '.join(REGISTRY)}"
        ) from None
    return cls(params)


def shadow_names(chosen: str) -> list[str]:
    """Every registered policy except the chosen one and the aliases (same policy again)."""
    return [n for n in REGISTRY if n != chosen and n not in ALIASES]


__all__ = [
    "ALIASES",
    "CENTRALIZED",
    "FEDERATED",
    "REGISTRY",
    "SERVICE_PARAMS",
    "Context",
    "Decision",
    "Policy",
    "PolicyError",
    "PolicyParams",
    "PastRound",
    "SiteTable",
    "get_policy",
    "shadow_names",
]
