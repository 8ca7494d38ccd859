"""`adaptive`'s `ceiling_rounds` option: the bound on where a set of sites levels off, the
floor it puts under k, and the option in the simulated run loop where the answer is known."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from powertrip.app.paper.plateau_draws import arm_name, arm_policy, read_rows
from powertrip.app.paper.plateau_setup import plateau_config, replay
from powertrip.core.policies import PolicyError, get_policy
from powertrip.core.policies.adaptive import Adaptive, probe_step
from powertrip.core.policies.base import PastRound
from powertrip.core.policies.ceiling import ceiling_floor, ceiling_upper_bound
from powertrip.core.policies.feedback import stall_floor
from tests.unit.test_adaptive import clock_time, costly_next_site_table, ctx, run_loop

RESULTS = Path(__file__).resolve().parents[2] / "results"
PLATEAU = RESULTS / "plateau-policies"
REPRODUCE = RESULTS / "reproduce" / "runs"


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


def test_the_option_is_off_by_default_and_a_bad_value_names_it():
    table = costly_next_site_table()  # plain adaptive holds 2 sites here (no probe fits)
    accuracies, ks = levelled(40, k=2)
    history = [
        PastRound(r, k, a, clock_time(table, np.arange(k)))
        for r, (a, k) in enumerate(zip(accuracies, ks, strict=True), 1)
    ]
    plain = get_policy("adaptive").select(ctx(table, history, target_accuracy=0.62))
    assert plain.k == 2 and "ceiling_floor" not in plain.explanation
    raised = get_policy("adaptive").select(
        ctx(table, history, target_accuracy=0.62, params={"ceiling_rounds": 30})
    )
    assert raised.explanation["ceiling_floor"] == 4  # 2 + the probe step (5 % of 40)
    assert raised.k == 4 and "raised to the floor k=4" in raised.explanation["reason"]
    with pytest.raises(PolicyError, match="ceiling_rounds must be 0 .off. or a whole number >= 5"):
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


def test_the_option_ends_a_set_that_creeps_towards_a_ceiling_below_the_target():
    # the next site costs 20 % (> probe_cost): plain adaptive never measures a slope, and a
    # set that keeps creeping up sets a new best every round, so the stall floor never rises
    table = costly_next_site_table()
    best_static = min(static_seconds(table, 0.6, k) for k in range(1, 41))
    stall = {"stall_rounds": 20}
    history, _, reached = run_loop(creeping, 150, params=stall, table=table, until=0.6, target=0.6)
    assert reached == math.inf and {h.k for h in history} == {2}
    both = {**stall, "ceiling_rounds": 30}
    history, _, reached = run_loop(creeping, 150, params=both, table=table, until=0.6, target=0.6)
    assert reached <= 1.05 * best_static
    assert history[29].k == 2 and history[30].k > 2  # the floor rose after 30 rounds at 2


def test_the_option_leaves_a_run_alone_whose_set_can_reach_the_target():
    table = costly_next_site_table()
    stall = {"stall_rounds": 20}
    both = {**stall, "ceiling_rounds": 30}
    plain = run_loop(creeping, 120, params=stall, table=table, target=0.45)[0]
    assert run_loop(creeping, 120, params=both, table=table, target=0.45)[0] == plain


def test_on_the_committed_stall_run_of_seed_8_the_floor_rises_at_round_58():
    """The run at 62 % that held 5 sites for 306 rounds (call3): with the option the floor
    rises to 10 when 53 rounds at 5 sites allow a ceiling of at most 0.619."""
    path = PLATEAU / "call3" / "adaptive-stall_rounds20-seed8.csv"
    arm, seed = arm_name(path)
    policy, params = arm_policy(arm)
    rows = read_rows(path)[:60]
    decisions = replay(plateau_config(policy, {**params, "ceiling_rounds": 30}, seed), rows)
    ks = [d.k for d in decisions]
    assert ks[:57] == [int(r["k"]) for r in rows[:57]]
    assert ks[57] == 10 and int(rows[57]["k"]) == 5
    assert 0.6 < decisions[57].explanation["ceiling_bound"] < 0.62


def test_at_45_percent_neither_floor_would_have_changed_a_committed_run():
    """Both floors only raise k, so a run whose every next k is at or above the floors its
    history gives is also the run with them, decision for decision. At the 45 % target no
    committed `adaptive` run (every set-up and option arm of results/reproduce/runs but
    down_probe's, whose runs came later) met a set levelling off below the target in 30
    rounds, or 20 rounds without a new best: so there `block_se=1` with `ceiling_rounds=30`
    and `stall_rounds=20` is the block_se arm. The down_probe arm (block_se=1, down_probe=1)
    is not the floors' arm at 45 %: after its probe 5 -> 4 and a shrink to one site, uniform
    seed 8 held one site for 30 rounds, and the ceiling floor would have raised it."""
    runs = sorted(REPRODUCE.glob("*/seed*/adaptive/rounds.csv"))
    checked = 0
    for path in runs:
        config = yaml.safe_load((path.parent / "run-config.yaml").read_text())
        if not config.get("target_accuracy"):
            continue  # the LM runs: a perplexity target
        if (config.get("policy_params") or {}).get("down_probe"):
            continue  # down_probe's arm: its uniform seed 8 met the ceiling floor (round 37)
        rows = read_rows(path)
        accuracies, ks = [float(r["accuracy"]) for r in rows], [int(r["k"]) for r in rows]
        n = int(config["num_sites"])
        step = probe_step({**Adaptive.default_params, **(config.get("policy_params") or {})}, n)
        for r in range(1, len(rows)):
            floor, _ = ceiling_floor(accuracies[:r], ks[:r], config["target_accuracy"], 30, step, n)
            stall, _ = stall_floor(accuracies[:r], ks[:r], 20, step, n)
            assert max(floor, stall) <= ks[r], f"{path}: round {r + 1}"
        checked += 1
    assert checked >= 100  # every set-up's runs, options included
