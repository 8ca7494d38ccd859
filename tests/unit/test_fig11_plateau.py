"""The in-process plateau check (powertrip/app/paper/fig11_plateau.py) runs the regime check's
learning: the same settings as fig11_regime.REGIME, the sites static k takes, and the same
numbers as a real run of the services, up to float summation order."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from powertrip.app.paper.fig11_plateau import (
    RegimeSettings,
    chosen_sites,
    leads,
    load_curves,
    main,
    simulate,
)
from powertrip.app.paper.fig11_regime import REGIME
from powertrip.core.config import RunConfig
from powertrip.core.workloads import get_workload

#: a committed run of the services in the regime (seed 0, static k = 5)
SERVICE_RUN = (
    Path(__file__).resolve().parents[2]
    / "results/reproduce/runs/regime-paper/seed0/static-k5/rounds.csv"
)


def test_the_settings_are_the_regime_checks():
    settings = RegimeSettings()
    regime = REGIME.overrides
    assert (settings.lr, settings.local_steps) == (regime["lr"], regime["local_steps"])
    defaults = RunConfig()
    assert settings.workload == defaults.workload
    assert settings.num_sites == defaults.num_sites
    # the run's batch size is the workload's default unless set (the regime sets none)
    assert "batch_size" not in regime and defaults.batch_size is None
    assert settings.batch_size == get_workload(settings.workload).defaults.batch_size


def test_fixed_takes_the_first_k_and_random_draws_k_per_round_and_seed():
    assert chosen_sites(3, 100, 1, 0, "fixed") == chosen_sites(3, 100, 7, 5, "fixed") == [0, 1, 2]
    a = chosen_sites(10, 100, 1, 0, "random")
    assert len(set(a)) == 10 and all(0 <= i < 100 for i in a)
    assert a == chosen_sites(10, 100, 1, 0, "random")  # seeded
    assert a != chosen_sites(10, 100, 2, 0, "random")  # a new draw each round
    assert a != chosen_sites(10, 100, 1, 1, "random")
    with pytest.raises(ValueError, match="fixed, random"):
        chosen_sites(3, 100, 1, 0, "best")


def test_a_bad_k_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"k must be in 1\.\.100"):
        simulate(0, 0, 1, tmp_path / "x.csv")


@pytest.mark.slow
@pytest.mark.skipif(not SERVICE_RUN.is_file(), reason="the committed regime runs are not here")
def test_its_first_round_is_the_service_runs_first_round(tmp_path):
    """Round 1 of seed 0, k = 5, against what the aggregator recorded for the same round."""
    assert main(["--k", "5", "--seed", "0", "--rounds", "1", "--out", str(tmp_path)]) == 0
    ours = next(csv.DictReader((tmp_path / "k5-fixed-seed0.csv").open()))
    theirs = next(csv.DictReader(SERVICE_RUN.open()))
    assert ours["round"] == theirs["round"] == "1" and theirs["k"] == "5"
    # the same training to the float summation order (the aggregator streams the sum)
    assert float(ours["train_loss"]) == pytest.approx(float(theirs["train_loss"]), abs=1e-5)
    assert float(ours["loss"]) == pytest.approx(float(theirs["loss"]), abs=1e-3)
    assert float(ours["accuracy"]) == pytest.approx(float(theirs["accuracy"]), abs=1e-3)


def test_the_report_plots_the_lead_over_k10_of_the_same_seed(tmp_path):
    def write(name, k, sampling, accuracy):
        rows = ["round,k,sampling,accuracy,loss,train_loss,wall_s"]
        rows += [f"{i},{k},{sampling},{a},1,1,1" for i, a in enumerate(accuracy, 1)]
        (tmp_path / name).write_text("\n".join(rows) + "\n")

    write("k10-fixed-seed0.csv", 10, "fixed", [0.1, 0.2, 0.3])
    write("k50-fixed-seed0.csv", 50, "fixed", [0.2, 0.25])
    write("k10-random-seed0.csv", 10, "random", [0.1, 0.3, 0.4])
    write("k100-fixed-seed1.csv", 100, "fixed", [0.5])  # no k = 10 of seed 1: no lead
    lead = leads(load_curves(tmp_path))
    assert list(lead) == [(50, 0)]
    assert lead[(50, 0)] == pytest.approx([0.1, 0.05])
    assert main(["--report", str(tmp_path)]) == 0
    assert (tmp_path / "plateau.png").stat().st_size > 10_000
    with pytest.raises(SystemExit):
        main(["--seed", "0"])  # neither --k nor --report


def test_the_mean_on_the_models_device_is_fedavgs_to_the_bit():
    """The runner averages where the model is (a GPU's float64 ops round as numpy's do), and
    must give the aggregator's numbers: fedavg's weighted_average with equal weights, then
    apply_delta."""
    import numpy as np
    import torch

    from powertrip.app.paper.fig11_plateau import mean_delta_applied
    from powertrip.core.fedavg import apply_delta, weighted_average

    rng = np.random.default_rng(3)
    weights = {"w": rng.standard_normal((40, 40)).astype(np.float32), "b": np.zeros(3, np.float32)}
    deltas = [  # enough that a float32 mean differs from fedavg's float64 sum somewhere
        {n: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for n, v in weights.items()}
        for _ in range(30)
    ]
    want = apply_delta(weights, weighted_average(deltas, [1.0] * len(deltas)))
    got = mean_delta_applied(
        {n: torch.from_numpy(v) for n, v in weights.items()},
        [{n: torch.from_numpy(v) for n, v in d.items()} for d in deltas],
    )
    for name, value in want.items():
        assert got[name].dtype == torch.float32
        assert np.array_equal(got[name].numpy(), value), name
