"""Can a run tell one k from another by its gains (powertrip/app/paper/gain_noise.py)? Hand-made
runs: the difference of mean gains per round against adaptive's fitted noise of one round."""

from __future__ import annotations

import json

import pytest

from powertrip.app.paper import gain_noise as G
from powertrip.app.report.rundir import load_run
from tests.unit.test_reproduce import write_run


def _run(tmp_path, name: str, gain: float, rounds: int, sigmas=()):
    """A run whose accuracy rises by `gain` a round; `sigmas`: its fits' noise, one a round."""
    path = tmp_path / name
    write_run(path, "static", None, [(0.1 * i, 0.05 + gain * i, 5) for i in range(rounds)])
    lines = [json.dumps({"explanation": {"fit": {"points": 8, "sigma": s}}}) for s in sigmas]
    lines.append(json.dumps({"explanation": {"fit": {"points": 2, "sigma": 9.0}}}))  # too few
    (path / "decisions.jsonl").write_text("\n".join(lines) + "\n")
    return load_run(path)


def test_rounds_to_resolve_grow_with_the_noise_over_the_difference_squared():
    assert G.rounds_to_resolve(0.001, 0.02) == pytest.approx(3200)  # 2 (2 x 20)^2
    assert G.rounds_to_resolve(0.002, 0.02) == pytest.approx(800)
    assert G.rounds_to_resolve(0.0, 0.02) == float("inf")


def test_a_small_difference_in_noisy_gains_cannot_be_resolved_within_a_run(tmp_path):
    static = {
        5: [_run(tmp_path, f"k5-{s}", 0.0167, 25) for s in range(3)],
        10: [_run(tmp_path, f"k10-{s}", 0.0153, 27) for s in range(3)],
    }
    assert G.mean_gain(static[5][0]) == pytest.approx(0.0167)
    online = [_run(tmp_path, "adaptive", 0.016, 26, sigmas=[0.02, 0.024, 0.03])]
    assert G.fitted_noise(online) == [0.02, 0.024, 0.03]  # the 2-point fit left out
    row = G.resolution_claim(static, online, 5, 10)
    assert row.holds == "no" and row.seeds == 3
    assert "d = 0.0014" in row.ours and "0.024 (median of 3 fits)" in row.ours
    assert "2,351 rounds at each k" in row.ours and "the runs last 25-27" in row.ours


def test_a_large_difference_is_resolved_and_missing_runs_say_not_run(tmp_path):
    static = {
        5: [_run(tmp_path, f"k5-{s}", 0.03, 25) for s in range(2)],
        10: [_run(tmp_path, f"k10-{s}", 0.01, 25) for s in range(2)],
    }
    online = [_run(tmp_path, "adaptive", 0.02, 25, sigmas=[0.01])]
    assert G.resolution_claim(static, online, 5, 10).holds == "yes"  # 2 (0.02 / 0.02)^2 = 2
    assert G.resolution_claim({5: static[5]}, online, 5, 10).ours == "not run"
    assert G.resolution_claim(static, [], 5, 10).holds == "n/a"
