"""Can a run tell one k from another by its progress (reproduction/paper/gain_noise.py)?
Hand-made runs, paired by seed: the mean difference of progress per round against its spread
over seeds, at each horizon, by accuracy and by held-out loss."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.app.report.rundir import load_run
from reproduction.paper import gain_noise as G
from tests.unit.test_reproduce import write_run

G_CLAIM = (
    "one pair of runs (k = 5 and k = 10, one seed) tells them apart by its accuracy (ideal set-up)"
)


def _run(tmp_path, name: str, accuracy: np.ndarray, loss: np.ndarray):
    """A finished run on disk with these per-round accuracies and losses."""
    path = tmp_path / name
    write_run(path, "static", None, [(0.1 * i, a, 5) for i, a in enumerate(accuracy, 1)])
    lines = (path / "rounds.csv").read_text().splitlines()
    for i, value in enumerate(loss, 1):  # the loss column, 7th, is 1.0 in write_run's rows
        cells = lines[i].split(",")
        cells[6] = repr(float(value))
        lines[i] = ",".join(cells)
    (path / "rounds.csv").write_text("\n".join(lines) + "\n")
    return load_run(path)


def _pairs(tmp_path, gain_small, gain_large, noise, rounds=25, seeds=6):
    """Static runs at k = 5 and 10 per seed: accuracy rising by `gain_*` a round and loss
    falling by 10x that, each reading with evaluation noise of sd `noise` (seeded)."""
    rng = np.random.default_rng(0)
    runs = {5: {}, 10: {}}
    for seed in range(seeds):
        for k, gain in ((5, gain_small), (10, gain_large)):
            t = np.arange(rounds)
            acc = 0.05 + gain * t + rng.normal(0, noise, rounds)
            loss = 4.0 - 10 * gain * t + rng.normal(0, 10 * noise, rounds)
            runs[k][seed] = _run(tmp_path, f"k{k}-s{seed}", acc, loss)
    return runs


def test_progress_is_measured_from_the_shared_start_so_only_round_r_s_readings_count(tmp_path):
    """Both runs of a seed start from one model, so x_0 cancels: the paired difference at R
    is (x_R(small) - x_R(large)) / R, whatever the earlier rounds read."""
    small = _run(tmp_path, "a", np.array([0.1, 0.5, 0.2, 0.4]), np.array([4.0, 3.0, 3.5, 3.1]))
    large = _run(tmp_path, "b", np.array([0.3, 0.1, 0.1, 0.2]), np.array([3.0, 3.9, 3.2, 3.3]))
    assert G.reading(small, "accuracy", 4) == pytest.approx(0.4)
    assert np.isnan(G.reading(small, "accuracy", 5))  # shorter than the horizon
    diffs = G.paired_differences({0: small}, {0: large}, "accuracy", 4)
    assert diffs == [pytest.approx((0.4 - 0.2) / 4)]
    assert G.paired_differences({0: small}, {0: large}, "loss", 1) == [pytest.approx(1.0)]
    assert G.pairs_to_resolve(0.001, 0.002) == pytest.approx(16.0)  # (2 x 2)^2
    assert G.pairs_to_resolve(0.0, 0.002) == float("inf")


def test_a_difference_lost_in_the_noise_is_not_resolved_by_one_pair(tmp_path):
    runs = _pairs(tmp_path, 0.0167, 0.0153, noise=0.03)
    rows = {r.claim: r for r in G.resolution_rows(runs, 5, 10)}
    row = rows[G_CLAIM]
    assert row.holds == "no" and row.seeds == 6
    assert row.ours.startswith("R = 5: d = ") and "R = 25: d = " in row.ours
    assert "one pair resolves at R = none up to 25" in row.why


def test_a_large_difference_is_resolved_and_too_few_seeds_say_not_run(tmp_path):
    runs = _pairs(tmp_path, 0.03, 0.01, noise=0.002)
    rows = G.resolution_rows(runs, 5, 10)
    assert [r.holds for r in rows] == ["yes", "yes"]  # by accuracy and by held-out loss
    assert "by its held-out loss" in rows[1].claim
    assert "one pair resolves at R = 5" in rows[0].why
    few = {k: dict(list(v.items())[:2]) for k, v in runs.items()}
    assert [r.ours for r in G.resolution_rows(few, 5, 10)] == ["not run", "not run"]


def test_an_ordering_that_flips_at_a_longer_horizon_does_not_hold(tmp_path):
    """Resolved at R = 5, reversed by R = 10: one pair did not tell the k apart, the rounds'
    noise did."""
    runs = {5: {}, 10: {}}
    rng = np.random.default_rng(1)
    for seed in range(6):
        t = np.arange(1, 26)
        ahead = np.where(t <= 5, 0.02 * t, 0.1 + 0.005 * (t - 5))  # ahead early, behind late
        steady = 0.01 * t
        for k, acc in ((5, ahead), (10, steady)):
            acc = acc + rng.normal(0, 1e-4, len(t))
            runs[k][seed] = _run(tmp_path, f"k{k}-s{seed}", acc, 4.0 - acc)
    row = G.resolution_rows(runs, 5, 10)[0]
    assert "one pair resolves at R = 5, but the ordering flips by R = " in row.why
    assert row.holds == "no"
