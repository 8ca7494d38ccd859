"""The one small interface every site-selection policy implements.

A policy sees a `Context` (the site table, the accuracy history, the emulated update size
and the modelled local work) and returns a `Decision`: site indices in rank order, the
predicted round time and a machine-readable explanation. Policies are pure: same context,
same decision; randomness comes only from (seed, round).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from powertrip.timemodel import prefix_round_time_estimates

FEDERATED = "federated"
CENTRALIZED = "centralized"


class PolicyError(ValueError):
    """A bad policy name or parameter; the message names it and what is allowed."""


@dataclass(frozen=True)
class SiteTable:
    """Column view of the sites, so every score is one vectorised numpy expression."""

    ids: np.ndarray  # str
    power: np.ndarray  # p_i(t) in [0, 1]
    distance_miles: np.ndarray
    comm_s: np.ndarray  # directions * (latency + M / B)
    alive: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(
        cls,
        ids: Sequence[str],
        power: Sequence[float],
        distance_miles: Sequence[float],
        latency_s: Sequence[float],
        bandwidth_bytes_per_s: Sequence[float],
        update_size_bytes: float,
        directions: int = 2,
        alive: Sequence[bool] | None = None,
    ) -> SiteTable:
        bandwidth = np.asarray(bandwidth_bytes_per_s, dtype=np.float64)
        if len(ids) == 0:
            raise PolicyError("no sites to choose from")
        if (bandwidth <= 0).any():
            bad = ids[int(np.argmax(bandwidth <= 0))]
            raise PolicyError(f"site {bad}: bandwidth must be > 0")
        power_arr = np.asarray(power, dtype=np.float64)
        if ((power_arr < 0) | (power_arr > 1)).any():
            raise PolicyError("power_fraction must be in [0, 1]")
        latency = np.asarray(latency_s, dtype=np.float64)
        return cls(
            ids=np.asarray(ids, dtype=object),
            power=power_arr,
            distance_miles=np.asarray(distance_miles, dtype=np.float64),
            comm_s=max(1, directions) * (latency + update_size_bytes / bandwidth),
            alive=(
                np.ones(len(ids), dtype=bool) if alive is None else np.asarray(alive, dtype=bool)
            )
            & (power_arr > 0),
        )


@dataclass(frozen=True)
class RoundOutcome:
    round: int
    k: int
    accuracy: float
    round_time_s: float


@dataclass(frozen=True)
class Context:
    table: SiteTable
    update_size_bytes: float
    tau_s: float
    history: tuple[RoundOutcome, ...] = ()
    target_accuracy: float = 1.0
    seed: int = 0
    round: int = 1
    estimator: str = "paper"
    params: Mapping[str, float] = field(default_factory=dict)


@dataclass
class Decision:
    order: np.ndarray  # indices into the table, rank order
    predicted_round_time_s: float
    explanation: dict
    mode: str = FEDERATED
    power_cap: float = 0.0
    stop: bool = False
    scores: np.ndarray | None = None  # per selected site, same order


class Policy(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    default_params: ClassVar[dict[str, float]] = {}

    def __init__(self, overrides: Mapping[str, float] | None = None):
        self.overrides = dict(overrides or {})

    def params(self, ctx: Context) -> dict[str, float]:
        """Defaults < constructor overrides < request params; unknown names are an error."""
        merged = {**self.default_params, **self.overrides}
        unknown = sorted(set(ctx.params) - set(merged))
        if unknown:
            allowed = ", ".join(sorted(merged)) or "none"
            raise PolicyError(
                f"policy {self.name!r}: unknown parameter(s) {', '.join(unknown)}; "
                f"allowed: {allowed}"
            )
        merged.update(ctx.params)
        self.validate(merged, len(ctx.table))
        return merged

    def validate(self, params: dict[str, float], num_sites: int) -> None:
        """Check ranges; subclasses extend."""
        for name in ("k", "k0", "window"):
            if name in params and params[name] < 0:
                raise PolicyError(
                    f"policy {self.name!r}: {name} must be >= 0, got {params[name]:g}"
                )

    @abstractmethod
    def select(self, ctx: Context) -> Decision: ...


def predicted_time(ctx: Context, order: np.ndarray) -> float:
    """T-hat at k = len(order), over the chosen sites in rank order (the request's estimator)."""
    t = ctx.table
    estimates = prefix_round_time_estimates(
        ctx.tau_s, t.power[order], t.comm_s[order], estimator=ctx.estimator
    )
    return float(estimates[-1])


def default_k(value: float, num_alive: int, fraction: float = 0.2) -> int:
    """k = 0 means 'a fixed fraction of the sites' (at least 1); otherwise clamp to 1..N."""
    if value <= 0:
        return max(1, round(fraction * num_alive))
    return int(min(max(1, round(value)), num_alive))
