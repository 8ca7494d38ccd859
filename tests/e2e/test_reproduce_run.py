"""`powertrip reproduce` end to end on a tiny synthetic suite: real services over gRPC, real
training, claims tables and reports; a second invocation skips every finished run and a
run with no summary (killed) is run again."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ARGS = ("--workload", "synthetic", "--quick", "--seeds", "2", "--k", "2,5", "--quiet")


def reproduce(out, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "powertrip.app.cli", "reproduce", *ARGS, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def refined(out) -> list[int]:
    """The refinement's k values the invocation chose (the midpoint beside k*, if any)."""
    return json.loads((out / "reproduce.json").read_text()).get("refined", {}).get("uniform", [])


def test_reproduce_runs_reports_and_resumes(tmp_path):
    out = tmp_path / "rep"
    first = reproduce(out, "--figure", "8,10")
    extra = refined(out)
    assert extra in ([], [3])  # grid 2, 5: the midpoint 3 unless k* is only a bound
    arms = sorted(["powertrip", "static-k2", "static-k5", *(f"static-k{k}" for k in extra)])
    total = 2 * len(arms)
    assert f"ran {total}, skipped 0, failed 0" in first.stdout  # Figs. 8 and 10 share runs
    assert "run 1/6: uniform/s0/powertrip" in first.stdout and "ETA" in first.stdout
    runs = sorted(p.parent.relative_to(out).as_posix() for p in out.glob("runs/*/*/*/summary.json"))
    assert runs == [f"runs/uniform/seed{s}/{arm}" for s in (0, 1) for arm in arms]
    for figure in ("8", "10"):
        with (out / f"fig{figure}" / "claims.csv").open() as f:
            reader = csv.DictReader(f)
            rows = list(reader)
        assert {"figure", "claim", "paper", "ours", "holds"} <= set(reader.fieldnames or [])
        assert rows and all(r["figure"] == figure for r in rows)
        assert all(r["holds"] in ("yes", "yes*", "no", "unclear", "n/a") for r in rows)
        html = (out / f"fig{figure}" / "report.html").read_text()
        assert "The paper" in html and "holds?" in html
    fig8 = (out / "fig8" / "claims.csv").read_text()
    assert "grid [2, 5]" in fig8 and (not extra or "refined [3]" in fig8)
    assert (out / "fig8" / "fig8_static_k_sweep.png").stat().st_size > 0
    assert (out / "fig10" / "fig10_k_over_time.png").stat().st_size > 0
    assert (out / "fig10" / "prediction_error.png").stat().st_size > 0
    summary = (out / "claims.md").read_text()
    assert "| figure | claim | paper | ours | holds | why |" in summary and "QUICK" in summary
    with (out / "claims.csv").open() as f:
        assert {r["figure"] for r in csv.DictReader(f)} == {"8", "10"}

    # what an earlier command recorded for another set-up survives this one's record
    record_file = out / "reproduce.json"
    record = json.loads(record_file.read_text())
    record["refined"]["trace"] = [4]
    record["deferred"] = {**record.get("deferred", {}), "static-k@trace*": 4}
    record_file.write_text(json.dumps(record))
    stamp = (out / "runs/uniform/seed0/powertrip/summary.json").stat().st_mtime_ns
    again = reproduce(out, "--figure", "10")
    assert f"ran 0, skipped {total}, failed 0" in again.stdout
    record = json.loads(record_file.read_text())
    assert record["refined"]["trace"] == [4] and refined(out) == extra
    assert record["deferred"]["static-k@trace*"] == 4
    assert record["figures"] == ["8", "10"]
    assert (out / "runs/uniform/seed0/powertrip/summary.json").stat().st_mtime_ns == stamp

    (out / "runs/uniform/seed1/static-k5/summary.json").unlink()  # as if killed mid-run
    resumed = reproduce(out, "--figure", "10")
    assert f"ran 1, skipped {total - 1}, failed 0" in resumed.stdout
    assert "ran uniform/s1/static-k5" in resumed.stdout

    rendered = reproduce(out, "--figure", "8", "--report-only")
    assert "ran " not in rendered.stdout and (out / "fig8" / "report.html").exists()


def test_figs_6_7_and_the_ablation_run_end_to_end(tmp_path):
    out = tmp_path / "rep"
    done = reproduce(out, "--figure", "7,ablation", "--no-refine", "--seeds", "1")
    assert "failed 0" in done.stdout
    ideal = sorted(p.name for p in (out / "runs/ideal/seed0").iterdir() if p.name != "logs")
    assert [n for n in ideal if n.startswith("static")] == sorted(
        ["static-k1", "static-k2", "static-k5", "static-k10"]
    )
    assert "static-k@uniform* -> static-k" in done.stdout
    kstar = done.stdout.split("static-k@uniform* -> ")[1].split()[0]
    for variant in (
        "two-directions",
        "data-parallel",
        "power-split",
        "uniform-distances",
        "clock-estimator",
    ):
        for arm in ("powertrip", kstar):
            assert (out / "runs" / variant / "seed0" / arm / "summary.json").is_file(), (
                variant,
                arm,
            )
    config = (out / "runs/two-directions/seed0/powertrip/run-config.yaml").read_text()
    assert "comm_directions: 2" in config and "patience: 3.0" in config  # every parameter
    html = (out / "ablation" / "report.html").read_text()
    assert "PowerTrip faster?" in html and "comm_directions 1 -&gt; 2" in html
    assert (out / "fig6-7" / "fig7_accuracy_time_speedup.png").stat().st_size > 0
    with (out / "claims.csv").open() as f:
        assert {r["figure"] for r in csv.DictReader(f)} == {"6-7", "ablation"}


def _ran(text: str) -> set[str]:
    return {
        line.split()[1] for line in text.splitlines() if line.startswith("ran ") and "/" in line
    }


def test_jobs_run_each_group_in_one_process_and_report_once(tmp_path):
    """--jobs 2: a helper process beside the command; every run made once, by one of them,
    then the command alone refines and renders."""
    out = tmp_path / "rep"
    done = reproduce(out, "--figure", "8", "--jobs", "2", "--no-refine")
    helper_log = out / "jobs" / "helper-1.log"
    assert f"reproduce helper 1 started, its log: {helper_log}" in done.stdout
    mine, theirs = _ran(done.stdout), _ran(helper_log.read_text())
    expected = {f"uniform/s{s}/{arm}" for s in (0, 1) for arm in ("static-k2", "static-k5")}
    assert mine | theirs == expected and not mine & theirs, (mine, theirs)
    assert theirs, "the helper ran no group"  # two groups, two processes
    assert "busy uniform seed" in done.stdout + helper_log.read_text()
    assert "figure 8:" in done.stdout and "figure 8:" not in helper_log.read_text()
    assert "left to another reproduce" not in done.stderr  # its own helper's groups are done
    assert "ran 2, skipped 2, failed 0" in done.stdout  # the helper's 2 re-checked: done
    assert (out / "fig8" / "report.html").is_file()
    assert json.loads((out / "reproduce.json").read_text())["seeds"] == [0, 1]
