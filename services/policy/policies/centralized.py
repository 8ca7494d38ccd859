"""Power-constrained centralized training (paper §5.1): one site, no WAN, capped power.

The single site trains on the pooled data of all sites (it is 'the data centre'), with no
communication cost, at `power_cap` of its capacity (25 % or 50 % in the paper).
"""

from __future__ import annotations

import numpy as np

from services.policy.policies.base import CENTRALIZED, Context, Decision, Policy, PolicyError


class Centralized(Policy):
    name = "centralized"
    summary = "one co-located site on pooled data, power capped at power_cap (paper baseline)"
    default_params = {"power_cap": 0.25}

    def validate(self, params, num_sites):
        super().validate(params, num_sites)
        if not 0 < params["power_cap"] <= 1:
            raise PolicyError(
                f"policy {self.name!r}: power_cap must be in (0, 1], got {params['power_cap']:g}"
            )

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        alive = np.flatnonzero(ctx.table.alive)
        host = alive[[int(np.argmax(ctx.table.power[alive]))]]
        cap = params["power_cap"]
        return Decision(
            order=host,
            predicted_round_time_s=ctx.tau_s / cap,
            explanation={"rule": "single site, pooled data, no communication", "power_cap": cap},
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
