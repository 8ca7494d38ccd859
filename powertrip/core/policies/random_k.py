"""Random (paper §5.1): k sites uniformly at random, seeded by (seed, round).

Seeding by (seed, round) rather than keeping a generator makes the draw reproducible from
the request alone: a restarted policy service, or a shadow, picks exactly the same sites.
"""

from __future__ import annotations

import numpy as np

from powertrip.core.policies.base import Context, Decision, Policy, default_k, predicted_time
from powertrip.core.policies.fixed import TopKParams


class RandomK(Policy):
    name = "random"
    summary = "k sites uniformly at random each round, blind to power and links (paper baseline)"
    details = (
        "k: the k parameter; unset: 30 % of the alive sites (the paper gives no k for random; "
        "30 % is the middle of its static sweep). The draw is seeded by (seed, round)."
    )
    Params = TopKParams

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        table = ctx.table
        # alive sites in id order, so the draw does not depend on the order sites arrived in
        alive = table.alive_by_id
        k = default_k(params.k, len(alive))
        rng = np.random.default_rng([ctx.seed, ctx.round])
        chosen = alive[np.sort(rng.choice(len(alive), size=k, replace=False))]
        return Decision(
            order=chosen,
            predicted_round_time_s=predicted_time(ctx, chosen),
            explanation={"rule": "uniform random", "k": k, "rng": [ctx.seed, ctx.round]},
        )
