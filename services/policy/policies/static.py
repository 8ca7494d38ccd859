"""Static (paper §3.2): a fixed k of the best power-to-cost sites, every round.

The paper's Static Optimal is this policy at the k* an offline sweep found
(`powertrip sweep` runs that sweep).
"""

from __future__ import annotations

from services.policy.policies.fixed import RankedTopK
from services.policy.policies.scoring import GB, power_cost_ranking


class StaticK(RankedTopK):
    name = "static"
    summary = (
        "fixed top-k by power-to-cost score; `powertrip sweep` finds the best k* (paper baseline)"
    )
    default_params = {"k": 0.0, "m_ref_gb": 1.5}
    ranking = "power-to-cost score, highest first"

    def rank(self, ctx, params):
        scores, ranked = power_cost_ranking(
            ctx.table, ctx.update_size_bytes, params["m_ref_gb"] * GB
        )
        return ranked, scores
