"""Static (paper §3.2, §5.1): a fixed set of the k best power-to-cost sites, chosen at round 1.

The paper's Static Optimal "uses a fixed set of sites from the very first round", so the set
is ranked once, in round 1, and kept: from round 2 on the policy reads round 1's sites from
the history (RoundRecord.site_ids). A site of that set that has died is replaced by the best
ranked alive site outside the set, so k stays fixed. A caller that sends no site ids in its
history gets the set re-ranked every round (the same set whenever power and links are static).
The paper's k* is this policy at the k an offline sweep found (`powertrip sweep`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import Context, Decision, default_k, predicted_time
from powertrip.core.policies.fixed import RankedTopK, TopKParams
from powertrip.core.policies.scoring import GB, m_ref_param, power_cost_ranking


@dataclass(frozen=True)
class StaticParams(TopKParams):
    """k, and the weight of communication in the score that ranks the set."""

    m_ref_gb: float = m_ref_param()


class StaticK(RankedTopK):
    name = "static"
    summary = (
        "the top-k power-to-cost sites of round 1, kept for the whole run; "
        "`powertrip sweep` finds the best k* (paper baseline)"
    )
    details = (
        "k: the k parameter (unset: 30 % of the alive sites); the paper's static optimal is "
        "this policy at the k* of a sweep. The set is fixed at round 1 (dead sites are "
        "replaced by the next-ranked alive ones)."
    )
    Params = StaticParams
    ranking = "power-to-cost score, highest first"

    def rank(self, ctx, params):
        scores, ranked = power_cost_ranking(ctx.table, ctx.update_size_bytes, params.m_ref_gb * GB)
        return ranked, scores

    def select(self, ctx: Context) -> Decision:
        first = ctx.history[0].site_ids if ctx.history else ()
        if not first:
            return super().select(ctx)
        params = self.params(ctx)
        ranked, scores = self.rank(ctx, params)
        k = default_k(params.k, len(ranked))
        alive = ctx.table.alive
        kept = [row for row in ctx.table.rows_of(first).tolist() if row >= 0 and alive[row]][:k]
        taken = set(kept)
        replacements = []  # the best ranked alive sites outside the set, as many as died
        for row in ranked.tolist() if len(kept) < k else ():
            if row not in taken:
                replacements.append(row)
                if len(replacements) == k - len(kept):
                    break
        chosen = np.array(kept + replacements, dtype=np.int64)
        explanation = {
            "rule": f"round 1's top-{k} ({self.ranking}), kept",
            "k": k,
            "alive": int(len(ranked)),
            "replaced": len(replacements),
        }
        return Decision(
            order=chosen,
            predicted_round_time_s=predicted_time(ctx, chosen),
            explanation=explanation,
        )
