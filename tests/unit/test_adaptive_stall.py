"""The `adaptive` policy's stall floor (`stall_rounds`): a levelled-off k is raised, and the
floors leave runs that keep improving alone.

The sites, gains and run loop are adaptive_loop.py's: how the gain depends on k is chosen
there, the policy has to learn it.
"""

from __future__ import annotations

import numpy as np

from powertrip.core.policies import get_policy
from powertrip.core.policies.base import PastRound
from tests.unit.adaptive_loop import FLAT, RISING, clock_time, ctx, gentle_table, simulate

# ---- stall_rounds: a floor once the accuracy has levelled off ------------------------------


def test_stall_rounds_raises_a_levelled_off_k():
    table = gentle_table()
    flat = [0.30, 0.31, 0.31, 0.31, 0.30, 0.31]  # no new best after round 2
    history = [PastRound(r, 2, a, clock_time(table, np.arange(2))) for r, a in enumerate(flat, 1)]
    plain = get_policy("adaptive").select(ctx(table, history, params={"stall_rounds": 0}))
    assert plain.k == 2 and "stall_floor" not in plain.explanation
    default = get_policy("adaptive").select(ctx(table, history))
    assert default.k == 2 and default.explanation["stall_floor"] == 0  # 20 rounds by default
    # rounds 3-5 did not beat 0.31: after 3 such rounds the floor is 2 + the probe step (2)
    raised = get_policy("adaptive").select(ctx(table, history, params={"stall_rounds": 3}))
    assert raised.k == 4 and raised.explanation["stall_floor"] == 4
    assert "raised to the floor k=4" in raised.explanation["reason"]
    assert raised.explanation["rounds_without_new_best"] == 1
    # one stalled round short: the floor is 0 and the decision is the plain one
    short = get_policy("adaptive").select(ctx(table, history[:4], params={"stall_rounds": 3}))
    assert short.k == get_policy("adaptive").select(ctx(table, history[:4])).k
    assert short.explanation["stall_floor"] == 0


def test_the_floors_leave_runs_that_keep_improving_alone():
    # every round of these runs sets a new best: neither floor binds
    off = {"stall_rounds": 0, "ceiling_rounds": 0}
    for gain in (RISING, FLAT):
        assert simulate(gain, 40, params={"stall_rounds": 3})[0] == simulate(gain, 40)[0]
        assert simulate(gain, 40)[0] == simulate(gain, 40, params=off)[0]
