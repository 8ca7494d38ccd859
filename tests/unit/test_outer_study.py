"""The outer-step study (reproduction/paper/outer_study.py): its set-ups are the base
set-ups with the Nesterov step (and int8 deltas) and nothing else changed, the grid runs
only the static k it is given, and the grid rows pair each point with FedAvg by seed."""

from __future__ import annotations

import pytest

from powertrip.core.config import RunConfig
from reproduction.paper import VARIANTS, outer_study
from reproduction.paper.data import UNIFORM


def test_a_study_set_up_is_its_base_with_the_outer_step_and_encoding_only():
    v = outer_study.nesterov(UNIFORM, 0.7, 0.9, int8=True)
    assert v.name == "uniform-nesterov-lr0.7-m0.9-int8"
    assert v.overrides == {
        **UNIFORM.overrides,
        "outer_optimizer": "nesterov",
        "outer_lr": 0.7,
        "outer_momentum": 0.9,
        "delta_encoding": "int8",
    }
    RunConfig().with_values(dict(v.overrides), "test").validate()  # settings that exist


def test_every_grid_point_is_a_registered_set_up_that_runs_a_static_sweep_only():
    for base in outer_study.BASES:
        for (lr, mu), v in zip(outer_study.GRID, outer_study.GRID_VARIANTS[base.name], strict=True):
            assert VARIANTS[v.name] == v
            assert (v.overrides["outer_lr"], v.overrides["outer_momentum"]) == (lr, mu)
            if all(v.name != h.name for h in outer_study.HELDOUT_VARIANTS.get(base.name, ())):
                assert outer_study.SUITE.arms_of(v.name) == ("sweep",)


def test_without_runs_the_grid_rows_say_not_run(tmp_path):
    from reproduction.paper.data import VariantData

    train = VariantData("uniform", "u", ["static-k3"], all_seeds=[0, 1, 2, 3, 4])
    train.kstar = 3
    rows = outer_study.claims({"uniform/train": train}, {})
    assert len(rows) == len(outer_study.GRID)
    assert all(r.ours == "not run" and r.seeds == 0 for r in rows)
    assert outer_study.grid_means({"uniform/train": train}, "uniform") == {}


@pytest.mark.parametrize("base", ["uniform", "trace"])
def test_the_grid_is_fixed_before_the_runs(base):
    assert outer_study.GRID == ((0.35, 0.5), (0.35, 0.9), (0.7, 0.5), (0.7, 0.9))
    assert len(outer_study.GRID_VARIANTS[base]) == 4
