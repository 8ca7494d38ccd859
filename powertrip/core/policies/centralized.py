"""Power-constrained centralized training (paper §5.1): one site, no WAN, capped power.

The single site trains on the pooled data of all sites (it stands for the data centre),
with no communication cost, at `power_cap` of its capacity (25 % or 50 % in the paper), so
its round takes tau / power_cap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import (
    CENTRALIZED,
    Context,
    Decision,
    Policy,
    PolicyError,
    SiteTable,
)
from powertrip.core.policies.params import PolicyParams, param
from powertrip.core.policies.scoring import power_ranking, rank_asc


@dataclass(frozen=True)
class CentralizedParams(PolicyParams):
    """The cap on the one site's power (the paper runs 25 % and 50 %, §5.1)."""

    power_cap: float = param(0.25, "share of the site's capacity it trains at", above=0, at_most=1)


class Centralized(Policy):
    centralized = True
    name = "centralized"
    summary = "one co-located site on pooled data, power capped at power_cap (paper baseline)"
    details = (
        "site: the single site with the most power (ties by id) stands for the data centre "
        "and trains on the pooled data of all sites with no WAN cost, at power_cap of its "
        "capacity (paper §5.1: 25 % and 50 %), so each round takes tau / power_cap."
    )
    Params = CentralizedParams
    #: which site hosts the pooled data
    host_rule = "highest power"

    def host(self, table: SiteTable) -> np.ndarray:
        return power_ranking(table)[:1]  # top power, ties by id

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        host = self.host(ctx.table)
        cap = params.power_cap
        return Decision(
            order=host,
            predicted_round_time_s=ctx.tau_s / cap,
            explanation={
                "rule": f"single site ({self.host_rule}), pooled data, no communication",
                "power_cap": cap,
            },
            mode=CENTRALIZED,
            power_cap=cap,
        )


class Centralized25(Centralized):
    name = "centralized-25"
    summary = "centralized training capped at 25 % power (paper baseline)"


class Centralized50(Centralized):
    name = "centralized-50"
    summary = "centralized training capped at 50 % power (paper baseline)"
    Params = CentralizedParams.with_defaults(power_cap=0.5)


class CentralizedGreen(Centralized):
    """Centralized training in the greenest region: the carbon side's baseline,
    the lowest-carbon place one data centre could train everything."""

    name = "centralized-green"
    summary = (
        "centralized training in the site with the cleanest grid, capped at 25 % power "
        "(carbon baseline); needs population: regions"
    )
    details = (
        "site: the one with the lowest g CO2/kWh (ties by id) trains on the pooled data of all "
        "sites with no WAN cost, at power_cap of its capacity, as centralized does."
    )
    host_rule = "lowest carbon intensity"

    def applies_to(self, table: SiteTable) -> bool:
        return table.carbon_g_per_kwh is not None

    def host(self, table: SiteTable) -> np.ndarray:
        if table.carbon_g_per_kwh is None:
            raise PolicyError(
                "centralized-green hosts the run at the cleanest grid, and these profiles "
                "carry no carbon intensities; run with population: regions"
            )
        return rank_asc(table.carbon_g_per_kwh, table)[:1]
