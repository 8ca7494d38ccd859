"""`powertrip reproduce` end to end on a tiny synthetic suite: real services over gRPC, real
training, claims tables and reports; a second invocation skips every finished run and a
run with no summary (killed) is run again."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ARGS = ("--workload", "synthetic", "--quick", "--seeds", "2", "--k", "2,5", "--quiet")


def reproduce(out, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "powertrip.cli", "reproduce", *ARGS, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_reproduce_runs_reports_and_resumes(tmp_path):
    out = tmp_path / "rep"
    first = reproduce(out, "--figure", "8,10")
    assert "ran 6, skipped 0, failed 0" in first.stdout  # Figs. 8 and 10 share their runs
    runs = sorted(p.parent.relative_to(out).as_posix() for p in out.glob("runs/*/*/*/summary.json"))
    assert runs == [
        f"runs/uniform/seed{s}/{arm}"
        for s in (0, 1)
        for arm in ("powertrip", "static-k2", "static-k5")
    ]
    for figure in ("8", "10"):
        with (out / f"fig{figure}" / "claims.csv").open() as f:
            reader = csv.DictReader(f)
            rows = list(reader)
        assert {"figure", "claim", "paper", "ours", "holds"} <= set(reader.fieldnames or [])
        assert rows and all(r["figure"] == figure for r in rows)
        assert all(r["holds"] in ("yes", "yes*", "no", "unclear", "n/a") for r in rows)
        html = (out / f"fig{figure}" / "report.html").read_text()
        assert "The paper" in html and "holds?" in html
    assert (out / "fig8" / "fig8_static_k_sweep.png").stat().st_size > 0
    assert (out / "fig10" / "fig10_k_over_time.png").stat().st_size > 0
    assert (out / "fig10" / "prediction_error.png").stat().st_size > 0
    summary = (out / "claims.md").read_text()
    assert "| figure | claim | paper | ours | holds | why |" in summary and "QUICK" in summary
    with (out / "claims.csv").open() as f:
        assert {r["figure"] for r in csv.DictReader(f)} == {"8", "10"}

    stamp = (out / "runs/uniform/seed0/powertrip/summary.json").stat().st_mtime_ns
    again = reproduce(out, "--figure", "10")
    assert "ran 0, skipped 6, failed 0" in again.stdout
    assert (out / "runs/uniform/seed0/powertrip/summary.json").stat().st_mtime_ns == stamp

    (out / "runs/uniform/seed1/static-k5/summary.json").unlink()  # as if killed mid-run
    resumed = reproduce(out, "--figure", "10")
    assert "ran 1, skipped 5, failed 0" in resumed.stdout
    assert "ran uniform/s1/static-k5" in resumed.stdout

    rendered = reproduce(out, "--figure", "8", "--report-only")
    assert "ran " not in rendered.stdout and (out / "fig8" / "report.html").exists()
