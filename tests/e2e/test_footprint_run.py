"""A tiny real run whose energy, egress cost and carbon are worked out by hand (issue #20):
four identical sites, all selected, so every number follows from the settings alone."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# the settings, and what they make of one site in one round:
GPUS = 0.5 * 4  # power fraction 0.5 of 4 GPUs: 2 effective GPUs
COMPUTE_S = 10.0 / 0.5  # tau / p = 20 s
PROPAGATION_S = 1000 * 1609.344 / (299_792_458.0 * 2 / 3)  # 1,000 miles of fibre
COMM_S = PROPAGATION_S + 1e9 / (1.25e9 * 100 / 1000)  # D/c + M/B: 1 GB at 1 Gbit/s = 8 s
ACTIVE_J = GPUS * 100.0 * COMPUTE_S  # 100 W a GPU: 4,000 J
IDLE_J = GPUS * 10.0 * COMM_S  # 10 W idle while its update crosses the link (no one waits)
SITE_J = ACTIVE_J + IDLE_J  # 4,160.16 J
KWH = 3.6e6


def run_all_sites(out, sites: int, settings: dict, env: dict | None = None) -> None:
    """`powertrip run` of `sites` synthetic sites, every one selected, for two rounds, with
    each of `settings` as a --set; fails the test with the run's stderr."""
    sets = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    done = subprocess.run(
        [sys.executable, "-m", "powertrip.app.cli", "run", "--workload", "synthetic", "--sites",
         str(sites), "--policy", "all", "--max-rounds", "2", "--target-accuracy", "0.99",
         "--out", str(out), "--quiet", *sets],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_tiny_run_charges_the_hand_computed_footprint(tmp_path):
    trace = tmp_path / "carbon.csv"
    trace.write_text("site_id,g_per_kwh\nsite-000,100\n")  # the others: 400 g/kWh
    settings = {
        "min_power": 0.5, "max_power": 0.5, "gpus_per_site": 4, "tau_s": 10,
        "update_size_gb": 1, "min_distance_miles": 1000, "max_distance_miles": 1000,
        "distance_distribution": "uniform", "reference_bandwidth_gbps": 10,
        "gpu_power_w": 100, "gpu_idle_power_w": 10, "egress_usd_per_gb": 0.05,
        "carbon_g_per_kwh": 400, "carbon_trace": str(trace),
        "delta_encoding": "fp32",  # M = the whole 1 GB on the wire (int8 would send a quarter)
    }  # fmt: skip
    out = tmp_path / "run"
    run_all_sites(out, 4, settings)
    rows = list(csv.DictReader((out / "rounds.csv").open(newline="")))
    assert len(rows) == 2
    for row in rows:
        assert int(row["k"]) == 4
        assert float(row["compute_s"]) == pytest.approx(COMPUTE_S)
        assert float(row["comm_s"]) == pytest.approx(COMM_S)
        assert float(row["energy_j"]) == pytest.approx(4 * SITE_J)  # 16,640.64 J
        assert float(row["idle_energy_j"]) == pytest.approx(4 * IDLE_J)  # 640.64 J
        assert float(row["egress_gb"]) == pytest.approx(4.0)
        assert float(row["egress_usd"]) == pytest.approx(0.20)
        # site-000 at 100 g/kWh (the trace), the other three at 400
        assert float(row["carbon_g"]) == pytest.approx(SITE_J / KWH * (100 + 3 * 400))  # 1.502
    summary = json.loads((out / "summary.json").read_text())
    assert summary["energy_kwh"] == pytest.approx(2 * 4 * SITE_J / KWH)
    assert summary["idle_energy_kwh"] == pytest.approx(2 * 4 * IDLE_J / KWH)
    assert summary["egress_gb"] == pytest.approx(8.0)
    assert summary["egress_usd"] == pytest.approx(0.40)
    assert summary["carbon_kg"] == pytest.approx(2 * SITE_J / KWH * 1300 / 1000)
    assert summary["energy_to_target_kwh"] is None  # 99 % was not reached
    assert summary["footprint"]["carbon_trace"] == str(trace)


def test_a_regions_run_charges_each_site_its_own_grid(tmp_path):
    """Three Google Cloud regions nearest europe-west4 (the default aggregator): St. Ghislain
    (122 g/kWh, 241 miles away), Frankfurt (345 g, 243 miles) and Eemshaven itself (236 g,
    placed at the 100-mile floor). No idle power, so each site's energy is its compute's
    alone, the same at every site, and the round's carbon is that energy x the three
    intensities; the straggler is Frankfurt's link."""
    settings = {
        "population": "regions", "min_power": 0.5, "max_power": 0.5, "gpus_per_site": 4,
        "tau_s": 10, "update_size_gb": 1, "delta_encoding": "fp32",
        "reference_bandwidth_gbps": 10, "gpu_power_w": 100, "gpu_idle_power_w": 0,
    }  # fmt: skip
    out = tmp_path / "run"
    run_all_sites(out, 3, settings)
    frankfurt_miles = 242.6  # great circle, Eemshaven to Frankfurt am Main
    frankfurt_comm_s = frankfurt_miles * 1609.344 / (299_792_458.0 * 2 / 3) + 1e9 / (
        1.25e9 * 100 / frankfurt_miles
    )
    for row in csv.DictReader((out / "rounds.csv").open(newline="")):
        assert int(row["k"]) == 3
        assert float(row["comm_s"]) == pytest.approx(frankfurt_comm_s, rel=1e-3)
        assert float(row["carbon_g"]) == pytest.approx(ACTIVE_J / KWH * (122 + 345 + 236))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["carbon_kg"] == pytest.approx(2 * ACTIVE_J / KWH * (122 + 345 + 236) / 1e3)
    report = (out / "report.html").read_text()
    assert "St. Ghislain (BE)" in report and "Frankfurt (DE)" in report and ">241<" in report


def test_a_wall_clock_run_charges_what_codecarbon_measured(tmp_path):
    """Site workers with --codecarbon (POWERTRIP_SITE_WORKER_CODECARBON=1, inherited by the
    embedded workers) report each task's measured joules; the run's summary and report say
    which of codecarbon's methods measured them (on this CPU without RAPL: its estimate)."""
    pytest.importorskip("codecarbon", reason="needs the carbon extra: pip install -e '.[carbon]'")
    out = tmp_path / "run"
    run_all_sites(
        out, 2, {"clock": "wall"}, env={**os.environ, "POWERTRIP_SITE_WORKER_CODECARBON": "1"}
    )
    summary = json.loads((out / "summary.json").read_text())
    meters = summary["energy_meters"]
    assert sorted(meters) == ["site-000", "site-001"]
    assert all(source.startswith("codecarbon") for source in meters.values()), meters
    for row in csv.DictReader((out / "rounds.csv").open(newline="")):
        assert float(row["energy_j"]) > 0
    assert "energy measured by codecarbon" in (out / "report.html").read_text()
