"""powertrip.app.report on small hand-written run directories (no services, no training)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from powertrip.app.report import (
    ReportError,
    RunResult,
    best_k,
    comparison_rows,
    detect,
    format_table,
    load_run,
    plot_comparison,
    plot_run,
    plot_sweep,
    render,
    write_comparison,
)
from powertrip.app.report.comparison import accuracy_at_equal_time, covered_time_s, equal_time_s

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HEADER = (
    "round,sim_time_s,round_time_s,k,sites,accuracy,loss,compute_s,comm_s,wait_s,"
    "aggregation_s,predicted_round_time_s,bytes_up,bytes_down,straggler,mode,clock"
)
SITES = [
    {"site_id": f"site-{i:03d}", "power_fraction": p, "distance_miles": d,
     "bandwidth_bytes_per_s": 1.25e9 * 100 / d}
    for i, (p, d) in enumerate([(1.0, 150.0), (0.8, 900.0), (0.5, 2500.0), (0.2, 6000.0)])
]  # fmt: skip


def make_run(
    root: Path,
    policy: str,
    accuracies: list[float],
    round_s: float,
    ks: list[int] | None = None,
    target: float = 0.8,
    sites: bool = True,
    header: str = HEADER,
    stopped_reason: str | None = None,
    max_sim_hours: float = 0.0,
) -> Path:
    """Write config.yaml, rounds.csv and summary.json the way the aggregator does.

    Round i ends at round_s * (1.1 + 2.1 + ... ); the summary's stopped_reason defaults to
    'target' or 'max_rounds'."""
    run = root / policy
    run.mkdir(parents=True)
    ks = ks or [2] * len(accuracies)
    (run / "config.yaml").write_text(
        f"policy: {policy}\nworkload: synthetic\nnum_sites: 4\nseed: 7\nclock: simulated\n"
        f"work_model: local-steps\ntarget_accuracy: {target}\nupdate_size_gb: 2.5\n"
        f"max_sim_hours: {max_sim_hours}\n"
    )
    lines = [header]
    t = 0.0
    time_to_target = None
    for i, (acc, k) in enumerate(zip(accuracies, ks, strict=True), start=1):
        dt = round_s * (1 + 0.1 * i)
        t += dt
        chosen = ";".join(s["site_id"] for s in SITES[:k])
        lines.append(
            f"{i},{t},{dt},{k},{chosen},{acc},{1 - acc},{dt * 0.6},{dt * 0.35},{dt * 0.1},"
            f"{dt * 0.05},{dt * 0.9},1000,2000,site-001,normal,simulated"
        )
        if time_to_target is None and acc >= target:
            time_to_target = t
    (run / "rounds.csv").write_text("\n".join(lines) + "\n")
    summary = {
        "policy": policy,
        "workload": "synthetic",
        "clock": "simulated",
        "rounds": len(accuracies),
        "target_accuracy": target,
        "final_accuracy": accuracies[-1],
        "best_accuracy": max(accuracies),
        "time_to_target_s": time_to_target,
        "sim_time_s": t,
        "stopped_reason": stopped_reason or ("target" if time_to_target else "max_rounds"),
        "mean_k": sum(ks) / len(ks),
    }
    if sites:
        summary["sites"] = SITES
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    return run


def assert_png(path: Path) -> None:
    assert path.is_file(), path
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert len(data) > 5_000, f"{path} is suspiciously small ({len(data)} bytes)"


@pytest.fixture()
def comparison_dir(tmp_path: Path) -> Path:
    root = tmp_path / "compare"
    make_run(root, "powertrip", [0.3, 0.55, 0.72, 0.81, 0.84], 600.0, ks=[4, 3, 3, 2, 2])
    make_run(root, "random", [0.2, 0.4, 0.6, 0.7, 0.78, 0.82], 900.0, ks=[3] * 6)
    make_run(root, "all", [0.25, 0.45, 0.6, 0.7], 2400.0, ks=[4] * 4)  # never reaches 0.8
    (root / "logs").mkdir()  # the launcher's logs: not a run
    return root


# ---- reading ---------------------------------------------------------------------------
def test_load_run_parses_types(tmp_path):
    run = load_run(make_run(tmp_path, "powertrip", [0.5, 0.85, 0.9], 100.0, ks=[3, 2, 2]))
    assert run.name == "powertrip"
    assert run.rounds[0]["round"] == 1 and isinstance(run.rounds[0]["k"], int)
    assert run.rounds[1]["sites"] == ["site-000", "site-001"]
    assert run.column("k").tolist() == [3, 2, 2]
    assert run.reached and run.time_to_target_s == pytest.approx(100 * 1.1 + 100 * 1.2)
    assert run.config["seed"] == 7
    assert run.selected_sites() == {"site-000": 3, "site-001": 3, "site-002": 1}


def test_missing_rounds_csv_names_the_file(tmp_path):
    run = make_run(tmp_path, "powertrip", [0.5, 0.6, 0.7], 100.0)
    (run / "rounds.csv").unlink()
    with pytest.raises(ReportError, match="rounds.csv"):
        load_run(run)


def test_missing_summary_names_the_file(tmp_path):
    run = make_run(tmp_path, "powertrip", [0.5, 0.6, 0.7], 100.0)
    (run / "summary.json").unlink()
    with pytest.raises(ReportError, match="summary.json"):
        load_run(run)


def test_missing_column_names_the_column(tmp_path):
    header = HEADER.replace("predicted_round_time_s,", "")
    run = make_run(tmp_path, "powertrip", [0.5, 0.6, 0.7], 100.0)
    rows = (run / "rounds.csv").read_text().splitlines()
    kept = []
    drop = HEADER.split(",").index("predicted_round_time_s")
    for line in rows:
        cells = line.split(",")
        kept.append(",".join(cells[:drop] + cells[drop + 1 :]))
    assert kept[0] == header
    (run / "rounds.csv").write_text("\n".join(kept) + "\n")
    with pytest.raises(ReportError, match=r"rounds\.csv.*predicted_round_time_s"):
        load_run(run)


def test_bad_value_names_file_line_and_column(tmp_path):
    run = make_run(tmp_path, "powertrip", [0.5, 0.6, 0.7], 100.0)
    text = (run / "rounds.csv").read_text().replace(",0.6,", ",sixty,", 1)
    (run / "rounds.csv").write_text(text)
    with pytest.raises(ReportError, match=r"rounds\.csv, line 3: column 'accuracy'"):
        load_run(run)


def test_malformed_summary_names_key(tmp_path):
    run = make_run(tmp_path, "powertrip", [0.5, 0.6, 0.7], 100.0)
    summary = json.loads((run / "summary.json").read_text())
    del summary["sim_time_s"]
    (run / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ReportError, match=r"summary\.json.*sim_time_s"):
        load_run(run)
    (run / "summary.json").write_text("{not json")
    with pytest.raises(ReportError, match=r"summary\.json: invalid JSON"):
        load_run(run)


def test_unknown_columns_are_ignored(tmp_path):
    header = HEADER + ",extra_note"
    run = make_run(tmp_path, "powertrip", [0.5, 0.6], 100.0, header=header)
    lines = (run / "rounds.csv").read_text().splitlines()
    lines[1:] = [line + ",hello" for line in lines[1:]]
    (run / "rounds.csv").write_text("\n".join(lines) + "\n")
    assert len(load_run(run).rounds) == 2


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


# ---- comparison table ------------------------------------------------------------------
def test_comparison_csv_sorted_not_reached_last(comparison_dir):
    runs = [load_run(comparison_dir / p) for p in ("all", "random", "powertrip")]
    path = write_comparison(comparison_dir, runs)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [
        "policy",
        "time_to_target_s",
        "rounds",
        "final_accuracy",
        "best_accuracy",
        "sim_time_s",
        "reached",
        "acc_at_t",
        "t_s",
        "covered_s",
        "stopped_reason",
        "energy_to_target_kwh",
        "energy_kwh",
        "egress_usd_to_target",
        "egress_usd",
        "carbon_kg_to_target",
        "carbon_kg",
    ]
    assert [r["policy"] for r in rows] == ["powertrip", "random", "all"]
    assert [r["reached"] for r in rows] == ["true", "true", "false"]
    assert rows[2]["time_to_target_s"] == ""
    assert float(rows[0]["time_to_target_s"]) < float(rows[1]["time_to_target_s"])
    assert rows[1]["rounds"] == "6"
    assert float(rows[2]["final_accuracy"]) == pytest.approx(0.7)
    # T = powertrip's time to target (4 rounds of 600 s x 1.1..1.4 = 3000 s), in every row
    assert {r["t_s"] for r in rows} == {"3000.0"}
    assert [float(r["acc_at_t"]) for r in rows] == pytest.approx([0.81, 0.4, 0.25])


def test_format_table_shows_not_reached(comparison_dir):
    runs = [load_run(comparison_dir / p) for p in ("all", "random", "powertrip")]
    table = format_table(runs)
    lines = table.splitlines()
    assert lines[0].split()[0] == "policy"
    assert [line.split()[0] for line in lines[2:5]] == ["powertrip", "random", "all"]
    assert lines[5].startswith("acc@T: ") and len(lines) == 6
    sim_h = runs[0].sim_time_s / 3600
    assert f"not reached (> {sim_h:.3f} h)" in lines[4]
    ttt_h = runs[2].time_to_target_s / 3600
    assert f"{ttt_h:.3f}" in lines[2]
    # fixed width: every data line starts its second column at the same offset
    col = lines[0].index("time to target")
    assert all(line[col - 2 : col] == "  " for line in lines[2:5])


def test_format_table_accepts_csv_rows(comparison_dir):
    runs = [load_run(comparison_dir / p) for p in ("all", "random", "powertrip")]
    with write_comparison(comparison_dir, runs).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert format_table(rows) == format_table(runs)


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


# ---- accuracy at equal time -----------------------------------------------------------
# make_run's round i of round_s seconds ends at round_s x 1.1, 2.3, 3.6, 5.0, 6.5, ...
def test_acc_at_t_is_taken_at_the_earliest_time_to_target(tmp_path):
    root = tmp_path / "cmp"
    make_run(root, "fast", [0.3, 0.6, 0.85], 1000.0)  # reaches 0.8 at 3600 s: T
    make_run(root, "slow", [0.2, 0.4, 0.5, 0.7, 0.9], 1000.0)  # 6500 s; 0.5 at T
    make_run(root, "steady", [0.5, 0.6, 0.7, 0.75], 800.0)  # misses; 0.7 at T (2880 s)
    make_run(root, "spiky", [0.1, 0.2, 0.3, 0.4, 0.79], 700.0)  # misses; best 0.79, 0.4 at T
    make_run(root, "cut", [0.5, 0.6], 1000.0)  # round cap at 2300 s < T: unknown at T
    runs = [load_run(root / p) for p in ("cut", "spiky", "steady", "slow", "fast")]
    assert equal_time_s(runs) == pytest.approx(3600.0)
    rows = comparison_rows(runs)
    # by time to target, then by acc@T (not by best accuracy: spiky's 0.79 came late)
    assert [r["policy"] for r in rows] == ["fast", "slow", "steady", "spiky", "cut"]
    assert [r["acc_at_t"] for r in rows] == pytest.approx([0.85, 0.5, 0.7, 0.4, None])
    assert [r["t_s"] for r in rows] == pytest.approx([3600.0] * 5)

    lines = format_table(runs).splitlines()
    assert "acc@T=1.000h" in lines[0].split()
    col = lines[0].index("acc@T")
    cells = {line.split()[0]: line[col : col + len("acc@T=1.000h")].strip() for line in lines[2:7]}
    assert cells == {
        "fast": "0.8500",
        "slow": "0.5000",
        "steady": "0.7000",
        "spiky": "0.4000",
        "cut": "-",
    }
    notes = lines[7:]
    assert notes[0] == (
        "acc@T: the accuracy each policy held at T = 1.000 h, the earliest time to target (fast)."
    )
    assert "stopped before T" in notes[1] and "cut at 0.639 h (max_rounds)" in notes[1]


def test_acc_at_t_without_a_winner_is_taken_at_the_shortest_time_covered(tmp_path):
    root = tmp_path / "cmp"
    # stopped by a 1 h budget: the next round would have ended past it, so the last model
    # is the one each run held until 1 h
    make_run(root, "a", [0.3, 0.5, 0.6], 900.0, stopped_reason="time_budget", max_sim_hours=1.0)
    make_run(root, "b", [0.2, 0.65], 1500.0, stopped_reason="time_budget", max_sim_hours=1.0)
    # cut off earlier, at 0.9 h (a budget factor): it sets T
    make_run(root, "c", [0.4, 0.55], 1200.0, stopped_reason="time_budget", max_sim_hours=0.9)
    runs = [load_run(root / p) for p in ("b", "c", "a")]
    assert [covered_time_s(r) for r in runs] == pytest.approx([3600.0, 3240.0, 3600.0])
    assert [r.sim_time_s for r in runs] == pytest.approx([3450.0, 2760.0, 3240.0])
    assert equal_time_s(runs) == pytest.approx(3240.0)
    rows = comparison_rows(runs)
    # b has the best accuracy (0.65) but only from 3450 s on; at T it still held 0.2
    assert [r["policy"] for r in rows] == ["a", "c", "b"]
    assert [r["acc_at_t"] for r in rows] == pytest.approx([0.6, 0.55, 0.2])
    table = format_table(runs)
    assert "acc@T=0.900h" in table.splitlines()[0]
    assert "not reached (> 1.000 h)" in table  # the budget, not the last round (0.900 h)
    assert table.splitlines()[-1] == (
        "acc@T: the accuracy each policy held at T = 0.900 h, the shortest time every run "
        "covered, as no policy reached the target."
    )


def test_acc_at_t_of_a_run_with_no_round_inside_its_budget(tmp_path):
    run = RunResult(
        path=tmp_path,
        config={"max_sim_hours": 1.0},
        rounds=[],
        summary={"stopped_reason": "time_budget", "sim_time_s": 0.0, "rounds": 0},
    )
    assert covered_time_s(run) == pytest.approx(3600.0)
    assert accuracy_at_equal_time(run, 1800.0) == 0.0  # nothing trained by T
    assert accuracy_at_equal_time(run, 4000.0) is None  # past its budget: unknown


def test_old_comparison_csv_without_acc_at_t_still_formats(comparison_dir):
    runs = [load_run(comparison_dir / p) for p in ("all", "random", "powertrip")]
    with write_comparison(comparison_dir, runs).open(newline="") as f:
        rows = [
            {k: v for k, v in r.items() if k in ("policy", "time_to_target_s", "rounds",
                                                 "final_accuracy", "best_accuracy",
                                                 "sim_time_s", "reached")}
            for r in csv.DictReader(f)
        ]  # fmt: skip
    lines = format_table(rows).splitlines()
    assert lines[0].split()[:5] == ["policy", "time", "to", "target", "(h)"]
    assert "acc@T" in lines[0] and "predates" in lines[-1]


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
