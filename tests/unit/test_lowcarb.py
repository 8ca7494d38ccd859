"""`lowcarb` (issue #60), flwr-lowcarb's rule on a hand-made catalog of five sites,
`centralized-green` on the same, and the carbon column on its way from the profiler's
columns to the policy's table."""

from __future__ import annotations

import pytest

from powertrip.core.policies import (
    CENTRALIZED,
    REGISTRY,
    Context,
    PastRound,
    PolicyError,
    SiteTable,
    get_policy,
)
from powertrip.core.policies.lowcarb import Lowcarb, participation
from powertrip.rpc.sitecolumns import columns_from_profiles, profiles_from_columns
from powertrip.v1 import common_pb2
from services.policy.config import PolicyConfig
from services.policy.selection import shadows, site_table_from_columns

#: five sites: a (Montreal, 2 g), b (Warsaw, 723), c (Paris, 34), d (Dallas, 321), e (Sydney, 501)
IDS = ["site-a", "site-b", "site-c", "site-d", "site-e"]
CARBON = [2.0, 723.0, 34.0, 321.0, 501.0]


def _table(carbon=CARBON, alive=None) -> SiteTable:
    return SiteTable.build(
        ids=IDS, power=[0.5, 1.0, 0.2, 0.9, 0.7], distance_miles=[100] * 5,
        latency_s=[0.001] * 5, bandwidth_bytes_per_s=[1e8] * 5, update_size_bytes=1e9,
        alive=alive, carbon_g_per_kwh=carbon,
    )  # fmt: skip


def _picked(ctx: Context) -> list[str]:
    return [IDS[i] for i in Lowcarb().select(ctx).order]


def test_the_first_round_takes_the_lowest_intensities_blind_to_power():
    ctx = Context(table=_table(), update_size_bytes=1e9, tau_s=60.0, params={"k": 3})
    assert _picked(ctx) == ["site-a", "site-c", "site-d"]  # 2, 34, 321 g; b has full power


def test_participation_balances_the_choice():
    """After three rounds of a, c and d, and one of e: the 80th percentile of (3, 0, 3, 3, 1)
    is 3, so no one is left out; b (0 rounds) and e (1) have under half of the most (3), so
    they must take part now, e (501 g) before b (723 g); then the rest by intensity."""
    history = tuple(
        PastRound(r, 3, 0.1 * r, 60.0, site_ids=("site-a", "site-c", "site-d")) for r in (1, 2, 3)
    ) + (PastRound(4, 1, 0.4, 60.0, site_ids=("site-e",)),)
    ctx = Context(
        table=_table(), update_size_bytes=1e9, tau_s=60.0, history=history, params={"k": 3}
    )
    assert list(participation(ctx)) == [3, 0, 3, 3, 1]
    assert _picked(ctx) == ["site-e", "site-b", "site-a"]


def test_sites_above_the_80th_percentile_go_last():
    """Participation (4, 0, 0, 0, 0): the 80th percentile is 0, so a is left out and goes
    last however clean its grid; the others have not reached half of 4 and come first."""
    history = tuple(PastRound(r, 1, 0.1, 60.0, site_ids=("site-a",)) for r in (1, 2, 3, 4))
    ctx = Context(
        table=_table(), update_size_bytes=1e9, tau_s=60.0, history=history, params={"k": 5}
    )
    assert _picked(ctx) == ["site-c", "site-d", "site-e", "site-b", "site-a"]


def test_dead_sites_are_never_picked_and_k_is_clamped():
    table = _table(alive=[False, True, True, True, True])
    decision = Lowcarb().select(
        Context(table=table, update_size_bytes=1e9, tau_s=60.0, params={"k": 9})
    )
    assert [IDS[i] for i in decision.order] == ["site-c", "site-d", "site-e", "site-b"]
    assert "clamped" in decision.explanation["note"]


def test_without_intensities_lowcarb_says_what_it_needs_and_no_shadow_runs_it():
    ctx = Context(table=_table(carbon=None), update_size_bytes=1e9, tau_s=60.0)
    with pytest.raises(PolicyError, match="population: regions"):
        Lowcarb().select(ctx)
    assert "lowcarb" in REGISTRY
    assert "lowcarb" not in [s.policy for s in shadows("powertrip", ctx)]
    with_carbon = Context(table=_table(), update_size_bytes=1e9, tau_s=60.0)
    assert "lowcarb" in [s.policy for s in shadows("powertrip", with_carbon)]


def test_the_carbon_column_travels_from_the_profiles_to_the_table():
    profiles = [
        common_pb2.SiteProfile(site_id=i, power_fraction=0.5, distance_miles=100.0,
                               latency_s=0.001, bandwidth_bytes_per_s=1e8, alive=True,
                               carbon_g_per_kwh=g)
        for i, g in zip(IDS, CARBON, strict=True)
    ]  # fmt: skip
    columns = columns_from_profiles(profiles)
    assert list(columns.carbon_g_per_kwh) == CARBON
    assert [p.carbon_g_per_kwh for p in profiles_from_columns(columns)] == CARBON
    table = site_table_from_columns(columns, 1e9, 1, PolicyConfig().use_measured)
    assert list(table.carbon_g_per_kwh) == CARBON
    unknown = [common_pb2.SiteProfile(site_id=p.site_id, power_fraction=0.5, alive=True)
               for p in profiles]  # fmt: skip
    assert len(columns_from_profiles(unknown).carbon_g_per_kwh) == 0  # 0 everywhere: none
    del columns.carbon_g_per_kwh[:]  # a synthetic population's profiler leaves it empty
    assert site_table_from_columns(columns, 1e9, 1, False).carbon_g_per_kwh is None
    columns.carbon_g_per_kwh.extend([1.0, 2.0])  # neither empty nor one per site
    with pytest.raises(PolicyError, match="carbon_g_per_kwh has 2 values for 5"):
        site_table_from_columns(columns, 1e9, 1, False)


def test_centralized_green_hosts_the_pooled_run_at_the_cleanest_grid():
    ctx = Context(table=_table(), update_size_bytes=1e9, tau_s=60.0)
    decision = get_policy("centralized-green").select(ctx)
    assert [IDS[i] for i in decision.order] == ["site-a"]  # Montreal, 2 g; not b's full power
    assert decision.mode == CENTRALIZED and decision.power_cap == 0.25
    assert decision.predicted_round_time_s == 60.0 / 0.25
    assert [IDS[i] for i in get_policy("centralized").select(ctx).order] == ["site-b"]
    with pytest.raises(PolicyError, match="population: regions"):
        get_policy("centralized-green").select(
            Context(table=_table(carbon=None), update_size_bytes=1e9, tau_s=60.0)
        )
