"""Fixed radius (paper §5.1): every site within R miles of the aggregator."""

from __future__ import annotations

import numpy as np

from services.policy.policies.base import Context, Decision, Policy, PolicyError, predicted_time
from services.policy.policies.scoring import power_cost_scores, rank_desc


class Radius(Policy):
    name = "radius"
    summary = "all sites within radius_miles (default 1000) of the aggregator (paper baseline)"
    default_params = {"radius_miles": 1000.0, "m_ref_gb": 1.5}

    def validate(self, params, num_sites):
        super().validate(params, num_sites)
        if params["radius_miles"] < 0:
            raise PolicyError(
                f"policy 'radius': radius_miles must be >= 0, got {params['radius_miles']:g}"
            )

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        t = ctx.table
        scores = power_cost_scores(t, ctx.update_size_bytes, params["m_ref_gb"] * 1e9)
        ranked = rank_desc(scores, t)
        inside = ranked[t.distance_miles[ranked] <= params["radius_miles"]]
        note = f"{len(inside)} site(s) within {params['radius_miles']:g} miles"
        if len(inside) == 0:
            alive = np.flatnonzero(t.alive)
            inside = alive[[int(np.argmin(t.distance_miles[alive]))]]
            note = f"no site within {params['radius_miles']:g} miles; using the closest one"
        return Decision(
            order=inside,
            predicted_round_time_s=predicted_time(ctx, inside),
            explanation={
                "rule": note,
                "k": int(len(inside)),
                "radius_miles": params["radius_miles"],
            },
            scores=scores[inside],
        )
