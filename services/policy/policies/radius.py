"""Fixed radius (paper §5.1): every site within R miles of the aggregator.

The paper picks R = 1000 miles because bandwidth is roughly flat inside it (its Fig. 5);
with 100 sites over 100-10,000 miles that is about 22 sites.
"""

from __future__ import annotations

import numpy as np

from services.policy.policies.base import Context, Decision, Policy, predicted_time
from services.policy.policies.scoring import GB, power_cost_ranking


class Radius(Policy):
    name = "radius"
    summary = "all sites within radius_miles (default 1000) of the aggregator (paper baseline)"
    default_params = {"radius_miles": 1000.0, "m_ref_gb": 1.5}

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        t = ctx.table
        radius = params["radius_miles"]
        scores, ranked = power_cost_ranking(t, ctx.update_size_bytes, params["m_ref_gb"] * GB)
        inside = ranked[t.distance_miles[ranked] <= radius]
        note = f"{len(inside)} site(s) within {radius:g} miles"
        if len(inside) == 0:
            # an empty round would stall training; the closest site is the nearest to the rule
            by_distance = t.by_id[np.argsort(t.distance_miles[t.by_id], kind="stable")]
            inside = by_distance[t.alive[by_distance]][:1]
            note = f"no site within {radius:g} miles; using the closest one"
        return Decision(
            order=inside,
            predicted_round_time_s=predicted_time(ctx, inside),
            explanation={"rule": note, "k": int(len(inside)), "radius_miles": radius},
        )
