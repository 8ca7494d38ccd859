"""Hand-made sites, gains and a simulated run loop for the tests of the `adaptive` policy
(test_adaptive_*.py, test_floors.py), where the right answer is known: how the gain depends
on k is chosen here, the policy has to learn it."""

from __future__ import annotations

import math

import numpy as np

from powertrip.core.policies import Context, SiteTable, get_policy
from powertrip.core.policies.base import PastRound
from powertrip.core.timemodel import prefix_round_time_estimates

GB = 1e9
TAU = 60.0
AGGREGATION_S = 1.0  # what the clock adds to every round beyond the estimate
CEILING = 0.9


def gentle_table(n: int = 40) -> SiteTable:
    """Sites ranked by index (power falls, distance rises), so T(k) rises gently with k:
    each extra site costs a little time, none is free."""
    return table_of(1.0 - 0.012 * np.arange(n))


def table_of(power: np.ndarray) -> SiteTable:
    """Sites of these powers, 500 + i miles away on 1 GB/s links."""
    n = len(power)
    distance = 500.0 + np.arange(n)
    return SiteTable.build(
        ids=[f"site-{i:03d}" for i in range(n)],
        power=power,
        distance_miles=distance,
        latency_s=distance / 124_188,
        bandwidth_bytes_per_s=np.full(n, 1e9),
        update_size_bytes=1.5 * GB,
        directions=2,
    )


def ctx(table, history=(), **kw) -> Context:
    return Context(table=table, update_size_bytes=1.5 * GB, tau_s=TAU, history=tuple(history), **kw)


def clock_time(table: SiteTable, order: np.ndarray, work_model: str = "local-steps") -> float:
    """What the simulated clock charges for a round of these sites."""
    estimates = prefix_round_time_estimates(
        TAU, table.power[order], table.comm_s[order], "clock", work_model
    )
    return float(estimates[-1]) + AGGREGATION_S


def saturating(rate):
    """A round's gain: the share rate(k) of what is left below the ceiling."""
    return lambda k, accuracy: (CEILING - accuracy) * min(0.9, rate(k))


FLAT = saturating(lambda k: 0.05)
RISING = saturating(lambda k: 0.03 * (1 + 0.5 * math.log(k)))


def simulate(gain, rounds, policy="adaptive", params=None, table=None, until=None, **noisy):
    """The run loop in miniature: decide, charge the clock, gain, record. Returns the k of
    every round, the decisions and the simulated time at which `until` was reached."""
    history, decisions, reached = run_loop(gain, rounds, policy, params, table, until, **noisy)
    return [h.k for h in history], decisions, reached


def run_loop(
    gain,
    rounds,
    policy="adaptive",
    params=None,
    table=None,
    until=None,
    noise=0.0,
    seed=0,
    target=math.inf,
):
    """`simulate`'s loop, returning the history the policy saw. With `noise`, every
    recorded accuracy is the true one plus N(0, noise) (an evaluation's error, seeded); the
    training, and `until`, follow the true accuracy. `target` is the run's target as the
    policy sees it (the loop does not stop there)."""
    table = table or gentle_table()
    rng = np.random.default_rng(seed)
    history: list[PastRound] = []
    accuracy, clock, reached = 0.0, 0.0, math.inf
    decisions = []
    for r in range(1, rounds + 1):
        d = get_policy(policy).select(
            ctx(table, history, round=r, params=params or {}, target_accuracy=target)
        )
        accuracy += gain(d.k, accuracy)
        seconds = clock_time(table, d.order)
        clock += seconds
        if until is not None and accuracy >= until and reached == math.inf:
            reached = clock
        measured = accuracy + rng.normal(0.0, noise) if noise else accuracy
        history.append(PastRound(r, d.k, measured, seconds))
        decisions.append(d)
    return history, decisions, reached


def history_at(ks, gain=RISING, table=None) -> list[PastRound]:
    """Rounds run at the given k, gains and times as the simulated clock gives them."""
    table = table or gentle_table()
    out, accuracy = [], 0.0
    for r, k in enumerate(ks, start=1):
        accuracy += gain(k, accuracy)
        out.append(PastRound(r, k, accuracy, clock_time(table, np.arange(k))))
    return out
