"""Fixed radius (paper §5.1): every site within R miles of the aggregator.

The paper picks R = 1000 miles (§5.3) because its Fig. 5 "shows the bandwidth remains
relatively constant in this radius", and says that radius holds 22 of its 100 sites. Here
bandwidth is flat inside R only under `link_model: fig5`; under the default `inverse` it
falls as 1/distance from 100 miles on, 10x from 100 to 1,000 miles (powertrip/core/profiles.py).
Our calibrated distances put 22 % of the sites within 1,000 miles in expectation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import Context, Decision, Policy, predicted_time
from powertrip.core.policies.params import PolicyParams, param
from powertrip.core.policies.scoring import GB, m_ref_param, power_cost_ranking


@dataclass(frozen=True)
class RadiusParams(PolicyParams):
    """R (the paper's 1000 miles, §5.3), and the score that orders the sites inside."""

    radius_miles: float = param(1000.0, "sites within this many miles train", at_least=0)
    m_ref_gb: float = m_ref_param()


class Radius(Policy):
    name = "radius"
    summary = "all sites within radius_miles (default 1000) of the aggregator (paper baseline)"
    Params = RadiusParams

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        t = ctx.table
        radius = params.radius_miles
        scores, ranked = power_cost_ranking(t, ctx.update_size_bytes, params.m_ref_gb * GB)
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
