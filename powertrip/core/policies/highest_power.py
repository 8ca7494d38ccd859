"""Highest power (paper §3.1 and §5.3): the sites ranked by power alone, blind to links.

§5.3 describes it as "the policy that dynamically selects the Highest Power sites", so by
default k is chosen the way PowerTrip chooses it (the same bottom-up feedback rule and
parameters) and only the ranking differs: the comparison then isolates what ignoring the
links costs. `k` > 0 fixes k instead (the top-k by power every round).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import Context, Decision, default_k, k_param, predicted_time
from powertrip.core.policies.powertrip import PowerTrip, PowerTripParams
from powertrip.core.policies.scoring import power_ranking


@dataclass(frozen=True)
class HighestPowerParams(PowerTripParams):
    """PowerTrip's parameters, and a k that fixes the top k by power instead."""

    k: int | None = k_param(none="PowerTrip's bottom-up rule chooses k")


class HighestPower(PowerTrip):
    name = "highest-power"
    summary = (
        "sites ranked by available power, ignoring their links; k chosen dynamically "
        "(paper baseline)"
    )
    details = (
        "k: PowerTrip's bottom-up rule (same k0, window, patience, gain) over the power "
        "ranking, because §5.3 says this baseline selects dynamically; --param k=N fixes k "
        "to the top N by power instead."
    )
    Params = HighestPowerParams
    ranking = "power, highest first"

    def rank(self, ctx: Context, params: PowerTripParams) -> tuple[np.ndarray, np.ndarray]:
        return ctx.table.power, power_ranking(ctx.table)

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        if params.k is None:
            return super().select(ctx)
        _, order = self.rank(ctx, params)
        k = default_k(params.k, len(order))
        chosen = order[:k]
        return Decision(
            order=chosen,
            predicted_round_time_s=predicted_time(ctx, chosen),
            explanation={"rule": f"fixed k: {self.ranking}", "k": k, "alive": int(len(order))},
        )
