"""`adaptive`'s floors: the bound on where a set of sites levels off, the floor it puts under
k (`ceiling_rounds`), the stall floor (`stall_rounds`), and both in the simulated run loop
where the answer is known. That they leave every committed run as it was: tests/replay/."""

from __future__ import annotations

import math

import numpy as np
import pytest

from powertrip.core.policies import PolicyError, SiteTable, get_policy
from powertrip.core.policies.base import PastRound
from powertrip.core.policies.floors import ceiling_floor, ceiling_upper_bound, stall_floor
from tests.unit.adaptive_loop import clock_time, ctx, gentle_table, run_loop, table_of


def saturating_curve(rounds: int, ceiling: float, rise: float, rate: float) -> np.ndarray:
    return ceiling - rise * np.exp(-rate * np.arange(rounds))


# ---- the bound ------------------------------------------------------------------------------


def test_the_bound_covers_a_noisy_curves_true_ceiling_and_is_close_to_it():
    bounds = []
    for seed in range(40):
        noise = np.random.default_rng(seed).normal(0.0, 0.004, 100)
        bounds.append(ceiling_upper_bound(saturating_curve(100, 0.6, 0.3, 0.02) + noise))
    bounds = np.array(bounds)
    assert np.mean(bounds >= 0.6) >= 0.9  # an upper bound, 95 % per check
    assert 0.6 <= np.median(bounds) <= 0.62  # and a tight one where the curve bends


def test_a_noise_free_curve_gives_its_own_ceiling():
    assert ceiling_upper_bound(saturating_curve(60, 0.6, 0.4, 0.05)) == pytest.approx(0.6, abs=1e-3)


def test_a_steady_climb_bounds_nothing():
    # no bend: a small rate fits as well, and its ceiling is far above any accuracy
    rng = np.random.default_rng(0)
    line = 0.3 + 0.001 * np.arange(100) + rng.normal(0.0, 0.004, 100)
    assert ceiling_upper_bound(line) > 1.0
    assert ceiling_upper_bound(np.array([0.3, 0.31, 0.32, 0.33])) == math.inf  # too few


# ---- the floor ------------------------------------------------------------------------------


def levelled(rounds: int, k: int = 5) -> tuple[list[float], list[int]]:
    """`rounds` rounds at k of a curve that levels off at 0.5."""
    return list(saturating_curve(rounds, 0.5, 0.3, 0.1)), [k] * rounds


def test_the_floor_rises_a_step_above_a_set_that_levels_off_below_the_target():
    accuracies, ks = levelled(40)
    floor, bound = ceiling_floor(accuracies, ks, 0.62, 30, 5, 100)
    assert floor == 10 and bound < 0.62
    # above the set's ceiling the target is within reach: no floor
    assert ceiling_floor(accuracies, ks, 0.45, 30, 5, 100)[0] == 0
    # no target (inf), or fewer rounds at this k than the option asks: no floor
    assert ceiling_floor(accuracies, ks, math.inf, 30, 5, 100) == (0, math.inf)
    assert ceiling_floor(accuracies[:29], ks[:29], 0.62, 30, 5, 100)[0] == 0
    assert ceiling_floor(accuracies, ks, 0.62, 30, 5, 8)[0] == 8  # at most n


def test_the_rounds_at_a_new_k_start_a_new_count():
    accuracies, ks = levelled(40)
    more, at_ten = levelled(29, k=10)
    # 29 rounds at the raised k: not yet enough for a second rise
    assert ceiling_floor(accuracies + more, ks + at_ten, 0.62, 30, 5, 100)[0] == 10
    more, at_ten = levelled(30, k=10)
    assert ceiling_floor(accuracies + more, ks + at_ten, 0.62, 30, 5, 100)[0] == 15


# ---- in the policy --------------------------------------------------------------------------


def costly_next_site_table(n: int = 40) -> SiteTable:
    """The gentle table with the third-ranked site 20 % slower: from k = 2 the next site
    alone lengthens the round by about 20 %, more than the default probe_cost (10 %)."""
    power = gentle_table(n).power.copy()
    power[2:] = power[2:] / 1.2
    return table_of(power)


