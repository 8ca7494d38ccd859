"""SiteColumns, the bulk form of SiteProfile: conversions, validation, and that the policy
decides the same from columns as from messages."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core.policies import REGISTRY, Context, PolicyError, SiteTable, get_policy
from powertrip.core.policies.base import PastRound
from powertrip.core.policies.scoring import rank_asc, rank_desc
from powertrip.core.profiles import PopulationSpec, generate_population
from powertrip.rpc.runsettings import settings_of
from powertrip.rpc.sitecolumns import (
    ColumnsError,
    columns_from_profiles,
    num_sites,
    profiles_from_columns,
    row_of,
)
from powertrip.v1 import common_pb2, policy_pb2
from services.policy.config import PolicyConfig
from services.policy.selection import build_context, select
from services.policy.servicer import to_selection


def profiles(n: int, seed: int = 0, dead=(), measured=()) -> list[common_pb2.SiteProfile]:
    out = []
    for s in generate_population(PopulationSpec(num_sites=n, seed=seed)):
        out.append(
            common_pb2.SiteProfile(
                site_id=s.site_id,
                power_fraction=s.power_fraction,
                distance_miles=s.distance_miles,
                latency_s=s.latency_s,
                bandwidth_bytes_per_s=s.bandwidth_bytes_per_s,
                measured_latency_s=0.2 if s.index in measured else 0.0,
                measured_bandwidth_bytes_per_s=1e5 if s.index in measured else 0.0,
                gpus_available=s.gpus_available,
                gpus_effective=int(s.power_fraction * s.gpus_available),
                power_source="uniform",
                alive=s.index not in dead,
                carbon_g_per_kwh=(37 * s.index) % 700 + 2.0,  # lowcarb's, so it runs too
            )
        )
    return out


def request(**sites) -> policy_pb2.SelectSitesRequest:
    return policy_pb2.SelectSitesRequest(
        policy="powertrip",
        history=[common_pb2.RoundRecord(round=1, k=4, accuracy=0.1, round_time_s=100.0)],
        update_size_bytes=1.5e9,
        round=2,
        settings=settings_of({"tau_s": 60.0, "comm_directions": 2, "shadow": True}),
        **sites,
    )


def test_profiles_survive_the_round_trip_through_columns():
    original = profiles(30, dead={3}, measured={5})
    columns = columns_from_profiles(original)
    assert num_sites(columns) == 30
    assert profiles_from_columns(columns) == original
    assert row_of(columns)["site-007"] == 7


def test_a_column_of_the_wrong_length_is_named():
    columns = columns_from_profiles(profiles(5))
    del columns.bandwidth_bytes_per_s[-1]
    with pytest.raises(ColumnsError, match="bandwidth_bytes_per_s has 4 values for 5 site_id"):
        num_sites(columns)


def test_optional_columns_may_be_empty_but_alive_may_not():
    columns = columns_from_profiles(profiles(5))
    del columns.measured_latency_s[:]
    del columns.measured_bandwidth_bytes_per_s[:]
    assert num_sites(columns) == 5
    assert profiles_from_columns(columns)[2].measured_latency_s == 0.0
    del columns.alive[:]
    with pytest.raises(ColumnsError, match="alive has 0 values"):
        num_sites(columns)


@pytest.mark.parametrize("policy", ["powertrip", "static", "radius", "random", "all"])
@pytest.mark.parametrize("use_measured", [0.0, 1.0])
def test_the_policy_decides_the_same_from_columns_as_from_messages(policy, use_measured):
    """Same selection, scores, shadows and explanation, down to the bytes of the reply."""
    sites = profiles(300, seed=4, dead={1, 17, 250}, measured={0, 2, 40})
    by_message = request(sites=sites)
    by_column = request(site_columns=columns_from_profiles(sites))
    for req in (by_message, by_column):
        req.policy = policy
        req.params["use_measured"] = use_measured
    config = PolicyConfig()
    expected = to_selection(policy, select(by_message, config))
    got = to_selection(policy, select(by_column, config))
    assert got.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    assert not {"site-001", "site-017", "site-250"} & set(got.site_ids)


def test_sites_in_both_forms_are_refused():
    sites = profiles(4)
    with pytest.raises(PolicyError, match="not both"):
        select(request(sites=sites, site_columns=columns_from_profiles(sites)), PolicyConfig())


def test_malformed_columns_are_a_policy_error_naming_the_column():
    columns = columns_from_profiles(profiles(4))
    columns.power_fraction.append(0.5)
    with pytest.raises(PolicyError, match="power_fraction has 5 values for 4"):
        select(request(site_columns=columns), PolicyConfig())
    with pytest.raises(PolicyError, match="no sites"):
        select(request(site_columns=common_pb2.SiteColumns(power_source="x")), PolicyConfig())


def _table(values_ids_alive):
    ids, alive = values_ids_alive
    n = len(ids)
    return SiteTable.build(
        ids=ids,
        power=np.full(n, 0.5),
        distance_miles=np.full(n, 100.0),
        latency_s=np.zeros(n),
        bandwidth_bytes_per_s=np.full(n, 1e9),
        update_size_bytes=1e9,
        alive=alive,
    )


@pytest.mark.parametrize("seed", range(6))
def test_ranks_equal_a_two_key_sort_by_value_then_id(seed):
    """The quicksort fast path and its stable fallback give lexsort((id, value)) order, over
    the alive sites only, with and without ties and whatever order the ids arrive in."""
    rng = np.random.default_rng(seed)
    n = 500
    ids = [f"site-{i:04d}" for i in rng.permutation(n)]
    alive = rng.random(n) > 0.2
    t = _table((ids, alive))
    ties = seed % 2 == 0  # half the cases draw from 20 values only
    values = rng.integers(0, 20, n).astype(float) if ties else rng.random(n)
    expected = [i for i in np.lexsort((np.asarray(ids), values)) if alive[i]]
    assert rank_asc(values, t).tolist() == expected
    expected_desc = [i for i in np.lexsort((np.asarray(ids), -values)) if alive[i]]
    assert rank_desc(values, t).tolist() == expected_desc


def test_the_aggregator_reads_profiles_in_either_form():
    """A profiler from before `columnar` (and a checkpoint written then) answers with one
    message per site; malformed columns fail the run with the column's name."""
    from powertrip.v1 import profiler_pb2
    from services.aggregator.control_client import columns_of as _columns_of
    from services.aggregator.errors import RunFailed

    sites = profiles(6, dead={2})
    old = profiler_pb2.GetProfilesResponse(sites=sites)
    new = profiler_pb2.GetProfilesResponse(columns=columns_from_profiles(sites))
    assert _columns_of(old) == _columns_of(new) == columns_from_profiles(sites)
    del new.columns.latency_s[0]
    with pytest.raises(RunFailed, match="latency_s has 5 values for 6"):
        _columns_of(new)


