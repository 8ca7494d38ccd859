"""A reproduction's seed folder keeps its runs' site table once (sites.json), and a report
reads each run exactly as before (powertrip/app/experiments/sitetables.py)."""

from __future__ import annotations

import json

from powertrip.app.experiments.sitetables import share_all, share_site_tables
from powertrip.app.report.rundir import read_summary

SITES = [{"site_id": f"site-{i:03d}", "power_fraction": 0.1 * i, "distance_miles": 100.0 * i}
         for i in range(1, 4)]  # fmt: skip


def _run(seed_dir, name, sites):
    run = seed_dir / name
    run.mkdir(parents=True)
    summary = {"policy": name, "status": "done", "rounds": 3, "sites": sites}
    (run / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return run / "summary.json"


def test_the_table_is_kept_once_and_read_back_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setattr("powertrip.app.report.rundir.SUMMARY_KEYS", ("policy",))
    seed = tmp_path / "runs" / "uniform" / "seed0"
    a, b = _run(seed, "powertrip", SITES), _run(seed, "static-k3", SITES)
    other = _run(seed, "odd", SITES[:2])  # another table: kept in its own summary
    before = {p: read_summary(p) for p in (a, b, other)}
    saved = share_all(tmp_path / "runs")
    assert saved > 0
    assert json.loads((seed / "sites.json").read_text()) == SITES
    assert "sites" not in json.loads(a.read_text()) and "sites" not in json.loads(b.read_text())
    assert json.loads(other.read_text())["sites"] == SITES[:2]
    for path, summary in before.items():
        assert read_summary(path) == summary
    assert share_site_tables(seed) == 0  # done once: nothing more to take out
