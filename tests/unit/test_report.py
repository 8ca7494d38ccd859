"""Reports from hand-written run directories: tables, k*, plots, and clear errors."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from powertrip.report import ReportError, format_table, load_run, render
from powertrip.report.results import REQUIRED_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(path, policy, accuracies, round_time, target=0.5, k=3):
    path.mkdir(parents=True)
    columns = [*REQUIRED_COLUMNS, "wait_s"]
    sim, rows, reached = 0.0, [], None
    for i, acc in enumerate(accuracies, start=1):
        sim += round_time
        rows.append({
            "round": i, "sim_time_s": sim, "round_time_s": round_time, "k": k,
            "sites": ";".join(f"site-{j:03d}" for j in range(k)), "accuracy": acc, "loss": 1 - acc,
            "compute_s": round_time * 0.6, "comm_s": round_time * 0.3, "predicted_round_time_s": round_time * 0.9,
            "bytes_up": 100, "bytes_down": 100, "wait_s": 1.0,
        })
        if reached is None and acc >= target:
            reached = sim
    with (path / "rounds.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    (path / "summary.json").write_text(json.dumps({
        "policy": policy, "workload": "synthetic", "clock": "simulated", "rounds": len(rows),
        "target_accuracy": target, "final_accuracy": accuracies[-1], "best_accuracy": max(accuracies),
        "time_to_target_s": reached, "sim_time_s": sim, "mean_k": k,
        "sites": [{"site_id": f"site-{j:03d}", "power_fraction": 0.5, "distance_miles": 100.0 * (j + 1),
                   "bandwidth_bytes_per_s": 1e8} for j in range(6)],
    }))
    (path / "config.yaml").write_text(yaml.safe_dump({"policy": policy, "workload": "synthetic",
                                                      "num_sites": 6, "clock": "simulated"}))


def test_comparison_table_orders_by_time_and_marks_not_reached(tmp_path):
    write_run(tmp_path / "slow", "slow", [0.1, 0.3, 0.5, 0.6], 100)
    write_run(tmp_path / "fast", "fast", [0.2, 0.55], 100)
    write_run(tmp_path / "never", "never", [0.1, 0.2, 0.3], 50)
    report = render(tmp_path)
    assert report.name == "report.html" and "fast" in report.read_text()
    rows = list(csv.DictReader((tmp_path / "comparison.csv").open()))
    assert [r["policy"] for r in rows] == ["fast", "slow", "never"]
    assert rows[0]["time_to_target_s"] == "200.0" and rows[2]["time_to_target_s"] == ""
    text = format_table([load_run(tmp_path / p) for p in ("slow", "fast", "never")])
    assert "not reached (> 0.04 h)" in text
    assert "(1.50x)" in text  # slow: 300 s vs fast 200 s
    for name in ("accuracy_vs_time.png", "time_to_accuracy.png", "k_vs_time.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    for name in ("accuracy_vs_time.png", "k_vs_time.png", "round_breakdown.png", "predicted_vs_actual.png",
                 "site_map.png", "report.html"):
        assert (tmp_path / "fast" / name).exists(), name


def test_sweep_finds_k_star(tmp_path):
    write_run(tmp_path / "k5", "static", [0.2, 0.4, 0.5], 100, k=5)  # 300 s
    write_run(tmp_path / "k10", "static", [0.3, 0.5], 120, k=10)  # 240 s  <- k*
    write_run(tmp_path / "k20", "static", [0.3, 0.6], 200, k=20)  # 400 s
    write_run(tmp_path / "k40", "static", [0.1, 0.2], 300, k=40)  # not reached
    render(tmp_path)
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert [int(r["k"]) for r in rows] == [5, 10, 20, 40]
    assert "k* = 10" in (tmp_path / "report.html").read_text()
    assert (tmp_path / "static_k_sweep.png").read_bytes().startswith(PNG_MAGIC)


def test_errors_name_the_file_and_column(tmp_path):
    with pytest.raises(ReportError, match="rounds.csv"):
        load_run(tmp_path)
    (tmp_path / "rounds.csv").write_text("round,accuracy\n1,0.5\n")
    with pytest.raises(ReportError, match="missing column.*sim_time_s"):
        load_run(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportError, match="no rounds.csv"):
        render(empty)
