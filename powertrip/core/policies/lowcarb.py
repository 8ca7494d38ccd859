"""Lowcarb: flwr-lowcarb's carbon-aware client selection as a policy here.

flwr-lowcarb (Flower's carbon-aware client manager, github.com/birnbaum/flwr-lowcarb,
`lowcarb/_strategy.py`, CarbonHack22) picks `num_clients` clients each round by their grid's
forecast carbon intensity, balanced by how often each has taken part:

* a client above the 80th percentile of past participation is left out this round;
* a client with fewer than half the most-participating client's rounds must take part
  now: it ranks first, lowest current intensity first;
* every other client scores its saving potential, the forecast's lowest value in a window
  against now, and the lowest potential (no reason to wait) ranks next.

Here the intensities are each region's annual average (data/regions/regions.csv), a flat
forecast, so every saving potential is 0 and lowcarb's own tie is broken by what it
optimises: the lowest intensity first (then the site id). Participation is counted from the
run's history (`PastRound.site_ids`); the left-out sites come last, so k is still met when
few sites remain. Like the fixed-k baselines it takes `k` (unset: 30 % of the alive sites),
flwr-lowcarb's `num_clients`; it never looks at power or links.
"""

from __future__ import annotations

import numpy as np

from powertrip.core.policies.base import Context, PolicyError, SiteTable
from powertrip.core.policies.fixed import RankedTopK, TopKParams
from powertrip.core.policies.scoring import rank_asc

#: participation above this percentile of all alive sites' is left out (flwr-lowcarb's 80)
EXCLUDE_PERCENTILE = 80.0
#: below this share of the most-participating site's rounds a site must take part now
MUST_SHARE = 0.5


def participation(ctx: Context) -> np.ndarray:
    """Rounds each site of the table has taken part in, from the run's history."""
    counts = np.zeros(len(ctx.table), dtype=np.int64)
    taken = [site for past in ctx.history for site in past.site_ids]
    if taken:
        rows = ctx.table.rows_of(taken)
        np.add.at(counts, rows[rows >= 0], 1)
    return counts


class Lowcarb(RankedTopK):
    name = "lowcarb"
    summary = (
        "lowest grid carbon intensity first, balanced by past participation (flwr-lowcarb's "
        "rule); needs population: regions"
    )
    details = (
        "k: the k parameter; unset: 30 % of the alive sites (flwr-lowcarb's num_clients). Sites "
        "above the 80th percentile of past rounds go last; sites with under half the most "
        "rounds go first; each group by lowest g CO2/kWh (annual averages: a flat forecast, "
        "so lowcarb's saving potential ties at 0), then by site id."
    )
    ranking = "carbon intensity, lowest first, balanced by participation"

    def applies_to(self, table: SiteTable) -> bool:
        return table.carbon_g_per_kwh is not None

    def rank(self, ctx: Context, params: TopKParams) -> tuple[np.ndarray, np.ndarray]:
        table = ctx.table
        if table.carbon_g_per_kwh is None:
            raise PolicyError(
                "lowcarb ranks sites by their grid's carbon intensity, which these profiles "
                "do not carry; run with population: regions"
            )
        counts = participation(ctx)
        alive = table.alive_by_id
        seen = counts[alive]
        most = int(seen.max()) if len(seen) else 0
        limit = np.percentile(seen, EXCLUDE_PERCENTILE) if len(seen) else 0.0
        # tier 0: must take part now; 1: the rest; 2: left out this round (last)
        tier = np.ones(len(table), dtype=np.int64)
        tier[counts < MUST_SHARE * most] = 0
        tier[counts > limit] = 2
        # one key: tier first, then intensity (both exact in float64), ties by id (rank_asc)
        span = float(table.carbon_g_per_kwh.max()) + 1.0
        key = tier * span + table.carbon_g_per_kwh
        return rank_asc(key, table), -key
