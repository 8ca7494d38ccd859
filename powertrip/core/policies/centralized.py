"""Power-constrained centralized training (paper §5.1): one site, no WAN, capped power.

The single site trains on the pooled data of all sites (it stands for the data centre),
with no communication cost, at `power_cap` of its capacity (25 % or 50 % in the paper), so
its round takes tau / power_cap.
"""

from __future__ import annotations

from powertrip.core.policies.base import CENTRALIZED, Context, Decision, Policy
from powertrip.core.policies.scoring import power_ranking


class Centralized(Policy):
    name = "centralized"
    summary = "one co-located site on pooled data, power capped at power_cap (paper baseline)"
    details = (
        "site: the single site with the most power (ties by id) stands for the data centre "
        "and trains on the pooled data of all sites with no WAN cost, at power_cap of its "
        "capacity (paper §5.1: 25 % and 50 %), so each round takes tau / power_cap."
    )
    default_params = {"power_cap": 0.25}

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        host = power_ranking(ctx.table)[:1]  # top power, ties by id
        cap = params["power_cap"]
        return Decision(
            order=host,
            predicted_round_time_s=ctx.tau_s / cap,
            explanation={
                "rule": "single site (highest power), pooled data, no communication",
                "power_cap": cap,
            },
            mode=CENTRALIZED,
            power_cap=cap,
        )


class Centralized25(Centralized):
    name = "centralized-25"
    summary = "centralized training capped at 25 % power (paper baseline)"
    default_params = {"power_cap": 0.25}


class Centralized50(Centralized):
    name = "centralized-50"
    summary = "centralized training capped at 50 % power (paper baseline)"
    default_params = {"power_cap": 0.5}
