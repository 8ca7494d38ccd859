"""`powertrip reproduce` without training: figures map to runs, resumability, the sweep's
refinement, the ablation's deferred arms, the time budget shared by a group, progress."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powertrip.app.experiments.suite import Variant, refine_ks
from powertrip.core.config import RunConfig
from powertrip.core.policies import REGISTRY
from reproduction import reproduce as R
from reproduction.paper import FIGURES, module_of

BASE = RunConfig(workload="femnist", lr=0.1, target_accuracy=0.45, max_rounds=60)


def test_sweep_grid_is_fine_at_small_k_and_scales_with_the_site_count():
    assert R.sweep_ks(100) == [1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100]
    assert R.sweep_ks(10) == [1, 2, 3, 5, 7, 10]
    assert R.sweep_ks(3) == [1, 2, 3]  # distinct, never 0, never above the site count


@pytest.mark.parametrize(
    "figure",
    [f for f in R.SUITES if f not in ("2", "3", "5")],  # no runs
)
def test_every_figure_maps_to_runs_of_known_policies(figure):
    ks = R.sweep_ks(100)
    runs = R.plan(R.PAPER, [figure], [0, 1, 2], 100, ks)
    suite = R.SUITES[figure]
    assert runs, f"figure {figure} plans no runs"
    assert {r.variant for r in runs} == set(suite.variants)
    assert {r.seed for r in runs} == {0, 1, 2}
    for run in runs:
        assert run.variant in R.VARIANTS
        assert run.arm.policy in REGISTRY, run.arm
        if run.arm.policy == "static":
            assert 1 <= dict(run.arm.params)["k"] <= 100
    module = module_of(figure)
    assert callable(module.claims) and callable(module.plots)


def test_every_variant_is_valid_for_the_reproduce_config():
    base = RunConfig.from_yaml(R.DEFAULT_CONFIG)
    assert R.check_variants(base, list(R.VARIANTS), variants=R.VARIANTS) == {}


def test_a_setting_this_version_lacks_makes_a_variant_unsupported_not_silent():
    bad = R.Variant("future", "needs a setting", {"no_such_setting": 1})
    with pytest.raises(R.ConfigError, match="no_such_setting"):
        R.variant_config(BASE, bad, 0)


def test_static_k_star_pulls_in_the_sweep_and_powertrip_runs_first():
    runs = R.plan(R.PAPER, ["9"], [0], 100, [10, 70])
    names = [r.arm.name for r in runs]
    assert names[0] == "powertrip"
    assert "static-k10" in names and "static-k70" in names
    assert "static-k*" not in names  # k* is a sweep arm, not a run of its own
    assert len(names) == len(set(names))


def test_figures_that_share_a_set_up_share_its_runs():
    ks = [10, 70]
    shared = R.plan(R.PAPER, ["8", "9", "10"], [0, 1], 100, ks)
    assert {(r.variant, r.seed, r.arm) for r in shared} == {
        (r.variant, r.seed, r.arm) for r in R.plan(R.PAPER, ["9"], [0, 1], 100, ks)
    }
    assert len(shared) == len(set(shared))


def test_fig11_uses_10_50_100_percent_of_the_sites():
    runs = R.plan(R.PAPER, ["11"], [0], 100, R.sweep_ks(100))
    assert sorted(dict(r.arm.params)["k"] for r in runs) == [10, 50, 100]
    assert {r.variant for r in runs} == {"ideal"}  # Fig. 11 reads Figs. 6-7's runs
    assert not R.VARIANTS["ideal"].budget


def test_figs_6_7_identical_full_power_sites_without_communication_and_fixed_rounds():
    runs = R.plan(R.PAPER, ["6-7"], [0], 10, R.sweep_ks(10))
    assert {r.variant for r in runs} == {"ideal", "ideal-power-split"}
    for variant in ("ideal", "ideal-power-split"):  # 10/20/50/100 % of the sites
        assert sorted(dict(r.arm.params)["k"] for r in runs if r.variant == variant) == [
            1,
            2,
            5,
            10,
        ]
    ideal = R.VARIANTS["ideal"]
    assert not ideal.budget
    config = R.variant_config(BASE, ideal, 0)
    assert (config.min_power, config.max_power) == (1.0, 1.0)
    assert (config.min_distance_miles, config.max_distance_miles) == (0.0, 0.0)
    assert config.target_accuracy == 1.0 and config.max_rounds == 30  # the same rounds for all
    assert config.work_model == "local-steps"
    # Eq. 7 read literally: the same sites, the global batch split among them, 40 rounds
    split = R.variant_config(BASE, R.VARIANTS["ideal-power-split"], 0)
    assert not R.VARIANTS["ideal-power-split"].budget and split.work_model == "power-split"
    assert split.target_accuracy == 1.0 and split.max_rounds == min(BASE.max_rounds, 40)
    assert split.with_values({"work_model": "local-steps", "max_rounds": 30}) == config


def test_parse_figures():
    assert R.parse_figures(R.PAPER, "all") == list(R.SUITES)
    assert R.parse_figures(R.PAPER, "8, 9") == ["8", "9"]
    assert (
        R.parse_figures(R.PAPER, "6")
        == R.parse_figures(R.PAPER, "7")
        == R.parse_figures(R.PAPER, "6,7")
        == ["6-7"]
    )
    assert R.parse_figures(R.PAPER, "ablation") == ["ablation"]
    assert R.parse_figures(R.PAPER, "5") == ["5"]
    assert R.plan(R.PAPER, ["5"], [0, 1], 100, R.sweep_ks(100)) == []  # Fig. 5 needs no runs
    assert R.plan(R.PAPER, ["2", "3"], [0, 1], 100, R.sweep_ks(100)) == []  # nor Figs. 2-3
    allowed = (
        "allowed: 2, 3, 5, 6, 7, 8, 9, 10, 11, 11-regime, 8-9-plateau, 12, 13, 14, ablation, "
        "heldout, tau"
    )
    with pytest.raises(R.ReproduceError, match=allowed):
        R.parse_figures(R.PAPER, "4")


def test_variant_configs():
    trace = R.variant_config(BASE, R.VARIANTS["trace"], 2)
    assert trace.power == "trace" and trace.seed == 2 and trace.lr == 0.1
    speech = R.variant_config(BASE, R.VARIANTS["speech"], 0)
    assert speech.workload == "speech" and speech.lr == 0.001  # its own defaults, not FEMNIST's
    forced = R.variant_config(
        RunConfig(workload="synthetic"), R.VARIANTS["speech"], 0, force_workload=True
    )
    assert forced.workload == "synthetic"
    ideal = R.variant_config(BASE, R.VARIANTS["ideal"], 0)
    assert ideal.max_rounds == min(BASE.max_rounds, 30) and ideal.target_accuracy == 1.0
    assert ideal.min_power == ideal.max_power == 1.0 and ideal.max_distance_miles == 0.0
    tiny = R.variant_config(RunConfig(workload="synthetic", max_rounds=4), R.VARIANTS["ideal"], 0)
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
    runs = R.plan(R.PAPER, ["10"], [0, 1], 100, [10, 70])
    for spec in runs:
        variant = R.VARIANTS[spec.variant]
        config = R.arm_config(R.variant_config(base, variant, spec.seed), spec.arm, variant)
        _finished(spec.path(tmp_path), config)
    lines: list[str] = []
    logs = R.execute(runs, tmp_path, base, variants=R.VARIANTS, budget_factor=1.5, log=lines.append)
    assert [log.status for log in logs] == ["skipped"] * len(runs)
    assert all("already done" in line for line in lines)
    assert not list(tmp_path.glob("runs/*/seed*/logs"))  # no services were started


def test_progress_counts_runs_and_estimates_from_the_mean_so_far():
    progress = R.Progress(total=4)
    assert progress.line("a") == "run 1/4: a"  # nothing to estimate from yet
    progress.seconds.extend([60.0, 180.0])
    progress.started = 2
    assert progress.line("c") == "run 3/4: c (ETA 4 min)"  # 2 runs left x 2 min


# ---- a group's shared time budget ------------------------------------------------------
def _summary(run_dir: Path, ttt_s: float | None, status: str = "done") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps({"status": status, "time_to_target_s": ttt_s}))


def test_every_arm_of_a_group_is_measured_against_powertrip(tmp_path):
    group = tmp_path / "runs" / "uniform" / "seed0"
    assert R.group_reference(tmp_path, "uniform", 0) is None
    _summary(group / "static-k5", 1800.0)
    _summary(group / "static-k7", None)
    _summary(group / "random", 900.0, status="running")  # killed: does not count
    assert R.group_reference(tmp_path, "uniform", 0) == 1800.0  # no PowerTrip yet: the best
    _summary(group / "powertrip", 3000.0)
    assert R.group_reference(tmp_path, "uniform", 0) == 3000.0  # PowerTrip's, even if slower


def test_the_reference_arm_is_never_cut_off():
    """A group without PowerTrip yet measures against its best baseline; PowerTrip itself
    runs to its target, and a PowerTrip run a budget stopped is made again uncapped."""
    from powertrip.app.experiments.plan import arm_cap_h

    assert arm_cap_h("static-k3", 3600.0, 1.5) == pytest.approx(1.5)
    assert arm_cap_h("powertrip", 3600.0, 1.5) is None
    assert arm_cap_h("static-k3", None, 1.5) is None
    assert arm_cap_h("static-k3", 3600.0, 0) is None


def test_a_reference_run_stopped_by_a_budget_is_not_done(tmp_path):
    config = BASE
    for arm, reason in (
        ("powertrip", "time_budget"),
        ("static-k3", "time_budget"),
        ("powertrip", "target_reached"),
    ):
        run_dir = tmp_path / reason / arm
        _finished(run_dir, config)
        summary = json.loads((run_dir / "summary.json").read_text())
        (run_dir / "summary.json").write_text(json.dumps({**summary, "stopped_reason": reason}))
    assert not R.is_done(tmp_path / "time_budget" / "powertrip", config)
    assert R.is_done(tmp_path / "time_budget" / "static-k3", config)  # a baseline's cut-off
    assert R.is_done(tmp_path / "target_reached" / "powertrip", config)


# ---- refinement ------------------------------------------------------------------------
def test_refine_ks_takes_the_midpoints_beside_the_best_grid_k():
    grid = [1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100]
    assert refine_ks(grid, 20) == [17, 25]
    assert refine_ks(grid, 10) == [8, 12]
    assert refine_ks(grid, 2) == []  # neighbours 1 and 3 are next to it
    assert refine_ks(grid, 5) == [4, 6]
    assert refine_ks(grid, 100) == [85]  # largest k: one side only
    assert refine_ks(grid, 42) == []  # not a grid point


def write_run(
    run_dir: Path,
    policy: str,
    ttt_h: float | None,
    rounds: list[tuple[float, float, int]],
    config: dict | None = None,
    stopped: str = "max_rounds",
) -> None:
    """A finished run on disk: rounds as (sim hours, accuracy, k)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    header = "round,sim_time_s,round_time_s,k,sites,accuracy,loss,compute_s,comm_s,wait_s,"
    header += "predicted_round_time_s,bytes_up,bytes_down"
    lines, prev = [header], 0.0
    for i, (hours, acc, k) in enumerate(rounds, 1):
        t = hours * 3600
        lines.append(f"{i},{t},{t - prev},{k},site-0,{acc},1.0,1,1,0,,0,0")
        prev = t
    (run_dir / "rounds.csv").write_text("\n".join(lines) + "\n")
    (run_dir / "run-config.yaml").write_text(
        json.dumps({"policy": policy, "num_sites": 100, **(config or {})})
    )
    last = rounds[-1] if rounds else (0.0, 0.0, 0)
    summary = {
        "policy": policy,
        "workload": "synthetic",
        "clock": "simulated",
        "rounds": len(rounds),
        "target_accuracy": 0.45,
        "final_accuracy": last[1],
        "best_accuracy": max((r[1] for r in rounds), default=0.0),
        "time_to_target_s": None if ttt_h is None else ttt_h * 3600,
        "sim_time_s": last[0] * 3600,
        "stopped_reason": "target" if ttt_h is not None else stopped,
        "status": "done",
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))


