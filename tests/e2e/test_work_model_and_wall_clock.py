"""The data-parallel work model and the wall clock's measured breakdown, end to end: the
CLI starts the four services as processes (real gRPC, real training on the synthetic
workload) and the checks read what the run wrote."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from services.aggregator.workmodel import DP_REFERENCE_SITES

pytestmark = pytest.mark.slow

SITES = 10


def _run(out: Path, *args: str, config: str = "") -> tuple[list[dict], list[dict], dict]:
    """One short synthetic run; (rounds.csv rows, decisions, summary)."""
    extra = []
    if config:
        path = out.with_suffix(".yaml")
        path.write_text(config)
        extra = ["--config", str(path)]
    done = subprocess.run(
        [sys.executable, "-m", "powertrip.app.cli", "run", "--workload", "synthetic",
         "--sites", str(SITES), "--seed", "3", "--target-accuracy", "0.99",
         "--out", str(out), "--quiet", *extra, *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    decisions = [json.loads(line) for line in (out / "decisions.jsonl").open()]
    return rows, decisions, json.loads((out / "summary.json").read_text())


def test_data_parallel_splits_the_work_and_more_power_computes_faster(tmp_path):
    runs = []
    for k in (2, 8):
        rows, decisions, summary = _run(
            tmp_path / f"k{k}", "--policy", "static", "--param", f"k={k}", "--max-rounds", "2",
            config="work_model: data-parallel\n",
        )  # fmt: skip
        assert summary["work_model"] == "data-parallel"
        config = yaml.safe_load((tmp_path / f"k{k}" / "config.yaml").read_text())
        W = config["local_steps"] * DP_REFERENCE_SITES  # the round's total work
        step_s = config["tau_s"] / config["local_steps"]
        power = {s["site_id"]: s["power_fraction"] for s in summary["sites"]}
        for row, decision in zip(rows, decisions, strict=True):
            sites = row["sites"].split(";")
            asked = decision["local_steps"]
            # every site trained exactly the share its task asked for, ~W in all
            assert decision["trained_steps"] == asked and set(asked) == set(sites)
            assert abs(sum(asked.values()) - W) <= len(sites)
            for site in sites:
                share = W * power[site] / sum(power[s] for s in sites)
                assert abs(asked[site] - max(1, share)) <= 0.5 + 1e-9
        total_power = sum(power[s] for s in rows[0]["sites"].split(";"))
        compute = float(rows[0]["compute_s"])
        # compute ~ W tau_step / sum p: the straggler is off by rounding, at most a step
        assert compute == pytest.approx(W * step_s / total_power, rel=0.35)
        runs.append((total_power, compute))
    (low_p, low_compute), (high_p, high_compute) = sorted(runs)
    assert low_p < high_p and high_compute < low_compute


def test_power_split_splits_the_batch_and_more_power_computes_faster(tmp_path):
    runs = []
    for k in (2, 8):
        rows, decisions, summary = _run(
            tmp_path / f"ps{k}", "--policy", "static", "--param", f"k={k}", "--max-rounds", "1",
            "--set", "work_model=power-split",
        )  # fmt: skip
        assert summary["work_model"] == "power-split"
        config = yaml.safe_load((tmp_path / f"ps{k}" / "config.yaml").read_text())
        B = config["batch_size"] * DP_REFERENCE_SITES  # the round's global batch
        power = {s["site_id"]: s["power_fraction"] for s in summary["sites"]}
        row, decision = rows[0], decisions[0]
        sites = row["sites"].split(";")
        batches = decision["batch_size"]
        # every site got its batch, >= 1, in proportion to power, B in all; FedAvg weighed
        # each delta by local_steps x its batch
        assert set(batches) == set(sites) and sum(batches.values()) == B
        total_power = sum(power[s] for s in sites)
        for site in sites:
            assert batches[site] >= 1
            assert abs(batches[site] - B * power[site] / total_power) < 1
        assert decision["fedavg_weight"] == {
            s: float(config["local_steps"] * b) for s, b in batches.items()
        }
        # compute = tau_B / sum p up to rounding, tau_B = DP_REFERENCE_SITES x tau
        compute = float(row["compute_s"])
        assert compute == pytest.approx(DP_REFERENCE_SITES * config["tau_s"] / total_power,
                                        rel=0.1)  # fmt: skip
        runs.append((total_power, compute))
    (low_p, low_compute), (high_p, high_compute) = sorted(runs)
    assert low_p < high_p and high_compute < low_compute


def test_wall_clock_breakdown_is_measured(tmp_path):
    out = tmp_path / "wall"
    rows, decisions, summary = _run(
        out, "--policy", "static", "--param", "k=4", "--max-rounds", "3", "--clock", "wall"
    )
    assert summary["clock"] == "wall"
    wall = {r["round"]: r for r in csv.DictReader((out / "wall.csv").open())}
    for row, decision in zip(rows, decisions, strict=True):
        round_s = float(row["round_time_s"])
        compute, comm = float(row["compute_s"]), float(row["comm_s"])
        assert compute > 0 and comm >= 0 and float(row["wait_s"]) >= 0
        assert compute + comm <= round_s
        # the straggler's compute + comm is its part of the training phase (wall.csv keeps
        # 3 decimals), not the time model's tens of seconds
        assert compute + comm <= float(wall[row["round"]]["wall_train_s"]) + 5e-4
        assert row["straggler"] in row["sites"].split(";")
        # the policy predicts in model seconds: left empty; the model's time sits beside
        assert row["predicted_round_time_s"] == ""
        model = float(row["model_round_time_s"])
        assert model == pytest.approx(decision["model_round_time_s"]) and compute + comm < model