def test_shared_rankings_do_not_leak_between_policies_or_parameters():
    """Policies sharing one table reuse its rankings (`SiteTable.memo`); each decision must
    still equal the one it makes on a table of its own, whatever ran before it."""

    def fresh_table():
        return build_context(
            request(sites=profiles(400, seed=8, dead={3, 9})), PolicyConfig()
        ).table

    history = (PastRound(1, 20, 0.1, 100.0),)
    cases = [(name, {}) for name in REGISTRY] + [
        ("static", {"m_ref_gb": 0.1}),
        ("powertrip", {"m_ref_gb": 20.0}),
        ("radius", {"m_ref_gb": 0.5, "radius_miles": 3000.0}),
    ]

    def decide(table, name, params):
        ctx = Context(table=table, update_size_bytes=1.5e9, tau_s=60.0, history=history,
                      params=params)  # fmt: skip
        return get_policy(name).select(ctx).order.tolist()

    alone = {(name, str(params)): decide(fresh_table(), name, params) for name, params in cases}
    shared = fresh_table()
    for name, params in reversed(cases):
        assert decide(shared, name, params) == alone[(name, str(params))], (name, params)
    scores, ranked = next(iter(shared._memo.values()))
    with pytest.raises(ValueError, match="read-only"):
        ranked[0] = 0


def test_the_heap_thresholds_are_set_where_glibc_is():
    import platform

    from powertrip.rpc.heap import keep_buffers_on_heap

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    assert keep_buffers_on_heap() is True
