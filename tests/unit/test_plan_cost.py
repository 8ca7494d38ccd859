"""`powertrip reproduce --plan`: the cost of a study, fitted on the finished runs beside it."""

from __future__ import annotations

import json

import pytest

from powertrip.app.experiments import cost


def _run(path, ks, walls, rounds=None):
    path.mkdir(parents=True)
    lines = ["round,k"] + [f"{i},{k}" for i, k in enumerate(ks, 1)]
    (path / "rounds.csv").write_text("\n".join(lines) + "\n")
    lines = ["round,wall_round_s"] + [f"{i},{w}" for i, w in enumerate(walls, 1)]
    (path / "wall.csv").write_text("\n".join(lines) + "\n")
    summary = {"status": "done", "rounds": rounds or len(ks), "mean_k": sum(ks) / len(ks)}
    (path / "summary.json").write_text(json.dumps(summary))


def test_round_cost_is_fitted_as_a_plus_b_k(tmp_path):
    # wall = 2 s + 0.3 s x k, exactly
    _run(tmp_path / "runs/uniform/seed0/static-k3", [3] * 10, [2.9] * 10)
    _run(tmp_path / "runs/uniform/seed0/static-k20", [20] * 10, [8.0] * 10)
    a, b, used = cost.round_cost_fit(cost._finished(tmp_path))
    assert (a, b, used) == (pytest.approx(2.0), pytest.approx(0.3), 20)


def test_too_few_rounds_fall_back_to_the_projects_figures(tmp_path):
    _run(tmp_path / "runs/uniform/seed0/static-k3", [3] * 4, [2.9] * 4)
    assert cost.round_cost_fit(cost._finished(tmp_path)) == (*cost.FALLBACK_ROUND_S, 4)


def test_plan_prints_the_runs_to_make_and_cpu_hours_and_runs_nothing(tmp_path, capsys):
    from powertrip.app.cli import main

    _run(tmp_path / "runs/ideal/seed0/static-k3", [3] * 10, [2.9] * 10, rounds=20)
    _run(tmp_path / "runs/ideal/seed0/static-k20", [20] * 10, [8.0] * 10, rounds=20)
    argv = ["reproduce", "--figure", "8", "--seeds", "2", "--k", "3,20", "--out", str(tmp_path)]
    assert main([*argv, "--plan", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "plan: round wall time ~ 2.00 s + 0.300 s x k (fitted on 20 finished rounds" in text
    # uniform seeds 0 and 1, k = 3 and 20: four runs, each 20 rounds (learnt from its arm)
    assert "uniform/s0/static-k3: k ~ 3, 20 rounds, ~1 min" in text
    assert "plan: 4 run(s) to make" in text and "CPU hours" in text
    assert not (tmp_path / "runs" / "uniform").exists()  # nothing ran


def test_only_restricts_the_plan_to_the_named_set_ups(tmp_path, capsys):
    from powertrip.app.cli import main

    argv = ["reproduce", "--figure", "ablation", "--seeds", "1", "--out", str(tmp_path)]
    assert main([*argv, "--only", "two-directions", "--plan", "--quiet"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  ")]
    assert lines and all(ln.strip().startswith("two-directions/s0/") for ln in lines), lines
    assert main([*argv, "--only", "nope", "--plan"]) == 2
    assert "--only: nope is not a set-up of these figures" in capsys.readouterr().err


def test_a_run_without_a_target_is_planned_for_all_its_rounds(tmp_path, capsys):
    """Fig. 11's regime check has no target: its runs make max_rounds (30) rounds, whatever
    a static-k100 of another figure that stopped at its target took (here 12)."""
    from powertrip.app.cli import main

    _run(tmp_path / "runs/uniform/seed0/static-k100", [100] * 12, [30.0] * 12, rounds=12)
    _run(tmp_path / "runs/uniform/seed0/static-k10", [10] * 12, [3.0] * 12, rounds=12)
    argv = ["reproduce", "--figure", "11-regime", "--seeds", "1", "--out", str(tmp_path)]
    assert main([*argv, "--plan", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "regime-paper/s0/static-k100: k ~ 100, 30 rounds, ~" in text
    assert "upper bound" not in text.split("regime-paper/s0/static-k100")[1].splitlines()[0]


def test_arms_restricts_the_plan_to_the_named_policies(tmp_path, capsys):
    """--arms static: a set-up's sweep on more seeds without its online arms (the ideal
    set-up's training seeds, heldout.py)."""
    from powertrip.app.cli import main

    argv = ["reproduce", "--figure", "heldout", "--seeds", "1", "--k", "3,5", "--out"]
    argv += [str(tmp_path), "--only", "ideal-45", "--no-refine", "--budget-factor", "0"]
    assert main([*argv, "--plan", "--quiet"]) == 0
    every = [ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.startswith("  ")]
    assert {ln.split(":")[0] for ln in every} == {
        "ideal-45/s0/powertrip",
        "ideal-45/s0/adaptive",
        "ideal-45/s0/static-k3",
        "ideal-45/s0/static-k5",
    }
    assert main([*argv, "--arms", "static", "--plan", "--quiet"]) == 0
    lines = [ln.strip() for ln in capsys.readouterr().out.splitlines() if ln.startswith("  ")]
    assert [ln.split(":")[0] for ln in lines] == ["ideal-45/s0/static-k3", "ideal-45/s0/static-k5"]
    assert main([*argv, "--arms", "statik", "--plan"]) == 2
    err = capsys.readouterr().err
    assert "--arms: no planned run uses statik" in err and "adaptive, powertrip, static" in err
