"""PowerTrip's previous rule (`rule=feedback`, with its invented parts) on hand-made
histories, kept decision for decision for the ablation, the separable rule
against the decisions it made before the feedback rule existed, and the baselines that the
paper defines against it (static fixed at round 1, highest-power with a dynamic k)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from powertrip.core.policies import Context, SiteTable, get_policy
from powertrip.core.policies.base import PastRound, PolicyError
from powertrip.core.policies.feedback import (
    best_in_window,
    gains_of,
    measured_efficiency,
    projected_gain,
    rounds_below,
    training_phase,
    trend_series,
)
from powertrip.core.policyparams import decode, encode

GB = 1e9
GOLDEN = Path(__file__).parent / "data" / "powertrip_separable_golden.json"


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


def history(ks, accuracies, times) -> tuple[PastRound, ...]:
    return tuple(
        PastRound(i + 1, int(k), float(a), float(t))
        for i, (k, a, t) in enumerate(zip(ks, accuracies, times, strict=True))
    )


#: the previous rule as its stored runs ran it (results/reproduce: rule=feedback, calibrate=1)
FEEDBACK = {"rule": 1.0, "calibrate": 1.0}


def decide(table, hist, policy="powertrip", **params):
    if policy in ("powertrip", "highest-power"):
        params = {**FEEDBACK, **params}
    ctx = Context(table=table, update_size_bytes=1.5 * GB, tau_s=60.0, history=hist, params=params)
    return get_policy(policy).select(ctx)


# ---- the pieces ------------------------------------------------------------------------
def test_measured_efficiency_is_eq5_over_the_window():
    gains = gains_of([0.1, 0.3, 0.35])
    assert gains == pytest.approx([0.1, 0.2, 0.05])
    assert measured_efficiency(gains, np.array([10.0, 20.0, 50.0]), 2) == pytest.approx(0.25 / 70.0)


def test_phase_is_zero_at_the_peak_trend_and_grows_as_gains_decay():
    rising = trend_series(gains_of([0.05, 0.15, 0.30]), 2)
    assert training_phase(rising) == 0.0
    decaying = trend_series(gains_of([0.2, 0.35, 0.40, 0.42]), 2)
    assert decaying[-1] == pytest.approx(0.035)
    assert training_phase(decaying) == pytest.approx(1 - 0.035 / 0.2)  # peak: round 1
    assert training_phase(trend_series(gains_of([0.3, 0.3, 0.3]), 2)) == 1.0  # no gain now


def test_projected_gain_is_the_trend_at_k_cur_and_log_shaped():
    ks = np.array([5, 10, 20])
    assert projected_gain(0.02, 0.0, ks, 5) == pytest.approx([0.02] * 3)  # phase 0: flat
    got = projected_gain(0.02, 0.5, ks, 5)
    assert got[0] == pytest.approx(0.02)
    assert got[2] - got[1] == pytest.approx(got[1] - got[0])  # equal steps per doubling


def test_the_window_looks_past_a_straggler_step_but_must_beat_the_measured_efficiency():
    # a straggler at the 2nd candidate lowers efficiency; the sites after it pay again
    eff = np.array([1.0, 0.8, 0.9, 1.1, 1.05])
    assert best_in_window(eff, measured=0.5) == 3
    assert best_in_window(eff, measured=1.2) == 0  # nothing beats the measured efficiency
    assert best_in_window(np.array([1.0, 1.0, 0.9]), measured=0.1) == 0  # ties: smaller k


# ---- the rule on hand-made histories ---------------------------------------------------
#: gains past their peak (phase > 0), steady round times: efficiency holding up
DECAYING = ([2] * 5, [0.10, 0.25, 0.33, 0.38, 0.42], [100.0] * 5)


def test_efficiency_rising_above_the_measured_one_adds_sites():
    t = flat_table()
    # the latest rounds gained more per second than the window before them
    ks, accs, _ = DECAYING
    d = decide(t, history(ks, accs, [100.0, 100.0, 100.0, 80.0, 60.0]))
    assert d.k > 2
    assert d.explanation["rule"] == "feedback"
    assert d.explanation["reason"].startswith("added")
    assert d.k <= 2 + d.explanation["window"]


def test_efficiency_falling_below_the_measured_one_holds():
    t = flat_table()
    # same accuracy, but the latest round took far longer: realised efficiency dropped
    ks, accs, _ = DECAYING
    d = decide(t, history(ks, accs, [100.0, 100.0, 100.0, 100.0, 300.0]), patience=0)
    assert d.k == 2
    assert "hold" in d.explanation["reason"]


def test_gains_at_their_peak_hold_k_bottom_up():
    # accuracy still accelerating: phase 0, more sites are projected to buy nothing yet
    t = flat_table()
    d = decide(t, history([2, 2, 2], [0.05, 0.15, 0.30], [100.0] * 3))
    assert d.k == 2 and d.explanation["phase"] == 0.0


def test_below_the_measured_efficiency_for_patience_rounds_shrinks():
    t = flat_table(slow_from=6)
    ks = [8] * 7
    accs = [0.10, 0.20, 0.30, 0.31, 0.315, 0.318, 0.319]  # four rounds far below
    times = [500.0] * 7
    assert rounds_below(gains_of(accs), np.array(times), 3) == 4
    held = decide(t, history(ks[:6], accs[:6], times[:6]), patience=4, window=4)
    assert held.k >= 8 and not held.explanation["may_shrink"]  # patience not exhausted
    shrunk = decide(t, history(ks, accs, times), patience=4, window=4)
    assert shrunk.k < 8
    assert shrunk.k == 6  # dropping the two slow sites is the best below 8
    assert "shrink" in shrunk.explanation["reason"]


def _run(step, rounds: int = 60, **params) -> list[int]:
    """Drive the policy through a made-up training run: `step(acc, k)` is one round's accuracy
    gain with k sites, and each round takes what the clock charges its sites."""
    rng = np.random.default_rng(3)
    n = 100
    d = np.sort(rng.uniform(100, 10_000, n))
    t = SiteTable.build(
        ids=[f"site-{i:03d}" for i in range(n)],
        power=rng.uniform(0.1, 1.0, n),
        distance_miles=d,
        latency_s=d / 124_188,
        bandwidth_bytes_per_s=1.25e9 * 100 / d,
        update_size_bytes=1.5 * GB,
        directions=1,
    )
    clock = Context(table=t, update_size_bytes=1.5 * GB, tau_s=60.0, estimator="clock")
    hist: list[PastRound] = []
    acc, ks = 0.0, []
    for r in range(1, rounds + 1):
        dec = decide(t, tuple(hist), **params)
        ks.append(dec.k)
        acc += step(acc, dec.k)
        measured = float(clock.round_time_estimates(dec.order)[-1])
        hist.append(PastRound(r, dec.k, acc, measured))
    return ks


def test_k_grows_bottom_up_when_more_sites_pay_and_separable_freezes():
    """Where more sites raise the per-round gain (sqrt(k)), the feedback rule keeps adding
    sites through training (Fig. 10's shape); the separable rule settles and stays."""
    ks = _run(lambda acc, k: (0.9 - acc) * 0.02 * math.sqrt(k))
    assert ks[0] == 5
    assert ks[-1] >= 3 * ks[0]
    separable = _run(lambda acc, k: (0.9 - acc) * 0.02 * math.sqrt(k), gain=1.0)
    assert len(set(separable[5:])) == 1


def test_an_addition_that_lowers_the_measured_efficiency_is_taken_back():
    t = flat_table(40, slow_from=6)  # sites 6.. are stragglers: adding them costs time
    # 5 rounds at k = 4, then 3 rounds at k = 8 that gained no faster but took 4x as long
    ks = [4] * 5 + [8] * 3
    accs = [0.10, 0.20, 0.27, 0.32, 0.36, 0.39, 0.42, 0.45]
    times = [100.0] * 5 + [400.0] * 3
    d = decide(t, history(ks, accs, times))
    assert d.k == 4
    assert d.explanation["reason"].startswith("adding sites 4 -> 8 lowered")
    # while the addition is still being measured, k is held
    held = decide(t, history(ks[:7], accs[:7], times[:7]))
    assert held.k == 8 and held.explanation["reason"].startswith("measuring the last addition")
    # an addition whose rounds gained faster per second than those before it is kept
    faster = [*accs[:5], 0.42, 0.48, 0.54]
    kept = decide(t, history(ks, faster, [100.0] * 8))
    assert kept.k >= 8
    # and a taken-back size is not tried again for a while
    later = decide(t, history([*ks, 4], [*accs, 0.47], [*times, 100.0]))
    assert later.explanation["failed_additions"] == [8]
    assert later.k < 8


def test_calibration_puts_the_estimate_in_measured_units():
    t = flat_table()
    ks, accs, times = DECAYING
    d = decide(t, history(ks, accs, times))
    # the estimate at k_cur, scaled, is the last measured round time
    assert d.explanation["times"][0] == pytest.approx(100.0, rel=1e-5)
    raw = decide(t, history(ks, accs, times), calibrate=0.0)
    assert raw.explanation["time_scale"] == 1.0
    assert raw.explanation["times"][0] == pytest.approx(
        100.0 / d.explanation["time_scale"], rel=1e-5
    )


# ---- the separable rule, decision for decision ------------------------------------------
def _golden_case(seed: int) -> dict:
    """The seeded contexts the golden file was recorded on (same generator, do not edit)."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([6, 20, 100]))
    power = rng.uniform(0.1, 1.0, n)
    dist = rng.uniform(100, 10000, n)
    bw = 1.25e9 * 100 / dist
    alive = rng.uniform(size=n) > 0.1
    alive[0] = True
    rounds = int(rng.integers(0, 12))
    acc = np.clip(np.cumsum(rng.normal(0.03, 0.03, rounds)), 0, 1)
    ks = rng.integers(1, n + 1, rounds)
    times = rng.uniform(100, 1000, rounds)
    params = {}
    if rng.uniform() < 0.5:
        params["patience"] = float(rng.integers(0, 4))
    if rng.uniform() < 0.5:
        params["window"] = float(rng.integers(1, 6))
    if rng.uniform() < 0.3:
        params["k0"] = float(rng.integers(1, 6))
    if rng.uniform() < 0.3:
        params["trend_rounds"] = float(rng.integers(1, 5))
    m = float(rng.choice([1e9, 1.5e9, 2e9]))
    estimator = str(rng.choice(["paper", "clock"]))
    target = float(rng.choice([0.45, 2.0]))
    table = SiteTable.build(
        [f"site-{i:03d}" for i in range(n)], power, dist, dist / 124188, bw, m, 2, alive
    )
    hist = tuple(
        PastRound(i + 1, int(k), float(a), float(tt))
        for i, (k, a, tt) in enumerate(zip(ks, acc, times, strict=True))
    )
    return {
        "table": table,
        "m": m,
        "hist": hist,
        "target": target,
        "estimator": estimator,
        "params": params,
    }


def test_separable_reproduces_the_previous_rules_decisions_exactly():
    recorded = json.loads(GOLDEN.read_text())
    assert len(recorded) == 60
    for item in recorded:
        c = _golden_case(item["seed"])
        ctx = Context(
            c["table"],
            c["m"],
            60.0,
            c["hist"],
            c["target"],
            estimator=c["estimator"],
            params={**c["params"], "rule": 1.0, "gain": 1.0},
        )
        d = get_policy("powertrip").select(ctx)
        got = {
            "order": [int(i) for i in d.order],
            "predicted": d.predicted_round_time_s,
            # recorded as Decision.stop, which the target-reached prefix of the reason
            # replaced (nothing read the flag: the aggregator owns the stop decision)
            "stop": d.explanation["reason"].startswith("target accuracy"),
            "reason": d.explanation["reason"],
            "chosen": d.explanation["chosen"],
        }
        assert got == item["decision"], f"seed {item['seed']}"


# ---- named parameters and the baselines ------------------------------------------------
def test_gain_is_named_on_the_command_line_and_checked():
    assert encode("gain", "separable") == 1.0 and encode("gain", "feedback") == 0.0
    assert decode("gain", 1.0) == "separable"
    with pytest.raises(ValueError, match="feedback, separable"):
        encode("gain", "magic")
    with pytest.raises(PolicyError, match="gain"):
        decide(flat_table(), (), gain=2.0)


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
