"""All (paper §3.2): every alive site, every round (ranked by score only for reporting)."""

from __future__ import annotations

from dataclasses import dataclass

from powertrip.core.policies.base import Context, Decision, Policy, predicted_time
from powertrip.core.policies.params import PolicyParams
from powertrip.core.policies.scoring import GB, m_ref_param, power_cost_ranking


@dataclass(frozen=True)
class AllSitesParams(PolicyParams):
    """The score only orders the sites for reporting."""

    m_ref_gb: float = m_ref_param()


class AllSites(Policy):
    name = "all"
    summary = "every available site every round (paper baseline)"
    Params = AllSitesParams

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        scores, order = power_cost_ranking(ctx.table, ctx.update_size_bytes, params.m_ref_gb * GB)
        return Decision(
            order=order,
            predicted_round_time_s=predicted_time(ctx, order),
            explanation={"rule": "all alive sites", "k": int(len(order))},
        )
