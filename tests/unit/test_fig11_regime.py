"""Fig. 11's premise check (reproduction/paper/fig11_regime.py) on made-up accuracy curves."""

from __future__ import annotations

import numpy as np
import pytest

from reproduction import reproduce as R
from reproduction.paper import fig11_regime as F
from reproduction.paper.data import load_variant
from tests.unit.test_reproduce import write_run


def _curves(tmp_path, curves: dict[int, list[float]], seeds=(0, 1)):
    for seed in seeds:
        for k, accs in curves.items():
            rounds = [(0.1 * (i + 1), a + 0.001 * seed, k) for i, a in enumerate(accs)]
            write_run(
                R.run_path(tmp_path, F.REGIME.name, seed, f"static-k{k}"), "static", None, rounds
            )
    arms = [f"static-k{k}" for k in curves]
    return {
        F.REGIME.name: load_variant(tmp_path, F.REGIME.name, "r", arms, list(seeds), list(curves))
    }


def test_early_and_late_windows_are_the_first_and_last_rounds():
    early, late = F.early_late([np.arange(30.0), np.arange(30.0) + 1], window=10)
    assert early == [4.5, 5.5] and late == [24.5, 25.5]
    assert F.early_late([np.arange(4.0)], window=10) == ([1.5], [1.5])  # short: one window


def test_more_sites_paying_later_is_found(tmp_path):
    n = 30
    ten = list(np.linspace(0.05, 0.50, n))
    # 50 sites: level with 10 over the first rounds, then gaining 0.3 points a round more
    fifty = [a + (0.003 * max(0, i - 10)) for i, a in enumerate(ten)]
    d = _curves(tmp_path, {10: ten, 50: fifty, 100: fifty})
    rows = {r.claim: r for r in F.claims(d, {})}
    early = rows["static-k50 gains little over static-k10 in the first 10 rounds"]
    assert early.holds == "yes"
    late = rows["static-k50 is ahead of static-k10 in the last 10 rounds"]
    assert late.holds == "yes" and late.ours.startswith("4.4")  # 0.3 x 14.5 points
    premise = next(r for r in F.claims(d, {}) if r.claim.startswith("a round of static-k50"))
    assert premise.holds == "yes"
    assert premise.ours.startswith("0.30")  # 0.3 points a round more, late against early


def test_gain_flat_in_k_fails_the_premise(tmp_path):
    ten = list(np.linspace(0.05, 0.50, 30))
    d = _curves(tmp_path, {10: ten, 50: ten, 100: ten})
    premise = next(r for r in F.claims(d, {}) if r.claim.startswith("a round of static-k50"))
    assert premise.holds != "yes"
    assert F.plots(d, tmp_path / "figs", {})[0].stat().st_size > 0


def test_the_regime_is_the_paper_lr_one_epoch_and_the_whole_split():
    o = F.REGIME.overrides
    assert o["lr"] == pytest.approx(0.01) and o["local_steps"] == 21
    assert o["eval_samples"] >= 100_000 and o["min_power"] == o["max_power"] == 1.0