def made_up_sweep(out: Path, variant: str, seeds: list[int], hours: dict[int, float]) -> None:
    for seed in seeds:
        for k, h in hours.items():
            write_run(
                R.run_path(out, variant, seed, f"static-k{k}"),
                "static",
                h + seed * 0.01,
                [(h + seed * 0.01, 0.5, k)],
            )


def test_refinement_waits_for_every_seed_then_runs_the_midpoints_resumably(tmp_path):
    grid = [1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100]
    hours = {k: 1.0 + abs(k - 20) / 100 for k in grid}  # valley at 20
    made_up_sweep(tmp_path, "uniform", [0], hours)
    runs, found = R.refine_runs(R.PAPER, tmp_path, ["8"], [0, 1], grid, 100)
    assert runs == [] and found == {}  # seed 1's grid has not finished
    made_up_sweep(tmp_path, "uniform", [1], hours)
    runs, found = R.refine_runs(R.PAPER, tmp_path, ["8"], [0, 1], grid, 100)
    assert found == {"uniform": [17, 25]}
    assert [(r.seed, r.arm.name) for r in runs] == [
        (0, "static-k17"),
        (0, "static-k25"),
        (1, "static-k17"),
        (1, "static-k25"),
    ]
    # a refined k that turns out faster does not trigger a second pass: decided on the grid
    made_up_sweep(tmp_path, "uniform", [0, 1], {17: 0.5, 25: 0.6})
    assert R.refine_runs(R.PAPER, tmp_path, ["8"], [0, 1], grid, 100)[1] == {"uniform": [17, 25]}
    assert R.refine_runs(R.PAPER, tmp_path, ["11"], [0, 1], grid, 100) == (
        [],
        {},
    )  # no sweep in Fig. 11


