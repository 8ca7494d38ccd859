"""powertrip.app.report's render: what a directory is (run, comparison, static-k sweep, else an
error), its report.html and files, runs drawn in a pool, a policy run's label kept.

The runs are written by report_runs.make_run; `comparison_dir` (three policies, one never
reaching the target) is in conftest.py.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from powertrip.app.report import ReportError, best_k, detect, load_run, plot_sweep, render
from tests.unit.report_runs import assert_png, make_run


# ---- render / detection ----------------------------------------------------------------
def test_render_run_dir(tmp_path):
    run = make_run(tmp_path, "powertrip", [0.3, 0.6, 0.82], 300.0)
    assert detect(run) == "run"
    report = render(run)
    assert report == run / "report.html"
    text = report.read_text()
    for name in ("accuracy_vs_time.png", "k_vs_time.png", "site_map.png"):
        assert f'src="{name}"' in text
        assert_png(run / name)
    assert "simulated clock: time from the model, real training" in text
    assert "2.5 GB" in text and "local-steps" in text
    assert "<script" not in text


def test_render_comparison_dir(comparison_dir):
    assert detect(comparison_dir) == "comparison"
    report = render(comparison_dir)
    text = report.read_text()
    assert (comparison_dir / "comparison.csv").is_file()
    for name in ("accuracy_vs_time.png", "time_to_accuracy.png", "k_vs_time.png"):
        assert f'src="{name}"' in text
        assert_png(comparison_dir / name)
    assert "not reached" in text
    assert "<th>acc@T=0.833h</th>" in text
    assert "the earliest time to target (powertrip)" in text
    assert text.index(">powertrip<") < text.index(">random<") < text.index(">all<")
    assert 'href="powertrip/report.html"' in text
    assert (comparison_dir / "powertrip" / "report.html").is_file()


def make_sweep(root: Path) -> Path:
    # k=10 slow rounds, k=20 fastest, k=30 slower, k=40 never reaches: a convex curve
    make_run(root, "k10", [0.4, 0.6, 0.75, 0.81], 900.0, ks=[10] * 4)
    make_run(root, "k20", [0.5, 0.7, 0.82], 700.0, ks=[20] * 3)
    make_run(root, "k30", [0.55, 0.72, 0.83], 1200.0, ks=[30] * 3)
    make_run(root, "k40", [0.5, 0.6, 0.7], 2000.0, ks=[40] * 3)
    return root


def test_sweep_picks_k_star(tmp_path):
    root = make_sweep(tmp_path / "sweep")
    ks = [10, 20, 30, 40]
    runs = [load_run(root / f"k{k}") for k in ks]
    assert best_k(runs, ks) == 20
    assert best_k(runs[3:], ks[3:]) is None
    (path,) = plot_sweep(root, runs, ks)
    assert path.name == "static_k_sweep.png"
    assert_png(path)


def test_render_sweep_dir(tmp_path):
    root = make_sweep(tmp_path / "sweep")
    assert detect(root) == "sweep"
    report = render(root)
    with (root / "sweep.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["k", "time_to_target_s", "rounds", "final_accuracy", "reached"]
    assert [r["k"] for r in rows] == ["10", "20", "30", "40"]
    assert [r["reached"] for r in rows] == ["true", "true", "true", "false"]
    text = report.read_text()
    assert "k* = 20" in text
    assert 'src="static_k_sweep.png"' in text
    assert_png(root / "static_k_sweep.png")
    assert detect(root) == "sweep"  # still a sweep once sweep.csv exists


def test_render_rejects_other_dirs(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="not a run directory"):
        render(tmp_path / "empty")
    with pytest.raises(ReportError, match="not a directory"):
        render(tmp_path / "missing")


def test_runs_render_in_a_pool_with_the_same_files_and_errors(comparison_dir, monkeypatch):
    """render_runs draws runs in spawned processes: the same bytes as one after the other,
    and a run that cannot be rendered fails the caller with its own error."""
    import os

    from powertrip.app.report.render import render_runs
    from powertrip.app.report.rundir import run_subdirs

    runs = run_subdirs(comparison_dir)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    render_runs(runs)
    serial = {p: p.read_bytes() for run in runs for p in sorted(run.glob("*.png"))}
    for path in serial:
        path.unlink()
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    render_runs(runs)
    assert {p: p.read_bytes() for run in runs for p in sorted(run.glob("*.png"))} == serial

    with pytest.raises(ReportError, match="logs/config.yaml: file is missing"):
        render_runs([*runs, comparison_dir / "logs"])


def test_a_rerendered_comparison_keeps_the_label_of_a_policy_run_with_its_own_params(tmp_path):
    """`compare --policies static:k=3,static` names its rows by the spec; rendering the
    directory again (`powertrip report`, or compare's own last step) must keep them apart."""
    from powertrip.app.report.render import spec_label
    from powertrip.core.config import RunConfig

    params = RunConfig(policy="static", policy_params={"k": 3}).to_dict()
    assert spec_label(tmp_path / "static-k3", params) == "static:k=3"
    assert spec_label(tmp_path / "static", RunConfig(policy="static").to_dict()) == ""
    adaptive = RunConfig(policy="adaptive", policy_params={"probe_cost": 0.2}).to_dict()
    assert spec_label(tmp_path / "adaptive-probe_cost0.2", adaptive) == "adaptive:probe_cost=0.2"
