"""The outer-step study (reproduction/paper/outer_study.py, its grids outer_grid.py): its
set-ups are the base set-ups with the Nesterov step (and int8 deltas), or FedAvgM's, and
nothing else changed, the grid runs only the static k it is given, the grid rows pair each
point with FedAvg by seed, the chosen point, recomputed from the committed runs, is the
product's default, and the tuned FedAvg (FedAvgM) has a grid as large."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powertrip.core.config import RunConfig
from powertrip.core.outer import OUTER_LR, OUTER_MOMENTUM
from reproduction.paper import VARIANTS, outer_grid, outer_study
from reproduction.paper.data import UNIFORM

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_fedavgm_set_up_is_its_base_with_the_outer_step_only():
    v = outer_grid.fedavgm(UNIFORM, 1.0, 0.9)
    assert v.name == "uniform-fedavgm-lr1-m0.9"
    assert v.overrides == {
        **UNIFORM.overrides,
        "outer_optimizer": "fedavgm",
        "outer_lr": 1.0,
        "outer_momentum": 0.9,
    }
    RunConfig().with_values(dict(v.overrides), "test").validate()  # settings that exist


def test_the_fedavgm_grid_is_as_large_as_nesterovs_and_its_points_run_a_static_sweep_only():
    """The tuned FedAvg gets as many points as Nesterov, on the same seeds and static k*."""
    assert len(outer_grid.FEDAVGM_GRID) == len(outer_study.GRID)
    assert len(set(outer_grid.FEDAVGM_GRID)) == len(outer_grid.FEDAVGM_GRID)
    for base in outer_study.BASES:
        variants = outer_study.FEDAVGM_VARIANTS[base.name]
        for (lr, mu), v in zip(outer_grid.FEDAVGM_GRID, variants, strict=True):
            assert VARIANTS[v.name] == v
            assert v.overrides["outer_optimizer"] == "fedavgm"
            assert (v.overrides["outer_lr"], v.overrides["outer_momentum"]) == (lr, mu)
            assert outer_study.SUITE.arms_of(v.name) == ("sweep",)
            assert v.name in outer_study.SUITE.variants


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
    # each grid's points, the chosen Nesterov point, and it against the chosen FedAvgM point
    assert len(rows) == len(outer_study.GRID) + 1 + len(outer_grid.FEDAVGM_GRID) + 1
    assert all(r.ours == "not run" and r.seeds == 0 for r in rows)
    assert sum("FedAvgM (lr" in r.claim for r in rows) == len(outer_grid.FEDAVGM_GRID)
    for optimizer in ("nesterov", "fedavgm"):
        assert outer_study.grid_means({"uniform/train": train}, "uniform", optimizer) == {}
        assert outer_study.chosen({"uniform/train": train}, "uniform", optimizer) is None


def _committed() -> dict:
    out = ROOT / "results" / "reproduce"
    return outer_study.load(out, json.loads((out / "reproduce.json").read_text()))


@pytest.mark.parametrize("base", ["uniform", "trace"])
def test_the_committed_grid_chooses_the_products_outer_step(base):
    """The chosen point, recomputed from results/: the lowest mean time to target against
    FedAvg at static k* over seeds 0-4. The product's default and the settings table must be
    it, and the held-out runs were made under it."""
    d = _committed()
    means = outer_study.grid_means(d, base)
    assert set(means) == set(outer_study.GRID)  # every point finished on every training seed
    point = outer_study.chosen(d, base)
    assert point == min(means, key=means.__getitem__)
    assert point == (OUTER_LR, OUTER_MOMENTUM) == outer_study.PRODUCT
    defaults = RunConfig()
    assert (defaults.outer_optimizer, defaults.outer_lr, defaults.outer_momentum) == (
        "nesterov",
        *point,
    )
    fp32, _ = outer_study.HELDOUT_VARIANTS[base]
    assert (fp32.overrides["outer_lr"], fp32.overrides["outer_momentum"]) == point
    row = next(r for r in outer_study.claims(d, {}) if "outer step chosen" in r.claim)
    assert row.holds == "yes" and "the best may lie outside the grid" in row.ours


def test_a_winner_at_the_grids_corner_is_said_to_be_there():
    assert outer_study.edges((0.7, 0.9)) == ["the largest lr 0.7", "the largest momentum 0.9"]
    assert outer_study.edges((0.35, 0.5)) == ["the smallest lr 0.35", "the smallest momentum 0.5"]
    assert outer_study.effective_step(0.7, 0.9) == pytest.approx(7.0)
    assert "has not been run yet" in outer_study.NOT_RUN
    assert outer_study.edges((1.0, 0.9), outer_grid.FEDAVGM_GRID) == [
        "the largest lr 1",
        "the largest momentum 0.9",
    ]


def test_the_chosen_nesterov_step_is_paired_with_the_chosen_fedavgm_step():
    """Both grids finished on seeds 0-4: each grid's lowest mean is chosen, and the row of
    the outer step against the tuned FedAvg pairs those two points' runs by seed."""
    from types import SimpleNamespace

    from reproduction.paper.data import VariantData

    seeds = [0, 1, 2, 3, 4]

    def runs(hours: float) -> VariantData:
        v = VariantData("x", "x", ["static-k3"], all_seeds=seeds)
        v.runs = {"static-k3": {s: SimpleNamespace(time_to_target_s=hours * 3600) for s in seeds}}
        return v

    train = runs(1.0)
    train.kstar = 3
    d = {"uniform/train": train}
    nesterov = dict(zip(outer_study.GRID, (0.9, 0.8, 0.7, 0.5), strict=True))
    fedavgm = dict(zip(outer_grid.FEDAVGM_GRID, (0.95, 0.6, 0.9, 0.8), strict=True))
    for optimizer, hours in (("nesterov", nesterov), ("fedavgm", fedavgm)):
        grid, variants = outer_study.GRIDS[optimizer]
        for point, v in zip(grid, variants["uniform"], strict=True):
            d[f"{v.name}/train"] = runs(hours[point])
    assert outer_study.chosen(d, "uniform", "nesterov") == (0.7, 0.9)
    assert outer_study.chosen(d, "uniform", "fedavgm") == (0.7, 0.9)
    assert outer_study.grid_means(d, "uniform", "fedavgm")[(0.7, 0.9)] == pytest.approx(-0.4)
    rows = outer_study.claims(d, {})
    row = next(r for r in rows if "against the chosen FedAvgM step" in r.claim)
    assert row.seeds == 5 and row.ours.startswith("-16.7%")  # 0.5 h against 0.6 h
    chosen_row = next(r for r in rows if "outer step chosen" in r.claim)
    assert "FedAvgM's best point lr 0.7, momentum 0.9 (-40.0%)" in chosen_row.why
