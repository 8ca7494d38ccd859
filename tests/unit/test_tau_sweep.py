"""k* against tau (reproduction/paper/tau_sweep.py): a static run re-clocked at another tau,
checked against its own recorded round times first."""

from __future__ import annotations

from pathlib import Path

import pytest

from powertrip.app.report.result import RunResult
from powertrip.core.timemodel import comm_time_s
from reproduction.paper import tau_sweep as T

SITES = [
    {"site_id": "a", "power_fraction": 0.5, "distance_miles": 100.0, "bandwidth_bytes_per_s": 1e9},
    {"site_id": "b", "power_fraction": 0.1, "distance_miles": 900.0, "bandwidth_bytes_per_s": 5e7},
]  # fmt: skip
M = 1.5e9


def run(tau: float = 60.0, accuracies=(0.2, 0.5, 0.6), fudge: float = 0.0) -> RunResult:
    # site b is the straggler at any tau: tau / 0.1 + its transfer of 30 s
    t = tau / 0.1 + comm_time_s(900.0, 5e7, M) + 1.0
    rounds = [
        {"round": i, "sites": ["a", "b"], "aggregation_s": 1.0, "round_time_s": t + fudge,
         "accuracy": acc}
        for i, acc in enumerate(accuracies, 1)
    ]  # fmt: skip
    config = {"tau_s": tau, "update_size_gb": 1.5, "comm_directions": 1, "target_accuracy": 0.45}
    return RunResult(Path("/runs/x"), config, rounds, {"sites": SITES})


def test_reclocking_reproduces_the_recorded_rounds_then_charges_the_new_tau():
    r = run()
    b = comm_time_s(900.0, 5e7, M)
    assert T.round_times(r, 60.0) == pytest.approx([600 + b + 1.0] * 3)
    at_10 = T.reclock(r, 10.0)
    assert at_10.reached and at_10.value == pytest.approx(2 * (100 + b + 1.0))  # round 2: 0.5


def test_a_run_the_clock_charged_differently_is_refused():
    with pytest.raises(T.ReclockError, match="differ from rounds.csv"):
        T.reclock(run(fudge=0.5), 10.0)


def test_a_run_that_missed_the_target_gives_a_lower_bound():
    sample = T.reclock(run(accuracies=(0.1, 0.2)), 30.0)
    assert not sample.reached
    assert sample.value == pytest.approx(2 * (300 + comm_time_s(900.0, 5e7, M) + 1.0))


def test_the_committed_uniform_sweep_reclocks_exactly_at_its_own_tau():
    """Every finished static-k run of results/reproduce's uniform set-up: the check inside
    reclock() holds (the clock that made them is the one re-clocking them)."""
    from reproduction.paper.data import load_variant

    out = Path(__file__).parents[2] / "results" / "reproduce"
    grid = [1, 3, 10, 100]
    v = load_variant(out, "uniform", "u", [f"static-k{k}" for k in grid], [0, 1], grid)
    if not v.seeds:
        pytest.skip("no committed uniform sweep")
    at_60 = T.reclocked(v, 60.0)
    for arm, by_seed in v.runs.items():
        for seed, r in by_seed.items():
            mine = at_60.runs[arm][seed].summary
            assert (mine["time_to_target_s"] is None) == (r.time_to_target_s is None)
            if r.time_to_target_s is not None:
                assert mine["time_to_target_s"] == pytest.approx(r.time_to_target_s, abs=1e-5)
