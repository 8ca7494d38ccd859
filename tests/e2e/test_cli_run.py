"""A short CLI run end to end: four services as processes, real gRPC, real training."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def powertrip(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "powertrip.cli", *args],
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
    ):
        assert name in names
