"""powertrip.app.report's objectives besides time (report/objectives.py): energy, egress cost
and carbon to target rank the comparison and get their plots; older runs keep their table.

The runs are written by report_runs.make_run; `comparison_dir` (three policies, one never
reaching the target) is in conftest.py.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from powertrip.app.report import comparison_rows, format_table, load_run, render, write_comparison
from tests.unit.report_runs import assert_png


# ---- energy, egress cost and carbon to target (report/objectives.py) -------------------
def _price(run: Path, energy: float, usd: float, kg: float, reached: bool) -> None:
    """Add the aggregator's footprint keys to a made run's summary."""
    summary = json.loads((run / "summary.json").read_text())
    summary.update(
        energy_kwh=energy * 1.5, egress_usd=usd * 1.5, carbon_kg=kg * 1.5,
        energy_to_target_kwh=energy if reached else None,
        egress_usd_to_target=usd if reached else None,
        carbon_kg_to_target=kg if reached else None,
        footprint={"gpu_power_w": 250.0, "gpu_idle_power_w": 50.0, "egress_usd_per_gb": 0.02,
                   "carbon_g_per_kwh": 481.0, "carbon_trace": None},
    )  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))


@pytest.fixture()
def priced_dir(comparison_dir: Path) -> Path:
    # powertrip is fastest but uses the most energy; random is slower and frugal
    _price(comparison_dir / "powertrip", 12.0, 3.0, 5.0, reached=True)
    _price(comparison_dir / "random", 4.0, 1.2, 2.0, reached=True)
    _price(comparison_dir / "all", 30.0, 9.0, 14.0, reached=False)
    return comparison_dir


def test_each_objective_ranks_the_comparison(priced_dir):
    runs = [load_run(priced_dir / p) for p in ("all", "random", "powertrip")]
    assert [r["policy"] for r in comparison_rows(runs)] == ["powertrip", "random", "all"]
    for objective in ("energy", "cost", "carbon"):
        rows = comparison_rows(runs, objective)
        assert [r["policy"] for r in rows] == ["random", "powertrip", "all"], objective
    table = format_table(runs, "energy").splitlines()
    assert table[0].split("  ")[-3:] == ["kWh to target", "egress $ to target", "kg CO2 to target"]
    assert table[2].split()[0] == "random"
    assert table[2].split()[-3:] == ["4.000", "1.20", "2.000"]
    assert table[4].split()[-6:] == [">", "45.000", ">", "13.50", ">", "21.000"]  # spent so far
    assert "GPU 250 W computing, 50 W idle; egress $0.02/GB; 481 gCO2/kWh" in "\n".join(table)
    assert table[-1] == "Ranked by energy to target (runs that reached it first)."
    with write_comparison(priced_dir, runs, "cost").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["random", "powertrip", "all"]
    assert rows[0]["energy_to_target_kwh"] == "4.0" and rows[2]["energy_to_target_kwh"] == ""
    # read back, the table is the same but for the settings, which comparison.csv lacks
    from_csv, from_runs = format_table(rows, "cost"), format_table(runs, "cost")
    assert from_csv.splitlines()[:-2] == from_runs.splitlines()[:-2]
    assert "see its summary.json" in from_csv.splitlines()[-2]


def test_the_report_plots_every_objective(priced_dir):
    text = render(priced_dir, "carbon").read_text()
    for name in ("time", "energy", "cost", "carbon"):
        assert f'src="{name}_to_accuracy.png"' in text
        assert_png(priced_dir / f"{name}_to_accuracy.png")
    assert "Least carbon to target first" in text and "<th>kg CO2 to target</th>" in text


def test_runs_from_before_the_footprint_keep_their_table(comparison_dir):
    runs = [load_run(comparison_dir / p) for p in ("all", "random", "powertrip")]
    assert "kWh" not in format_table(runs)  # no run has a footprint: no columns, no plots
    assert not (comparison_dir / "energy_to_accuracy.png").exists()
