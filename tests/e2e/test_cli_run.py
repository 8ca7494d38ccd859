"""A short CLI run end to end: four services as processes, real gRPC, real training."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from powertrip.app.cliconfig import explicit_settings, load_config
from powertrip.app.cliparser import build_parser
from powertrip.app.experiments.commands import DEFAULT_TIME_BUDGET_H, time_bound
from powertrip.app.experiments.runner import UNBOUNDED_ROUNDS
from powertrip.core.config import ConfigError

# one CLI run end to end and the CLI's refusals are in `make test`; the comparisons, a few
# runs each, are slow (`make test-all`)


def powertrip(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "powertrip.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_synthetic_run_writes_five_rows_and_is_deterministic(tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        done = powertrip(
            "run",
            "--workload",
            "synthetic",
            "--sites",
            "20",
            "--max-rounds",
            "5",
            "--seed",
            "1",
            "--target-accuracy",
            "0.99",
            "--out",
            str(out),
            "--quiet",
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outs.append(out)
    rows = list(csv.DictReader((outs[0] / "rounds.csv").open()))
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4, 5]
    required = {
        "round",
        "sim_time_s",
        "round_time_s",
        "k",
        "sites",
        "accuracy",
        "loss",
        "compute_s",
        "comm_s",
        "predicted_round_time_s",
        "bytes_up",
        "bytes_down",
    }
    assert required <= set(rows[0])
    # simulated time accumulates the round times; every row names its k sites
    total = 0.0
    for r in rows:
        total += float(r["round_time_s"])
        assert float(r["sim_time_s"]) == pytest.approx(total, rel=1e-9)
        assert len(r["sites"].split(";")) == int(r["k"])
        assert int(r["bytes_up"]) > 0
    assert (outs[0] / "rounds.csv").read_bytes() == (outs[1] / "rounds.csv").read_bytes()
    summary = json.loads((outs[0] / "summary.json").read_text())
    for key in (
        "policy",
        "workload",
        "clock",
        "rounds",
        "target_accuracy",
        "final_accuracy",
        "time_to_target_s",
    ):
        assert key in summary
    assert summary["rounds"] == 5 and summary["time_to_target_s"] is None
    assert summary["final_accuracy"] > 0.2  # real training: well above 10 % chance
    assert (outs[0] / "config.yaml").exists()
    assert (outs[0] / "accuracy_vs_time.png").exists()
    assert (outs[0] / "k_vs_time.png").exists()


@pytest.mark.slow
def test_compare_writes_table_and_each_policy(tmp_path):
    out = tmp_path / "cmp"
    done = powertrip(
        "compare",
        "--policies",
        "powertrip,all,radius",
        "--workload",
        "synthetic",
        "--sites",
        "12",
        "--max-rounds",
        "4",
        "--seed",
        "2",
        "--out",
        str(out),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert {r["policy"] for r in rows} == {"powertrip", "all", "radius"}
    for policy in ("powertrip", "all", "radius"):
        assert (out / policy / "rounds.csv").exists()
    assert (out / "time_to_accuracy.png").exists()
    assert "powertrip" in done.stdout
    assert all(float(r["energy_kwh"]) > 0 and float(r["egress_usd"]) > 0 for r in rows)
    for name in ("energy", "cost", "carbon"):
        assert (out / f"{name}_to_accuracy.png").exists()
    assert "kWh to target" in done.stdout and "egress $ to target" in done.stdout


@pytest.mark.slow
def test_format_json_gives_one_document_on_stdout_for_compare_and_sweep(tmp_path):
    """--format json: stdout is a single JSON document (every run's summary and directory),
    the progress and the table go to stderr, so `| jq` works."""
    common = ["--workload", "synthetic", "--sites", "6", "--max-rounds", "2", "--seed", "1",
              "--quiet", "--format", "json"]  # fmt: skip
    done = powertrip("compare", "--policies", "all,static:k=2", "--out", str(tmp_path / "c"),
                     *common)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["command"] == "compare" and result["out"] == str(tmp_path / "c")
    assert [r["label"] for r in result["runs"]] == ["all", "static:k=2"]
    for run in result["runs"]:
        assert run["summary"]["rounds"] == 2
        assert (Path(run["out_dir"]) / "rounds.csv").exists()
    assert "time to" in done.stderr  # the human lines, on stderr
    done = powertrip("sweep", "--k", "1,3", "--out", str(tmp_path / "s"), *common)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["label"] for r in json.loads(done.stdout)["runs"]] == ["static k=1", "static k=3"]


@pytest.mark.slow
def test_compare_runs_oort_and_ranks_by_energy(tmp_path):
    out = tmp_path / "cmp"
    done = powertrip(
        "compare", "--policies", "oort,all", "--workload", "synthetic", "--sites", "12",
        "--max-rounds", "3", "--seed", "2", "--rank-by", "energy", "--out", str(out),
        "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert {r["policy"] for r in rows} == {"oort", "all"}
    # neither reaches 80 % in 3 rounds: ranked by accuracy at T, energy shown as spent
    assert "Ranked by energy to target" in done.stdout
    assert "oort" in (out / "report.html").read_text()


@pytest.mark.slow
def test_compare_bounds_every_run_by_the_time_budget(tmp_path):
    out = tmp_path / "cmp"
    budget_h = 0.5
    done = powertrip(
        "compare",
        "--workload",
        "synthetic",
        "--sites",
        "10",
        "--policies",
        "static,all",
        "--time-budget-h",
        str(budget_h),
        "--target-accuracy",
        "0.99",  # out of reach: only the budget can end the runs
        "--seed",
        "2",
        "--out",
        str(out),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bound: 0.5 h of simulated time per run (as set); no round cap" in done.stdout
    for policy in ("static", "all"):
        summary = json.loads((out / policy / "summary.json").read_text())
        assert summary["stopped_reason"] == "time_budget", policy
        assert 0 < summary["sim_time_s"] <= budget_h * 3600
        assert summary["rounds"] >= 1
        config = yaml.safe_load((out / policy / "config.yaml").read_text())
        assert config["max_sim_hours"] == budget_h
        assert config["max_rounds"] == UNBOUNDED_ROUNDS
    # neither reached the target and both covered the whole budget: T is the budget
    assert "acc@T=0.500h" in done.stdout
    assert "the shortest time every run covered" in done.stdout
    rows = list(csv.DictReader((out / "comparison.csv").open()))
    assert {r["policy"] for r in rows} == {"static", "all"}
    assert all(float(r["t_s"]) == budget_h * 3600 and r["acc_at_t"] for r in rows)
    assert "acc@T=0.500h" in (out / "report.html").read_text()


@pytest.mark.slow
def test_compare_keeps_a_round_cap_set_in_the_config(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("workload: synthetic\nnum_sites: 6\nmax_rounds: 2\ntarget_accuracy: 0.99\n")
    out = tmp_path / "cmp"
    done = powertrip(
        "compare",
        "--config",
        str(config),
        "--policies",
        "static,all",
        "--out",
        str(out),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{DEFAULT_TIME_BUDGET_H:g} h of simulated time per run (the default" in done.stdout
    assert "or 2 rounds (max_rounds as set)" in done.stdout
    for policy in ("static", "all"):
        summary = json.loads((out / policy / "summary.json").read_text())
        assert summary["stopped_reason"] == "max_rounds" and summary["rounds"] == 2


def _bound(*argv: str):
    args = build_parser().parse_args(["compare", "--workload", "synthetic", *argv])
    return time_bound(load_config(args), explicit_settings(args))


def test_time_bound_replaces_only_what_the_user_did_not_set(tmp_path):
    config, line = _bound()
    assert config.max_sim_hours == DEFAULT_TIME_BUDGET_H
    assert config.max_rounds == UNBOUNDED_ROUNDS
    assert line.endswith("(the default; --time-budget-h to change); no round cap")
    config, line = _bound("--max-rounds", "7")
    assert (config.max_rounds, config.max_sim_hours) == (7, DEFAULT_TIME_BUDGET_H)
    assert "or 7 rounds (max_rounds as set)" in line
    config, line = _bound("--max-sim-hours", "2")
    assert (config.max_rounds, config.max_sim_hours) == (UNBOUNDED_ROUNDS, 2.0)
    config, line = _bound("--time-budget-h", "0", "--max-rounds", "9")
    assert (config.max_rounds, config.max_sim_hours) == (9, 0.0)
    assert "no time budget" in line
    with pytest.raises(ConfigError, match="disagree"):
        _bound("--time-budget-h", "1", "--max-sim-hours", "2")
    with pytest.raises(ConfigError, match="time-budget-h"):
        _bound("--time-budget-h", "-1")
    # a YAML value counts as set: `make demo` keeps configs/demo.yaml's round cap
    demo = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
    args = build_parser().parse_args(["compare", "--config", str(demo), "--budget-factor", "1.25"])
    config, line = time_bound(load_config(args), explicit_settings(args))
    assert config.max_rounds == yaml.safe_load(demo.read_text())["max_rounds"]
    assert config.max_sim_hours == DEFAULT_TIME_BUDGET_H
    assert "(max_rounds as set)" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nonsense"], "valid policies"),
        (["--workload", "nonsense"], "valid workloads"),
        (["--sites", "0"], "num_sites"),
        (["--target-accuracy", "1.5"], "target_accuracy"),
        (["--update-size-gb", "-1"], "update_size_gb"),
        (["--config", "/nonexistent/powertrip.yaml"], "cannot read config file"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, args, message):
    done = powertrip(
        "run",
        "--workload",
        "synthetic",
        "--sites",
        "4",
        "--max-rounds",
        "1",
        "--out",
        str(tmp_path / "x"),
        "--quiet",
        *args,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr


def test_missing_data_dir_says_where_it_looked(tmp_path):
    done = powertrip(
        "run",
        "--workload",
        "femnist",
        "--sites",
        "4",
        "--max-rounds",
        "1",
        "--data-dir",
        str(tmp_path / "nowhere"),
        "--out",
        str(tmp_path / "x"),
        "--quiet",
    )
    assert done.returncode == 2
    assert str(tmp_path / "nowhere") in done.stderr


def test_data_info_reports_per_site_samples():
    done = powertrip("data", "info", "femnist", "--sites", "100", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "311 users grouped into 100 sites" in done.stdout
    assert "samples min" in done.stdout and "of 62" in done.stdout
    bad = powertrip("data", "info", "nope", timeout=60)
    assert bad.returncode == 2 and "valid workloads" in bad.stderr


def test_report_of_a_missing_directory_exits_2(tmp_path):
    done = powertrip("report", str(tmp_path / "missing"), timeout=60)
    assert done.returncode == 2 and "not a directory" in done.stderr


def test_policies_lists_every_policy():
    done = powertrip("policies", timeout=60)
    assert done.returncode == 0
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    for name in (
        "powertrip",
        "random",
        "centralized-25",
        "centralized-50",
        "radius",
        "static",
        "highest-power",
        "lowest-latency",
        "all",
        "oort",
    ):
        assert name in names