def test_the_floor_is_on_by_default_and_a_bad_value_names_it():
    table = costly_next_site_table()  # adaptive holds 2 sites here (no probe fits)
    accuracies, ks = levelled(40, k=2)
    history = [
        PastRound(r, k, a, clock_time(table, np.arange(k)))
        for r, (a, k) in enumerate(zip(accuracies, ks, strict=True), 1)
    ]
    # off: unset (None), or 0 as a stored run writes it
    for off in (
        {"ceiling_rounds": 0, "stall_rounds": 0},
        {"ceiling_rounds": None, "stall_rounds": None},
    ):
        plain = get_policy("adaptive").select(ctx(table, history, target_accuracy=0.62, params=off))
        assert plain.k == 2 and "ceiling_floor" not in plain.explanation
    raised = get_policy("adaptive").select(ctx(table, history, target_accuracy=0.62))
    assert raised.explanation["ceiling_floor"] == 4  # 2 + the probe step (5 % of 40)
    assert raised.k == 4 and "raised to the floor k=4" in raised.explanation["reason"]
    with pytest.raises(
        PolicyError,
        match=r"'adaptive': ceiling_rounds must be a whole number >= 5 \(0 or unset: no ceiling "
        r"floor\), got 3",
    ):
        get_policy("adaptive").select(ctx(table, history, params={"ceiling_rounds": 3}))


def creeping(k: int, accuracy: float) -> float:
    """A gain whose rate does not depend on k but whose ceiling does: each set of sites
    levels off at 0.45 + 0.05 ln k (2 sites at 0.485, 20 at 0.60, 30 at 0.62)."""
    return (0.45 + 0.05 * math.log(k) - accuracy) * 0.03


def static_seconds(table, target: float, k: int) -> float:
    accuracy, rounds = 0.0, 0
    while accuracy < target and rounds < 5000:
        accuracy, rounds = accuracy + creeping(k, accuracy), rounds + 1
    return rounds * clock_time(table, np.arange(k)) if accuracy >= target else math.inf


def test_the_ceiling_floor_ends_a_set_that_creeps_towards_a_ceiling_below_the_target():
    # the next site costs 20 % (> probe_cost): adaptive never measures a slope, and a set
    # that keeps creeping up sets a new best every round, so the stall floor never rises
    table = costly_next_site_table()
    best_static = min(static_seconds(table, 0.6, k) for k in range(1, 41))
    stall = {"ceiling_rounds": 0}
    history, _, reached = run_loop(creeping, 150, params=stall, table=table, until=0.6, target=0.6)
    assert reached == math.inf and {h.k for h in history} == {2}
    history, _, reached = run_loop(creeping, 150, table=table, until=0.6, target=0.6)
    assert reached <= 1.05 * best_static
    assert history[29].k == 2 and history[30].k > 2  # the floor rose after 30 rounds at 2


def test_the_ceiling_floor_leaves_a_run_alone_whose_set_can_reach_the_target():
    table = costly_next_site_table()
    plain = run_loop(creeping, 120, params={"ceiling_rounds": 0}, table=table, target=0.45)[0]
    assert run_loop(creeping, 120, table=table, target=0.45)[0] == plain


def test_stall_floor_rises_above_the_largest_set_that_stopped_improving():
    # the best (0.2) comes at round 2; rounds 3-5 do not beat it at k 7, 2, 7: after 3 such
    # rounds the floor is 7 + 5, and the count starts again
    assert stall_floor([0.1, 0.2, 0.2, 0.19, 0.2], [2, 7, 7, 2, 7], 3, 5, 100) == (12, 0)
    # a new best afterwards keeps the floor (it never falls) and resets the count
    assert stall_floor([0.1, 0.2, 0.2, 0.2, 0.2, 0.3], [2, 7, 7, 2, 7, 12], 3, 5, 100) == (12, 0)
    # no new best at the new floor for 3 more rounds: 12 + 5
    accs = [0.1, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]
    assert stall_floor(accs, [2, 7, 7, 2, 7, 12, 12, 12], 3, 5, 100) == (17, 0)
    # two rounds without a new best are not yet a stall; the floor is capped at the sites
    assert stall_floor([0.1, 0.2, 0.2, 0.2], [2, 99, 99, 99], 3, 5, 100) == (0, 2)
    assert stall_floor([0.2, 0.2, 0.2, 0.2], [99] * 4, 3, 5, 100) == (100, 0)
