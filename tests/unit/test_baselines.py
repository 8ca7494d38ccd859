"""The baselines the paper defines against PowerTrip (static fixed at round 1, highest-power
with a dynamic k), the measured efficiency both read (Eq. 5), and the round-time estimate
under each work model, on hand-made site tables."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core.policies import Context, SiteTable, get_policy
from powertrip.core.policies.base import PastRound
from powertrip.core.policies.efficiency import gains_of, measured_efficiency

GB = 1e9


def flat_table(n: int = 40, slow_from: int | None = None) -> SiteTable:
    """n sites with identical power and links (T-hat flat in k), except that sites from
    `slow_from` on are far, thin and weak (each one raises T-hat a lot)."""
    power = np.full(n, 0.9)
    distance = np.full(n, 500.0) + np.arange(n)  # distinct, so the ranking is by distance
    bandwidth = np.full(n, 1e9)
    if slow_from is not None:
        power[slow_from:] = 0.1
        distance[slow_from:] = 9000.0 + np.arange(n - slow_from)
        bandwidth[slow_from:] = 1e6
    return SiteTable.build(
        ids=[f"site-{i:03d}" for i in range(n)],
        power=power,
        distance_miles=distance,
        latency_s=distance / 124_188,
        bandwidth_bytes_per_s=bandwidth,
        update_size_bytes=1.5 * GB,
        directions=1,
    )


def decide(table, hist, policy, **params):
    ctx = Context(table=table, update_size_bytes=1.5 * GB, tau_s=60.0, history=hist, params=params)
    return get_policy(policy).select(ctx)


# ---- the pieces ------------------------------------------------------------------------
def test_measured_efficiency_is_eq5_over_the_window():
    gains = gains_of([0.1, 0.3, 0.35])
    assert gains == pytest.approx([0.1, 0.2, 0.05])
    assert measured_efficiency(gains, np.array([10.0, 20.0, 50.0]), 2) == pytest.approx(0.25 / 70.0)


# ---- the baselines ----------------------------------------------------------------------
def test_static_keeps_the_set_of_round_one_and_replaces_dead_sites():
    t = flat_table(10)
    first = decide(t, (), policy="static", k=3)
    ids = [str(t.ids[i]) for i in first.order]
    # power changes: a re-ranking would now pick other sites; static keeps round 1's
    power = np.full(10, 0.9)
    power[[int(i) for i in first.order]] = 0.2
    later = SiteTable.build(
        t.ids.tolist(),
        power,
        t.distance_miles,
        t.latency_s,
        t.bandwidth_bytes_per_s,
        1.5 * GB,
        1,
        alive=[s != ids[1] for s in t.ids.tolist()],
    )
    hist = (PastRound(1, 3, 0.1, 100.0, tuple(ids)),)
    kept = decide(later, hist, policy="static", k=3)
    kept_ids = [str(later.ids[i]) for i in kept.order]
    assert kept_ids[:2] == [ids[0], ids[2]]  # the alive ones of round 1, in order
    assert len(kept_ids) == 3 and ids[1] not in kept_ids  # the dead one replaced
    assert kept.explanation["replaced"] == 1


def test_highest_power_chooses_k_dynamically_by_power_alone():
    rng = np.random.default_rng(1)
    n = 40
    d = rng.uniform(100, 10_000, n)
    t = SiteTable.build(
        [f"site-{i:03d}" for i in range(n)],
        rng.uniform(0.1, 1.0, n),
        d,
        d / 124_188,
        1.25e9 * 100 / d,
        1.5 * GB,
        1,
    )
    first = decide(t, (), policy="highest-power")
    assert first.k == 2
    assert list(first.order) == list(np.argsort(-t.power)[:2])
    assert first.explanation["ranking"] == "power, highest first"
    fixed = decide(t, (), policy="highest-power", k=7)
    assert fixed.k == 7


def test_the_estimate_follows_the_clocks_work_model():
    """Under data-parallel (Eq. 7) more power shortens compute, so T-hat falls with k where
    the sites are alike; under local-steps it cannot fall."""
    t = flat_table(20)
    local = Context(table=t, update_size_bytes=1.5 * GB, tau_s=60.0)
    parallel = Context(table=t, update_size_bytes=1.5 * GB, tau_s=60.0, work_model="data-parallel")
    ranked = np.arange(20)
    local_times = local.round_time_estimates(ranked)
    parallel_times = parallel.round_time_estimates(ranked)
    assert (np.diff(local_times) >= -1e-9).all()
    assert parallel_times[9] < parallel_times[0] / 5  # 10 sites: a tenth of the compute
    comm = float(t.comm_s[0])
    assert parallel_times[9] - comm == pytest.approx(10 * 60.0 / (10 * 0.9), rel=0.01)
