"""`objective: carbon`: the policy's k, its sites re-chosen for less CO2 while the
round, as the clock charges it, stays within the slack of the time objective's."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.policies import Context, Decision, PolicyError, SiteTable, get_policy
from powertrip.core.policies.objective import (
    IDLE_RATIO,
    for_carbon,
    idle_ratio,
    round_carbon,
    round_time,
)

#: six sites, tau 60 s: a and b are fast and dirty, c and d a little slower and clean, e is
#: clean but slow (power 0.2: 300 s), f is clean but far (its link alone takes 200 s)
IDS = ["site-a", "site-b", "site-c", "site-d", "site-e", "site-f"]
POWER = [1.0, 1.0, 0.95, 0.95, 0.2, 1.0]
COMM_S = [5.0, 5.0, 6.0, 6.0, 5.0, 200.0]
CARBON = [700.0, 650.0, 30.0, 40.0, 2.0, 5.0]


def _ctx(work_model: str = "local-steps", carbon=CARBON) -> Context:
    table = SiteTable.build(
        ids=IDS, power=POWER, distance_miles=[100.0] * 6, latency_s=[0.0] * 6,
        bandwidth_bytes_per_s=[1e9 / c for c in COMM_S], update_size_bytes=1e9, directions=1,
        carbon_g_per_kwh=carbon,
    )  # fmt: skip
    return Context(table=table, update_size_bytes=1e9, tau_s=60.0, work_model=work_model)


def _time_decision(ctx: Context) -> Decision:
    order = np.array([0, 1])  # the time objective's pick: the two fastest sites
    return Decision(order, float(ctx.round_time_estimates(order)[-1]), {"rule": "test"})


def test_the_cleanest_sites_that_fit_the_slack_replace_the_fast_dirty_ones():
    ctx = _ctx()
    decision = for_carbon(ctx, _time_decision(ctx), slack=1.10)
    # T* = 65 s, so the bound is 71.5 s: c and d (63.2 + 6) fit; e (305 s) and f (260) do not
    assert [IDS[i] for i in decision.order] == ["site-c", "site-d"]
    assert round_time(ctx, decision.order) <= 1.10 * 65.0
    assert decision.explanation["carbon_vs_time"] < 0.1
    assert decision.explanation["objective"] == "carbon" and decision.k == 2


def test_a_wider_slack_buys_the_slow_clean_site():
    ctx = _ctx()
    decision = for_carbon(ctx, _time_decision(ctx), slack=5.0)  # 325 s: e fits, f does too
    assert set(IDS[i] for i in decision.order) <= {"site-c", "site-d", "site-e", "site-f"}
    assert round_carbon(ctx, decision.order) < round_carbon(ctx, np.array([2, 3]))


def test_no_cleaner_set_within_the_slack_keeps_the_policys_own():
    ctx = _ctx(carbon=[1.0, 2.0, 500.0, 600.0, 700.0, 800.0])  # the fast sites are cleanest
    decision = for_carbon(ctx, _time_decision(ctx), slack=1.10)
    assert decision.order.tolist() == [0, 1]
    assert "no cleaner set" in decision.explanation["note"]


def test_round_carbon_counts_idle_energy_until_the_straggler():
    ctx = _ctx()
    pair = np.array([2, 4])  # c (63.2 s + 6) waits for e (300 s + 5): T = 305 s
    t = round_time(ctx, pair)
    assert t == pytest.approx(305.0)
    expected = sum(
        CARBON[i] * POWER[i] * ((1 - IDLE_RATIO) * 60.0 / POWER[i] + IDLE_RATIO * t) for i in (2, 4)
    )
    assert round_carbon(ctx, pair) == pytest.approx(expected)


def test_the_runs_own_gpu_powers_set_the_idle_share():
    """gpu_power_w and gpu_idle_power_w reach the objective: with an idle GPU that draws
    nothing a round's carbon is its compute alone; 0 W active (a request from before the
    fields) keeps the accounting's defaults."""
    assert idle_ratio(300.0, 30.0) == pytest.approx(0.1)
    assert idle_ratio(0.0, 0.0) == IDLE_RATIO
    ctx = _ctx()
    pair = np.array([2, 4])
    compute_only = sum(CARBON[i] * 60.0 for i in (2, 4))
    assert round_carbon(ctx, pair, idle=0.0) == pytest.approx(compute_only)
    assert round_carbon(ctx, pair, idle=0.5) > round_carbon(ctx, pair, idle=IDLE_RATIO)
    # c a little dirtier than f but far cleaner than e's power makes it: without idle draw
    # the grid alone ranks (f 5, c 6, e 8); when waiting costs 0.9 of full power, the slow
    # site e, which keeps few GPUs busy, is the cleaner partner of f
    ctx = _ctx(carbon=[700.0, 650.0, 6.0, 40.0, 8.0, 5.0])
    free = for_carbon(ctx, _time_decision(ctx), slack=5.0, idle=0.0)
    costly = for_carbon(ctx, _time_decision(ctx), slack=5.0, idle=0.9)
    assert sorted(IDS[i] for i in free.order) == ["site-c", "site-f"]
    assert sorted(IDS[i] for i in costly.order) == ["site-e", "site-f"]


