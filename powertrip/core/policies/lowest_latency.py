"""Lowest latency (paper §3.1): top-k sites by communication time, blind to power.

"Latency" in the paper is the whole Eq. 3 delay (D/c + M/B), not just propagation, so the
ranking uses the table's comm_s; the reported score is its negative (higher = better).
"""

from __future__ import annotations

from powertrip.core.policies.fixed import RankedTopK
from powertrip.core.policies.scoring import rank_asc


class LowestLatency(RankedTopK):
    name = "lowest-latency"
    summary = "top-k sites by communication time D/c + M/B, ignoring power (paper baseline)"
    ranking = "communication time, lowest first"

    def rank(self, ctx, params):
        return rank_asc(ctx.table.comm_s, ctx.table), -ctx.table.comm_s