# ---- ablation ----------------------------------------------------------------------------
def test_ablation_plans_powertrip_everywhere_and_static_k_star_from_the_uniform_sweep(tmp_path):
    grid = [2, 5]
    runs = R.plan(R.PAPER, ["ablation"], [0], 10, grid)
    by_variant: dict[str, list[str]] = {}
    for r in runs:
        by_variant.setdefault(r.variant, []).append(r.arm.name)
    assert by_variant["uniform"] == ["powertrip", "static-k2", "static-k5"]
    # the link model changes the ranking, so its k* comes from a sweep of its own, which
    # stops at 30 % of the sites (3 of 10 here)
    assert by_variant["links-fig5"] == ["powertrip", "adaptive", "static-k2"]
    assert by_variant["links-fig5-clock"] == ["powertrip"]  # waits for links-fig5's k*
    for name in (
        "two-directions",
        "data-parallel",
        "power-split",
        "uniform-distances",
        "clock-estimator",
    ):
        assert by_variant[name] == ["powertrip"]  # static k* waits for the uniform sweep
    deferred, chosen = R.deferred_runs(R.PAPER, tmp_path, ["ablation"], [0], grid, 10)
    assert deferred == [] and chosen == {"static-k@uniform*": None, "static-k@links-fig5*": None}
    made_up_sweep(tmp_path, "uniform", [0], {2: 1.5, 5: 1.2})
    # k = 5 is past links-fig5's sweep, so a run of it there does not count
    made_up_sweep(tmp_path, "links-fig5", [0], {2: 1.5, 5: 1.2})
    deferred, chosen = R.deferred_runs(R.PAPER, tmp_path, ["ablation"], [0], grid, 10)
    assert chosen == {"static-k@uniform*": 5, "static-k@links-fig5*": 2}
    assert {(r.variant, r.arm.name) for r in deferred} == {("links-fig5-clock", "static-k2")} | {
        (v, "static-k5")
        for v in (
            "two-directions",
            "data-parallel",
            "power-split",
            "uniform-distances",
            "clock-estimator",
        )
    }