def test_a_centralized_decision_and_a_table_without_intensities():
    ctx = _ctx()
    central = get_policy("centralized").select(ctx)
    assert for_carbon(ctx, central) is central
    with pytest.raises(PolicyError, match="population: regions"):
        for_carbon(_ctx(carbon=None), _time_decision(ctx))
    with pytest.raises(PolicyError, match="carbon_slack must be >= 1"):
        for_carbon(ctx, _time_decision(ctx), slack=0.9)


def test_the_setting_is_checked_with_what_it_needs():
    assert RunConfig().objective == "time"  # the paper's objective is the default
    with pytest.raises(ConfigError, match="objective: carbon needs .* population: regions"):
        RunConfig(objective="carbon").validate()
    with pytest.raises(ConfigError, match="carbon_slack: must be >= 1"):
        RunConfig(objective="carbon", population="regions", num_sites=40,
                  carbon_slack=0.5).validate()  # fmt: skip
    with pytest.raises(ConfigError, match="objective must be one of time, carbon"):
        RunConfig().with_values({"objective": "cost"}, "--set")


def test_the_policy_service_takes_the_runs_gpu_powers_from_the_request():
    """SelectSites carries gpu_power_w and gpu_idle_power_w to the objective (they used to
    stop at the accounting): the same request decides as for_carbon does with their ratio,
    and a request without them (0 W) as with the accounting's defaults."""
    from powertrip.rpc.runsettings import settings_of
    from powertrip.rpc.sitecolumns import columns_from_profiles
    from powertrip.v1 import common_pb2, policy_pb2
    from services.policy.config import PolicyConfig
    from services.policy.selection import select

    carbon = [700.0, 650.0, 6.0, 40.0, 8.0, 5.0]
    profiles = [
        common_pb2.SiteProfile(site_id=i, power_fraction=p, distance_miles=100.0, latency_s=0.0,
                               bandwidth_bytes_per_s=1e9 / c, alive=True, carbon_g_per_kwh=g)
        for i, p, c, g in zip(IDS, POWER, COMM_S, carbon, strict=True)
    ]  # fmt: skip

    def chosen(**powers) -> list[str]:
        request = policy_pb2.SelectSitesRequest(
            policy="static", params={"k": 2.0}, update_size_bytes=1e9, round=1,
            site_columns=columns_from_profiles(profiles),
            settings=settings_of({"tau_s": 60.0, "comm_directions": 1, "objective": "carbon",
                                  "carbon_slack": 5.0, **powers}),
        )  # fmt: skip
        decision = select(request, PolicyConfig()).decision
        return sorted(IDS[i] for i in decision.order)

    assert chosen(gpu_power_w=250.0, gpu_idle_power_w=0.0) == ["site-c", "site-f"]
    assert chosen(gpu_power_w=250.0, gpu_idle_power_w=225.0) == ["site-e", "site-f"]
    assert chosen() == chosen(gpu_power_w=250.0, gpu_idle_power_w=50.0)
