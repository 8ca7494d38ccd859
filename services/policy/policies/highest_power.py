"""Highest power (paper §3.1): top-k sites by power fraction, blind to links."""

from __future__ import annotations

from services.policy.policies.fixed import RankedTopK
from services.policy.policies.scoring import power_ranking


class HighestPower(RankedTopK):
    name = "highest-power"
    summary = "top-k sites by available power, ignoring their links (paper baseline)"
    ranking = "power, highest first"

    def rank(self, ctx, params):
        return power_ranking(ctx.table), ctx.table.power
