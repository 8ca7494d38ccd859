"""`powertrip` as the paper writes it (§3.3, §4): each step of its docstring on a hand-made
history, with the numbers worked out by hand beside the assertions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from powertrip.core.policies import Context, SiteTable, get_policy
from powertrip.core.policies.base import PastRound
from powertrip.core.policies.efficiency import realised_below
from powertrip.core.policies.powertrip import auto_k0, greedy_addition

GB = 1e9


def table(n: int = 100, slow_from: int | None = None) -> SiteTable:
    """n alike sites (T-hat flat in k: tau / 0.5 + comm) whose distances rank them; sites
    from `slow_from` on are weak and far, each raising T-hat."""
    power = np.full(n, 0.5)
    distance = 500.0 + np.arange(n)
    bandwidth = np.full(n, 1e9)
    if slow_from is not None:
        power[slow_from:] = 0.1
        distance[slow_from:] = 9000.0 + np.arange(n - slow_from)
        bandwidth[slow_from:] = 1e7
    return SiteTable.build(
        [f"site-{i:03d}" for i in range(n)], power, distance, distance / 124_188, bandwidth,
        1.5 * GB, 1,
    )  # fmt: skip


def decide(t: SiteTable, ks, accs, times, target: float = math.inf, **params):
    hist = tuple(
        PastRound(i + 1, int(k), float(a), float(s))
        for i, (k, a, s) in enumerate(zip(ks, accs, times, strict=True))
    )
    ctx = Context(t, 1.5 * GB, 60.0, hist, target, params=params)
    return get_policy("powertrip").select(ctx)


def test_round_one_takes_the_small_k0_best_ranked():
    assert auto_k0(100) == 2 and auto_k0(1000) == 20 and auto_k0(1) == 1
    d = decide(table(), [], [], [])
    assert d.k == 2 and d.explanation["rule"] == "paper"
    assert [int(i) for i in d.order] == [0, 1]  # nearest first: the Eq. 8 ranking


def test_greedy_addition_stops_at_the_first_site_that_does_not_pay():
    # the third candidate does not beat the measured efficiency: the ones after it never count
    assert greedy_addition(np.array([2.0, 1.5, 0.9, 3.0]), measured=1.0) == 2
    assert greedy_addition(np.array([0.5, 3.0]), measured=1.0) == 0
    assert greedy_addition(np.array([1.0]), measured=1.0) == 0  # equal is no improvement
    assert greedy_addition(np.array([2.0, 2.0]), measured=1.0) == 2


def test_sites_are_added_while_the_projected_efficiency_beats_the_measured_one():
    t = table()
    # T-hat is flat (120 s + comm ~1.5 s), measured 200 s a round: E_meas = 0.02/200 = 1e-4;
    # projected dA(k)/T(k) = 0.02 log(1+k)/log(3) / ~121.5 s > 1e-4 for every k of the window
    d = decide(t, [2, 2, 2], [0.02, 0.04, 0.06], [200.0] * 3)
    assert d.k == 2 + 5  # window = 5 % of 100
    assert d.explanation["measured_efficiency"] == pytest.approx(1e-4)
    assert d.explanation["gain"] == pytest.approx(0.02)


def test_an_estimate_slower_than_measured_adds_nothing():
    t = table()
    # measured 60 s a round: E_meas = 0.02/60 = 3.3e-4 > dA(3)/T(3) = 0.02*1.26/121.5 = 2.1e-4
    d = decide(t, [2, 2, 2], [0.02, 0.04, 0.06], [60.0] * 3)
    assert d.k == 2
    assert "not above the measured" in d.explanation["reason"]


def test_a_straggler_in_the_window_stops_the_scan_before_it():
    t = table(slow_from=4)  # sites 5.. are 0.1 power, 1e7 B/s: T-hat jumps at k = 5
    # E_meas = 0.02/130 = 1.54e-4; k = 4: 0.02 log(5)/log(3) / 121.5 = 2.4e-4 pays;
    # k = 5: tau / mean(p) = 60/0.42 = 143 s + 150 s comm: 0.02 * 1.63 / 293 = 1.1e-4 does not
    d = decide(t, [2, 2, 2], [0.02, 0.04, 0.06], [130.0] * 3)
    assert d.k == 4  # sites 3 and 4 pay; the 5th does not, and nothing after it is scanned
    times = d.explanation["times"]
    assert times[3] > 2 * times[2]  # candidates 2..7: the step sits at k = 5
    # the same history on alike sites scans the whole window
    assert decide(table(), [2, 2, 2], [0.02, 0.04, 0.06], [130.0] * 3).k == 7


def test_no_recent_gain_adds_nothing():
    # the last three gains: 0, -0.01, 0
    d = decide(table(), [4] * 5, [0.3, 0.31, 0.31, 0.30, 0.30], [100.0] * 5, patience=0)
    assert d.k == 4 and "no recent accuracy gain" in d.explanation["reason"]


def test_patience_rounds_below_the_measured_efficiency_open_the_window_downwards():
    t = table(slow_from=6)
    # k = 8 includes two stragglers; the last three rounds each gained less per second
    # than the rounds before them
    ks = [8] * 6
    accs = [0.125, 0.25, 0.375, 0.40625, 0.4375, 0.4453125]  # exact in binary: no ties by noise
    times = [300.0] * 6
    gains = np.diff([0.0, *accs])
    assert realised_below(gains, np.array(times), 3, 1.0, 6) == 3
    held = decide(t, ks[:5], accs[:5], times[:5], patience=3, window=3)
    assert held.k >= 8 and not held.explanation["may_shrink"]  # no shrink yet
    shrunk = decide(t, ks, accs, times, patience=3, window=3)
    assert shrunk.explanation["may_shrink"]
    assert shrunk.explanation["candidates_range"] == [5, 11]
    assert shrunk.k == 6  # from 5 the 6th site pays, the 7th (a straggler) does not


def test_patience_counts_only_rounds_at_the_current_k():
    t = table(slow_from=6)
    # three bad rounds, but k changed two rounds ago: only two of them count
    accs = [0.125, 0.25, 0.375, 0.40625, 0.4375, 0.4453125]
    d = decide(t, [8, 8, 8, 8, 9, 9], accs, [300.0] * 6, patience=3)
    assert d.explanation["rounds_below"] == 2 and not d.explanation["may_shrink"]


def test_target_reached_is_explained():
    """The aggregator decides to stop; the policy's explanation says the target was met."""
    d = decide(table(), [2, 2], [0.3, 0.46], [100.0] * 2, target=0.45)
    assert d.explanation["reason"].startswith("target accuracy 0.45 reached")
    d = decide(table(), [2, 2], [0.3, 0.44], [100.0] * 2, target=0.45)
    assert not d.explanation["reason"].startswith("target accuracy")