def test_fig13_sizes_run_static_k_star_of_the_1_5_gb_sweep(tmp_path):
    """1 and 2 GB compare against the k tuned once at 1.5 GB, not a sweep of their own,
    and every size runs all of Fig. 9's baselines (the paper compares them all)."""
    grid = [2, 5]
    by_variant: dict[str, list[str]] = {}
    for r in R.plan(R.PAPER, ["13"], [0], 10, grid):
        by_variant.setdefault(r.variant, []).append(r.arm.name)
    rest = ["centralized-25", "centralized-50", "highest-power", "random", "radius", "all"]
    assert by_variant["uniform"] == ["powertrip", "static-k2", "static-k5", *rest]
    for name in ("size-1gb", "size-2gb"):
        assert by_variant[name] == ["powertrip", *rest]
    made_up_sweep(tmp_path, "uniform", [0], {2: 1.5, 5: 1.2})
    deferred, chosen = R.deferred_runs(R.PAPER, tmp_path, ["13"], [0], grid, 10)
    assert chosen == {"static-k@uniform*": 5}
    assert {(r.variant, r.arm.name) for r in deferred} == {
        ("size-1gb", "static-k5"),
        ("size-2gb", "static-k5"),
    }


def test_ablation_flips_one_setting_and_arm_params_reach_only_their_policy():
    base = RunConfig.from_yaml(R.DEFAULT_CONFIG)
    uniform = R.variant_config(base, R.VARIANTS["uniform"], 0).to_dict()
    for name, key in (
        ("two-directions", "comm_directions"),
        ("data-parallel", "work_model"),
        ("uniform-distances", "distance_distribution"),
        ("clock-estimator", "estimator"),
    ):
        flipped = R.variant_config(base, R.VARIANTS[name], 0).to_dict()
        assert {k for k in uniform if uniform[k] != flipped[k]} == {key}, name
    variant = Variant("slow-probes", "uniform, adaptive probing less", arm_params={
        "adaptive": {"probe_cost": 0.05}
    })  # fmt: skip
    config = R.variant_config(base, variant, 0)
    online = R.arm_config(config, R.Arm("adaptive", "adaptive"), variant)
    static = R.arm_config(config, R.static_arm(5), variant)
    assert online.policy_params == {"probe_cost": 0.05}
    assert static.policy_params == {"k": 5.0}


