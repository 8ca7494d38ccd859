"""The oort policy on a hand-made history: its utilities and ranking worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from powertrip.core.policies import Context, PolicyError, SiteTable, get_policy, shadow_names
from powertrip.core.policies.base import PastRound
from powertrip.core.policies.oort import (
    Observation,
    exploit_utilities,
    observations,
    paced_percentile,
    preferred_duration,
)
from powertrip.rpc.runsettings import settings_of
from powertrip.v1 import common_pb2, policy_pb2
from services.policy.config import PolicyConfig
from services.policy.selection import build_context

GB = 1e9
IDS = [f"site-{i:03d}" for i in range(6)]


def table() -> SiteTable:
    distance = [300, 150, 9000, 800, 2500, 4000]
    return SiteTable.build(
        ids=IDS,
        power=[0.9, 0.2, 1.0, 0.5, 0.35, 0.8],
        distance_miles=distance,
        latency_s=[d / 124_188 for d in distance],
        bandwidth_bytes_per_s=[1.25e9 * 100 / d for d in distance],
        update_size_bytes=1.5 * GB,
        directions=1,
    )


#: round 1: sites 0-3 trained and reported (loss, samples, own duration in seconds)
ROUND_1 = PastRound(
    round=1, k=4, accuracy=0.2, round_time_s=201.0, site_ids=tuple(IDS[:4]),
    reported_site_ids=tuple(IDS[:4]),
    site_train_loss=(2.0, 1.0, 3.0, 0.5),
    site_num_samples=(100, 100, 100, 100),
    site_duration_s=(50.0, 50.0, 200.0, 40.0),
)  # fmt: skip


def ctx(history=(ROUND_1,), round_no=2, **params) -> Context:
    return Context(
        table=table(), update_size_bytes=1.5 * GB, tau_s=60.0, history=tuple(history),
        round=round_no, seed=7, params=params,
    )  # fmt: skip


def test_utilities_by_hand():
    seen = observations([ROUND_1])
    assert seen["site-002"] == Observation(1, 300.0, 200.0)  # U = |B| x loss = 100 x 3
    # T: the 30th percentile of the seen durations [40, 50, 50, 200] -> index 1 -> 50 s
    t_pref = preferred_duration([o.duration_s for o in seen.values()], 30.0)
    assert t_pref == 50.0
    util = exploit_utilities([seen[s] for s in IDS[:4]], 2, t_pref, 2.0)
    # U = [200, 100, 300, 50], clipped at its 95th percentile (285), min-max normalised:
    stat = np.array([150, 50, 235, 0]) / 235
    bonus = math.sqrt(0.1 * math.log(2) / 1)  # staleness, all last seen in round 1
    expected = stat + bonus
    expected[2] *= (50 / 200) ** 2  # site-002 took 200 s > T = 50 s: (T/t)^alpha, alpha = 2
    assert util == pytest.approx(expected)
    # so the ranking is 000 (0.902) > 001 (0.476) > 003 (0.263) > 002 (0.079, slow)
    assert [IDS[i] for i in np.argsort(-util)] == ["site-000", "site-001", "site-003", "site-002"]


def test_exploitation_takes_the_admitted_best():
    # no exploration; k = 2: admitted = utility >= 0.95 x the 2nd best's, i.e. 000 and 001
    d = get_policy("oort").select(ctx(k=2, epsilon=0.0, epsilon_min=0.0))
    assert [IDS[i] for i in d.order] == ["site-000", "site-001"]
    assert d.explanation["exploit"] == 2 and d.explanation["explore"] == 0
    assert d.explanation["preferred_duration_s"] == 50.0
    assert d.predicted_round_time_s > 0


def test_exploration_takes_the_unseen_sites_and_fills_k():
    d = get_policy("oort").select(ctx(k=4, epsilon=0.5, epsilon_min=0.5))
    chosen = [IDS[i] for i in d.order]
    assert chosen[:2] == ["site-000", "site-001"]  # exploited, best first
    assert sorted(chosen[2:]) == ["site-004", "site-005"]  # the two never seen
    # round 1 of a run: nothing seen, so every participant explores
    first = get_policy("oort").select(ctx(history=(), round_no=1, k=3))
    assert first.explanation["explore"] == 3 and len(set(first.order.tolist())) == 3


def test_staleness_raises_sites_not_seen_for_long():
    old, recent = Observation(1, 100.0, 10.0), Observation(9, 100.0, 10.0)
    util = exploit_utilities([old, recent], 10, math.inf, 2.0)
    assert util[0] == pytest.approx(math.sqrt(0.1 * math.log(10) / 1))
    assert util[1] == pytest.approx(math.sqrt(0.1 * math.log(10) / 9))


def test_the_pacer_relaxes_t_when_utility_falls():
    falling = [10.0] * 5 + [5.0] * 5
    assert paced_percentile(falling, 30.0, 5, 5.0) == 35.0
    assert paced_percentile(falling[::-1], 30.0, 5, 5.0) == 30.0
    assert paced_percentile([1.0] * 4, 30.0, 5, 5.0) == 30.0  # fewer than 2W rounds
    assert preferred_duration([10.0, 20.0], 100.0) == math.inf


def test_same_context_same_decision_and_oort_is_a_shadow():
    a = get_policy("oort").select(ctx(k=3))
    b = get_policy("oort").select(ctx(k=3))
    assert a.order.tolist() == b.order.tolist()
    assert "oort" in shadow_names("powertrip")


def test_the_wire_rejects_per_site_lists_of_different_lengths():
    request = policy_pb2.SelectSitesRequest(
        policy="oort", update_size_bytes=1e9, settings=settings_of({"tau_s": 10.0})
    )
    request.sites.add(site_id="site-000", power_fraction=1.0, bandwidth_bytes_per_s=1e9)
    request.history.append(
        common_pb2.RoundRecord(
            round=1,
            reported_site_ids=["site-000"],
            site_train_loss=[1.0, 2.0],
            site_num_samples=[3],
            site_duration_s=[4.0],
        )  # fmt: skip
    )
    with pytest.raises(PolicyError, match="history round 1"):
        build_context(request, PolicyConfig())
