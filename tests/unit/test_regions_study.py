"""The regions study's rows that say what its runs show (reproduction/paper/regions_study.py):
where a carbon baseline was cut off, and per seed what the carbon objective changed."""

from __future__ import annotations

from reproduction.paper import regions_study as R
from reproduction.paper.data import VariantData
from tests.unit.paper_runs import _run


def _with(run, **summary):
    run.summary.update(summary)
    return run


def _setup(name: str, runs: dict[str, dict[int, object]]) -> VariantData:
    v = VariantData(name, name, list(runs), seeds=[0, 1])
    v.runs = runs
    return v


def test_a_cut_off_baseline_says_where_it_stopped_and_that_its_k_was_not_swept():
    runs = {
        0: _with(_run("lowcarb", None, 0.5), mean_k=12.0, rounds=4, final_accuracy=0.05),
        1: _with(_run("lowcarb", None, 0.5), mean_k=12.0, rounds=5, final_accuracy=0.23),
    }
    row = R._stopped_row(_setup("regions", {"lowcarb": runs}), "lowcarb")
    assert row.ours == "k 12; 2 of 2 cut off before the target after 4-5 rounds, at 5-23 % accuracy"
    assert row.holds == "no" and "not swept" in row.why


def test_the_carbon_objective_per_seed_counts_the_seeds_it_changed():
    def run(h: float, kg: float):
        return _with(_run("adaptive", h, h), carbon_kg_to_target=kg)

    time_v = _setup("regions", {"adaptive": {0: run(0.3, 2.0), 1: run(0.3, 4.0)}})
    carbon_v = _setup("regions-carbon", {"adaptive": {0: run(0.3, 2.0), 1: run(0.33, 1.0)}})
    row = R._per_seed_row(time_v, carbon_v, "adaptive")
    assert row.ours == (
        "changed the run on 1 of 2 seeds; seed 0: unchanged; seed 1: kg -75%, hours +10%"
    )
    assert "not the run's time to target" in row.why
