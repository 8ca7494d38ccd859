"""Shared shape of the ranked top-k baselines: rank the sites one way, take the first k."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import (
    Context,
    Decision,
    Policy,
    default_k,
    k_param,
    predicted_time,
)
from powertrip.core.policies.params import PolicyParams


@dataclass(frozen=True)
class TopKParams(PolicyParams):
    """A ranked top-k baseline's one parameter."""

    k: int | None = k_param()


class RankedTopK(Policy):
    """Subclasses say how to rank (`rank`); k comes from the `k` parameter (unset: 30 % of
    N)."""

    Params = TopKParams
    ranking = ""

    def rank(self, ctx: Context, params: TopKParams) -> tuple[np.ndarray, np.ndarray]:
        """(alive indices best first, a per-site value where higher is better)."""
        raise NotImplementedError

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        order, values = self.rank(ctx, params)
        k = default_k(params.k, len(order))
        chosen = order[:k]
        explanation = {"rule": self.ranking, "k": k, "alive": int(len(order))}
        if params.k is not None and params.k > len(order):
            explanation["note"] = f"k={params.k:g} > alive sites; clamped to {k}"
        return Decision(
            order=chosen,
            predicted_round_time_s=predicted_time(ctx, chosen),
            explanation=explanation,
        )
