"""powertrip.app.report's plots of a run and of a comparison (real PNGs).

The runs are written by report_runs.make_run; `comparison_dir` (three policies, one never
reaching the target) is in conftest.py.
"""

from __future__ import annotations

from powertrip.app.report import load_run, plot_comparison, plot_run
from tests.unit.report_runs import assert_png, make_run


# ---- plots -----------------------------------------------------------------------------
def test_plot_run_writes_pngs(tmp_path):
    run = load_run(make_run(tmp_path, "powertrip", [0.3, 0.6, 0.82, 0.85], 300.0, ks=[4, 3, 2, 2]))
    paths = plot_run(run, tmp_path / "plots")
    names = sorted(p.name for p in paths)
    assert names == sorted(
        [
            "accuracy_vs_time.png",
            "k_vs_time.png",
            "round_breakdown.png",
            "predicted_vs_actual.png",
            "prediction_error.png",
            "site_map.png",
        ]
    )
    for path in paths:
        assert_png(path)


def test_plot_run_without_sites_skips_site_map(tmp_path):
    run = load_run(make_run(tmp_path, "random", [0.3, 0.5, 0.6], 300.0, sites=False))
    paths = plot_run(run, run.path)
    assert "site_map.png" not in {p.name for p in paths}
    assert not (run.path / "site_map.png").exists()
    assert len(paths) == 5


def test_plot_comparison_writes_pngs(comparison_dir):
    runs = [load_run(comparison_dir / p) for p in ("powertrip", "random", "all")]
    paths = plot_comparison(comparison_dir, runs)
    assert {p.name for p in paths} == {
        "accuracy_vs_time.png",
        "time_to_accuracy.png",
        "k_vs_time.png",
    }
    for path in paths:
        assert_png(path)
