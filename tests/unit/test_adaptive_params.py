"""The `adaptive` policy's time model (the straggler, other work models), its parameters
(bad values named), purity (same context, same decision) and its explanations.

The sites, gains and run loop are adaptive_loop.py's: how the gain depends on k is chosen
there, the policy has to learn it.
"""

from __future__ import annotations

import json
import math

import pytest

from powertrip.core.policies import REGISTRY, Context, PolicyError, SiteTable, get_policy
from powertrip.core.policies.base import PastRound
from powertrip.core.timemodel import prefix_round_time_estimates
from tests.unit.adaptive_loop import (
    GB,
    RISING,
    TAU,
    clock_time,
    ctx,
    gentle_table,
    history_at,
    simulate,
)

# ---- time model, parameters, purity -----------------------------------------------------


def test_the_round_time_sees_the_straggler_whatever_the_estimator():
    """Site 1 is slow but near: the paper's tau/mean(p) + max comm hides it, the clock's
    max(tau/p_i + comm_i) does not."""
    power = [1.0, 0.2, 1.0, 1.0]
    distance = [100.0, 50.0, 200.0, 300.0]
    table = SiteTable.build(
        ids=[f"site-{i}" for i in range(4)],
        power=power,
        distance_miles=distance,
        latency_s=[d / 124_188 for d in distance],
        bandwidth_bytes_per_s=[1e10] * 4,
        update_size_bytes=0.01 * GB,
        directions=2,
    )
    for estimator in ("paper", "clock"):
        d = get_policy("adaptive").select(
            Context(
                table=table,
                update_size_bytes=0.01 * GB,
                tau_s=TAU,
                estimator=estimator,
                params={"k0": 4},
            )  # fmt: skip
        )
        assert d.k == 4
        assert d.predicted_round_time_s == pytest.approx(clock_time(table, d.order) - 1.0)
        assert d.predicted_round_time_s > TAU / 0.2


def test_the_estimator_it_is_built_on_is_declared_and_named_in_each_decision():
    """Its probes are checked against measured rounds, which the clock charges: the
    request's estimator (shared with the shadows) is not used, and the policy says so."""
    policy = REGISTRY["adaptive"]
    assert policy.estimator == "clock"
    assert all(cls.estimator is None for name, cls in REGISTRY.items() if name != "adaptive")
    for estimator in ("paper", "clock"):
        d = get_policy("adaptive").select(ctx(gentle_table(), estimator=estimator))
        assert d.explanation["estimator"] == "clock"


def test_other_work_models_use_their_own_estimate():
    table = gentle_table()
    for work_model in ("data-parallel", "power-split"):
        d = get_policy("adaptive").select(ctx(table, work_model=work_model))
        expected = prefix_round_time_estimates(
            TAU, table.power[d.order], table.comm_s[d.order], "clock", work_model
        )[-1]
        assert d.predicted_round_time_s == pytest.approx(expected)
        assert d.explanation["work_model"] == work_model


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("k0", -1),
        ("k0", 2.5),
        ("fit_rounds", 2),
        ("half_life", 0),
        ("probe_factor", 0.5),
        ("probe_pct", 101),
        ("probe_cost", -0.1),
        ("probe_rounds", 0),
        ("probe_margin", 0),
        ("probe_backoff", 1.5),
        ("stall_rounds", 1.5),
        ("ceiling_rounds", 3),
        ("m_ref_gb", 0),
        # options that lost to the rule as it is, deleted (commit e2b9ee1 has them)
        ("block_se", 1),
        ("shrink_in_fit", 1),
        ("down_probe", 1),
        ("min_probe", 1),
        ("level_se", 1),
        ("window", 3),  # powertrip's, not adaptive's
    ],
)
def test_bad_params_name_the_parameter(name, value):
    with pytest.raises(PolicyError, match=name):
        get_policy("adaptive").select(ctx(gentle_table(), params={name: value}))


def test_same_context_same_decision():
    history = history_at([2, 2, 2, 2, 4, 4, 6, 8])
    first = get_policy("adaptive").select(ctx(gentle_table(), history))
    again = get_policy("adaptive").select(ctx(gentle_table(), history))
    assert first.order.tolist() == again.order.tolist()
    assert first.explanation == again.explanation
    assert first.predicted_round_time_s == again.predicted_round_time_s


def test_registered_after_powertrip_and_explains_itself():
    names = list(REGISTRY)
    assert names.index("adaptive") == names.index("powertrip") + 1
    d = get_policy("adaptive").select(ctx(gentle_table(), history_at([2] * 6)))
    e = d.explanation
    assert e["rule"] == "adaptive" and e["chosen"] == d.k
    assert isinstance(e["reason"], str) and e["fit"]["points"] == 5
    assert {"bounds", "growth_cap", "failed_trials", "candidates", "efficiencies"} <= set(e)


def test_explanations_are_strict_json_and_a_missing_accuracy_is_skipped():
    _, decisions, _ = simulate(RISING, 25)
    for d in decisions:
        json.dumps(d.explanation, allow_nan=False)
    history = history_at([2, 2, 2, 2, 2, 2])
    history[3] = PastRound(4, 2, math.nan, history[3].round_time_s)
    d = get_policy("adaptive").select(ctx(gentle_table(), history))
    assert d.explanation["fit"]["points"] == 3  # rounds 4 and 5 had no gain to fit
    json.dumps(d.explanation, allow_nan=False)
