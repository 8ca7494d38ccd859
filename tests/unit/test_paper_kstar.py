"""reproduction.paper's k* (the lowest mean time among the ks that always reach, else the
best bound) and a run cut off by the budget, on hand-made runs (no training)."""

from __future__ import annotations

from powertrip.app.report import claims as C
from reproduction.paper.data import sample_of
from tests.unit.paper_runs import _run, _variant


def test_k_star_is_the_lowest_mean_among_ks_that_always_reach():
    v = _variant(
        {
            "static-k10": [1.5, 1.6, 1.4],
            "static-k20": [1.0, 1.1, None],  # fastest on average but missed in one seed
            "static-k70": [1.2, 1.3, 1.25],
        }
    )
    assert v.kstar == 70
    assert [s.value / 3600 for s in v.samples("static-k*")] == [1.2, 1.3, 1.25]


def test_k_star_falls_back_to_the_best_bound_when_every_k_was_cut_off():
    v = _variant({"static-k10": [None, None, None], "static-k20": [1.0, None, 1.1]})
    # _run gives a cut-off run 9 h; k20's mean bound (1.0 + 9 + 1.1) / 3 is the lower one
    assert v.kstar == 20 and v.kstar_censored
    assert not all(s.reached for s in v.samples("static-k*"))


def test_a_run_cut_off_by_the_budget_is_bounded_by_the_budget():
    run = _run("all", None, 0.0)  # stopped before its first round would pass the cap
    run.summary["stopped_reason"] = "time_budget"
    run.config["max_sim_hours"] = 1.5
    assert sample_of(run) == C.Sample(1.5 * 3600, False)
    run.summary["stopped_reason"] = "max_rounds"
    assert sample_of(run) == C.Sample(0.0, False)
