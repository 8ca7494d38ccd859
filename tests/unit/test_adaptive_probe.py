"""The `adaptive` policy's probe and its check: a probe that meets its prediction is held, one
that takes longer or gains less is abandoned after one round, and a failed size stays
blocked with a doubling cool-down.

The sites, gains and run loop are adaptive_loop.py's: how the gain depends on k is chosen
there, the policy has to learn it.
"""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core.policies import get_policy
from powertrip.core.policies.base import PastRound
from powertrip.core.policies.gainfit import failed_trials, growth_cap, last_growth
from tests.unit.adaptive_loop import RISING, clock_time, ctx, gentle_table, history_at

# ---- the probe and its check ------------------------------------------------------------


@pytest.fixture()
def probed():
    """Four rounds at k0 = 2, then the policy's own probe for round 5."""
    table = gentle_table()
    history = history_at([2, 2, 2, 2], table=table)
    d = get_policy("adaptive").select(ctx(table, history))
    assert d.explanation["k_cur"] == 2
    assert d.explanation["reason"].startswith("probe 2 -> ")
    assert d.k == 4  # x1.25 or +5 % of 40 = +2, whichever is larger
    return table, history, d


def _probe_round(table, history, k, gain_factor=1.0, time_factor=1.0) -> PastRound:
    before = history[-1].accuracy
    gain = RISING(k, before) * gain_factor
    return PastRound(
        len(history) + 1, k, before + gain, clock_time(table, np.arange(k)) * time_factor
    )


def test_a_probe_that_meets_its_prediction_is_held(probed):
    table, history, d = probed
    history = [*history, _probe_round(table, history, d.k)]
    held = get_policy("adaptive").select(ctx(table, history))
    assert held.k == 4
    assert held.explanation["reason"] == "probe 2 -> 4 held: 1/2 round(s) measured"
    check = held.explanation["check"]
    assert check["measured_time_ratio"] <= check["predicted_time_ratio"]


def test_a_probe_whose_round_takes_longer_than_predicted_is_abandoned_after_one_round(probed):
    table, history, d = probed
    history = [*history, _probe_round(table, history, d.k, time_factor=1.5)]
    back = get_policy("adaptive").select(ctx(table, history))
    assert back.k == 2
    assert back.explanation["reason"].startswith("abandon 2 -> 4 after one round: the round took")


def test_a_probe_that_gains_less_than_predicted_is_abandoned_after_one_round(probed):
    table, history, d = probed
    history = [*history, _probe_round(table, history, d.k, gain_factor=0.3)]
    back = get_policy("adaptive").select(ctx(table, history))
    assert back.k == 2
    assert back.explanation["reason"].startswith("abandon 2 -> 4 after one round: gained")
    # the failed size stays blocked: no growth to 4 or more for the next rounds
    history.append(PastRound(len(history) + 1, 2, history[-1].accuracy + 0.01, 70.0))
    for _ in range(6):
        d = get_policy("adaptive").select(ctx(table, history))
        assert d.k < 4
        assert d.explanation["growth_cap"] == 3
        history.append(PastRound(len(history) + 1, d.k, history[-1].accuracy + 0.01, 70.0))


def test_failed_trials_block_growth_with_a_doubling_cool_down():
    ks = [2, 2, 2, 2, 4, 4, 2]  # 2 -> 4 undone after 2 rounds: failed, back at index 6
    assert last_growth(ks) is None
    assert last_growth([2, 2, 4, 4]) == (2, 2, 4)
    assert failed_trials(ks, hold=2) == [(4, 6)]
    assert failed_trials([2, 4, 4, 4, 2], hold=2) == []  # held 3 rounds: not a failed probe
    assert growth_cap(ks, 2, backoff=10, n=40) == 3
    assert growth_cap(ks + [2] * 9, 2, backoff=10, n=40) == 40  # 10 rounds after index 6
    twice = ks + [2] * 9 + [4, 2]  # the second failure at 4 blocks for 20 rounds
    assert growth_cap(twice + [2] * 18, 2, backoff=10, n=40) == 3
    assert growth_cap(twice + [2] * 19, 2, backoff=10, n=40) == 40