def test_figure_keys_6_and_7_select_one_module():
    assert FIGURES["6"] is FIGURES["7"] is module_of("6-7")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--figure", "4"],
            "allowed: 2, 3, 5, 6, 7, 8, 9, 10, 11, 11-regime, 8-9-plateau, 12, 13, 14, ablation, "
            "heldout, tau, "
            "llm, outer, regions or all",
        ),
        (["--seeds", "0"], "--seeds must be >= 1"),
        (["--k", "500"], "--k values must be in 1..100"),
        (["--k", "x"], "--k must be comma-separated integers"),
        (["--workload", "nope"], "valid workloads"),
    ],
)
def test_cli_errors_name_the_option(tmp_path, capsys, args, message):
    from powertrip.app.cli import main

    assert main(["reproduce", *args, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("out/runs/*"))  # nothing was started


def test_a_narrower_command_keeps_the_record_of_a_wider_one():
    """`--figure 8` after `--figure all` on one OUT: reproduce.json still names every
    figure's set-ups and seeds, so --report-only can render them all."""
    wide = {
        "figures": ["6-7", "8", "12"],
        "seeds": [0, 1, 2, 3, 4],
        "variants": {"ideal": {"name": "ideal"}, "trace": {"name": "trace"}},
        "refined": {"uniform": [4]},
        "base_config": {"lr": 0.1},
        "sweep_k": [1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100],
    }
    narrow = {
        "figures": ["8"],
        "seeds": [0, 1, 2],
        "sweep_k": [70, 100],
        "variants": {"uniform": {"name": "uniform"}},
        "refined": {"uniform": [4, 6]},
        "base_config": {"lr": 0.1, "gpu_power_w": 250.0},
    }
    merged = R.merged_record(wide, narrow)
    assert merged["figures"] == ["6-7", "8", "12"]
    assert merged["seeds"] == [0, 1, 2, 3, 4]
    assert merged["sweep_k"] == wide["sweep_k"]  # a few points run elsewhere keep the grid
    assert set(merged["variants"]) == {"ideal", "trace", "uniform"}
    assert merged["refined"] == {"uniform": [4, 6]}  # the newer command's refinement
    assert merged["base_config"] == narrow["base_config"]
    assert R.merged_record({}, narrow)["figures"] == ["8"]


def test_a_narrower_command_records_only_the_k_star_of_its_own_set_ups():
    """--only links-fig5-clock resolves static-k@uniform* on its own seeds too; the record
    keeps only the spec its set-ups use (the uniform k* stays the wider command's)."""
    from reproduction.reproduce import _specs_of

    assert _specs_of(["ablation"], {"links-fig5-clock"}) == {"powertrip", "static-k@links-fig5*"}
    every = _specs_of(["ablation"], None)
    assert {"static-k@uniform*", "static-k@links-fig5*", "sweep"} <= every
