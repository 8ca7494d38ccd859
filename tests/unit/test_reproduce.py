"""`powertrip reproduce` without training: suites map to runs, resumability, k*, claims."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powertrip.config import RunConfig
from powertrip.experiments import reproduce as R
from powertrip.report import claims as C
from powertrip.report.data import RunResult
from powertrip.report.suites import CLAIMS, VariantData, claims_fig9, kstar
from services.policy.policies import REGISTRY

BASE = RunConfig(workload="femnist", lr=0.1, target_accuracy=0.45, max_rounds=60)


def test_sweep_ks_scale_with_the_site_count():
    assert R.sweep_ks(100) == [10, 20, 40, 70, 100]
    assert R.sweep_ks(10) == [1, 2, 4, 7, 10]
    assert R.sweep_ks(3) == [1, 2, 3]  # distinct, never 0, never above the site count


@pytest.mark.parametrize("figure", list(R.SUITES))
def test_every_figure_maps_to_runs_of_known_policies(figure):
    ks = R.sweep_ks(100)
    runs = R.plan([figure], [0, 1, 2], 100, ks)
    suite = R.SUITES[figure]
    assert runs, f"figure {figure} plans no runs"
    assert {r.variant for r in runs} == set(suite.variants)
    assert {r.seed for r in runs} == {0, 1, 2}
    for run in runs:
        assert run.variant in R.VARIANTS
        assert run.arm.policy in REGISTRY, run.arm
        if run.arm.policy == "static":
            assert 1 <= dict(run.arm.params)["k"] <= 100
    assert figure in CLAIMS  # and every figure has its claims


def test_static_k_star_pulls_in_the_sweep_and_powertrip_runs_first():
    runs = R.plan(["9"], [0], 100, [10, 70])
    names = [r.arm.name for r in runs]
    assert names[0] == "powertrip"
    assert "static-k10" in names and "static-k70" in names
    assert "static-k*" not in names  # k* is a sweep arm, not a run of its own
    assert len(names) == len(set(names))


def test_figures_that_share_a_set_up_share_its_runs():
    ks = [10, 70]
    shared = R.plan(["8", "9", "10"], [0, 1], 100, ks)
    assert {(r.variant, r.seed, r.arm) for r in shared} == {
        (r.variant, r.seed, r.arm) for r in R.plan(["9"], [0, 1], 100, ks)
    }
    assert len(shared) == len(set(shared))


def test_fig11_uses_10_50_100_percent_of_the_sites():
    runs = R.plan(["11"], [0], 100, R.sweep_ks(100))
    assert sorted(dict(r.arm.params)["k"] for r in runs) == [10, 50, 100]
    assert not R.VARIANTS["rounds"].budget


def test_parse_figures():
    assert R.parse_figures("all") == list(R.SUITES)
    assert R.parse_figures("8, 9") == ["8", "9"]
    with pytest.raises(R.ReproduceError, match="allowed: 8, 9, 10, 11, 12, 13, 14 or all"):
        R.parse_figures("7")


def test_variant_configs():
    trace = R.variant_config(BASE, R.VARIANTS["trace"], 2)
    assert trace.power == "trace" and trace.seed == 2 and trace.lr == 0.1
    speech = R.variant_config(BASE, R.VARIANTS["speech"], 0)
    assert speech.workload == "speech" and speech.lr == 0.001  # its own defaults, not FEMNIST's
    forced = R.variant_config(
        RunConfig(workload="synthetic"), R.VARIANTS["speech"], 0, force_workload=True
    )
    assert forced.workload == "synthetic"
    rounds = R.variant_config(BASE, R.VARIANTS["rounds"], 0)
    assert rounds.max_rounds == 15 and rounds.target_accuracy == 1.0
    tiny = R.variant_config(RunConfig(workload="synthetic", max_rounds=4), R.VARIANTS["rounds"], 0)
    assert tiny.max_rounds == 4  # never more rounds than the base allows


def _finished(run_dir: Path, config: RunConfig, status: str = "done") -> None:
    run_dir.mkdir(parents=True)
    config.write_yaml(run_dir / "run-config.yaml")
    (run_dir / "summary.json").write_text(json.dumps({"status": status}))


def test_is_done_needs_a_done_summary_with_the_same_settings(tmp_path):
    config = R.arm_config(R.variant_config(BASE, R.VARIANTS["uniform"], 0), R.static_arm(20))
    assert not R.is_done(tmp_path / "missing", config)
    _finished(tmp_path / "a", config)
    assert R.is_done(tmp_path / "a", config)
    capped = RunConfig(**{**config.to_dict(), "max_sim_hours": 1.5})
    assert R.is_done(tmp_path / "a", capped)  # the cut-off may differ
    other = RunConfig(**{**config.to_dict(), "lr": 0.5})
    assert not R.is_done(tmp_path / "a", other)  # a changed setting runs again
    _finished(tmp_path / "b", config, status="failed")
    assert not R.is_done(tmp_path / "b", config)


def test_execute_skips_finished_runs_without_starting_anything(tmp_path):
    base = BASE
    runs = R.plan(["10"], [0, 1], 100, [10, 70])
    for spec in runs:
        config = R.arm_config(R.variant_config(base, R.VARIANTS[spec.variant], spec.seed), spec.arm)
        _finished(spec.path(tmp_path), config)
    lines: list[str] = []
    logs = R.execute(runs, tmp_path, base, budget_factor=1.5, log=lines.append)
    assert [log.status for log in logs] == ["skipped"] * len(runs)
    assert all("already done" in line for line in lines)
    assert not list(tmp_path.glob("runs/*/seed*/logs"))  # no services were started


# ---- claims from finished runs (in memory) ----------------------------------------------
def _run(policy: str, ttt_h: float | None, sim_h: float, k: int = 5) -> RunResult:
    summary = {
        "policy": policy,
        "time_to_target_s": None if ttt_h is None else ttt_h * 3600,
        "sim_time_s": sim_h * 3600,
        "status": "done",
    }
    rounds = [{"round": 1, "k": k, "sim_time_s": sim_h * 3600, "round_time_s": sim_h * 3600}]
    return RunResult(Path(policy), {"num_sites": 100}, rounds, summary)


def _variant(times: dict[str, list[float | None]]) -> VariantData:
    v = VariantData("uniform", "uniform", list(times), seeds=[0, 1, 2], sweep=[10, 20, 70])
    for arm, values in times.items():
        v.runs[arm] = {s: _run(arm, t, t or 9.0) for s, t in enumerate(values)}
    v.kstar = kstar(v)
    return v


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


def test_fig9_claims_cover_every_baseline_and_hold_when_powertrip_is_fastest():
    v = _variant(
        {
            "powertrip": [0.6, 0.65, 0.7],
            "static-k10": [1.5, 1.6, 1.4],
            "static-k20": [1.1, 1.2, 1.15],
            "static-k70": [1.3, 1.3, 1.3],
            "centralized-25": [1.3, 1.35, 1.3],
            "centralized-50": [0.62, 0.66, 0.71],
            "highest-power": [1.2, 1.3, 1.25],
            "random": [None, None, None],  # cut off at 9 h: a lower bound
            "radius": [2.8, 2.9, 3.0],
            "all": [2.0, 2.1, 2.2],
        }
    )
    rows = claims_fig9({"uniform": v}, {"budget_factor": 1.5, "cores": 2})
    by_claim = {r.claim: r for r in rows}
    assert by_claim["powertrip is the fastest of 8 policies"].holds == "yes"
    for rival in ("static k* (k* = 20)", "centralized-25", "highest-power", "random", "radius"):
        assert by_claim[f"PowerTrip reaches the target faster than {rival}"].holds == "yes"
    similar = next(r for r in rows if "similar" in r.claim)
    assert similar.holds == "yes"
    radius = next(r for r in rows if "1000-mile" in r.claim)
    assert radius.holds == "no" and "expected" in radius.why  # 5 sites, not 22
    assert all(r.seeds == 3 for r in rows)
    assert {c for r in rows for c in r.as_dict()} == set(C.CLAIM_COLUMNS)


def test_prediction_errors_are_relative_and_skip_missing_predictions(tmp_path):
    from powertrip.report.plots import plot_prediction_error, prediction_errors

    rows = [
        {"round": 1, "round_time_s": 100.0, "predicted_round_time_s": 110.0},
        {"round": 2, "round_time_s": 200.0, "predicted_round_time_s": 150.0},
        {"round": 3, "round_time_s": 50.0, "predicted_round_time_s": float("nan")},
    ]
    run = RunResult(tmp_path, {}, rows, {"policy": "powertrip"})
    assert prediction_errors([run, run]).tolist() == pytest.approx([0.1, -0.25, 0.1, -0.25])
    path = plot_prediction_error([run], tmp_path / "err.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_k_star_falls_back_to_the_best_bound_when_every_k_was_cut_off():
    v = _variant({"static-k10": [None, None, None], "static-k20": [1.0, None, 1.1]})
    # _run gives a cut-off run 9 h; k20's mean bound (1.0 + 9 + 1.1) / 3 is the lower one
    assert v.kstar == 20 and v.kstar_censored
    assert not all(s.reached for s in v.samples("static-k*"))


def test_a_run_cut_off_by_the_budget_is_bounded_by_the_budget():
    from powertrip.report.suites import sample_of

    run = _run("all", None, 0.0)  # stopped before its first round would pass the cap
    run.summary["stopped_reason"] = "time_budget"
    run.config["max_sim_hours"] = 1.5
    assert sample_of(run) == C.Sample(1.5 * 3600, False)
    run.summary["stopped_reason"] = "max_rounds"
    assert sample_of(run) == C.Sample(0.0, False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--figure", "7"], "allowed: 8, 9, 10, 11, 12, 13, 14 or all"),
        (["--seeds", "0"], "--seeds must be >= 1"),
        (["--k", "500"], "--k values must be in 1..100"),
        (["--k", "x"], "--k must be comma-separated integers"),
        (["--workload", "nope"], "valid workloads"),
    ],
)
def test_cli_errors_name_the_option(tmp_path, capsys, args, message):
    from powertrip.cli import main

    assert main(["reproduce", *args, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("out/runs/*"))  # nothing was started
