"""powertrip.app.report's comparison table (comparison.csv and the text table, runs that never
reached the target last) and its accuracy at equal time (acc@T).

The runs are written by report_runs.make_run; `comparison_dir` (three policies, one never
reaching the target) is in conftest.py.
"""

from __future__ import annotations

import csv

import pytest

from powertrip.app.report import (
    RunResult,
    comparison_rows,
    format_table,
    load_run,
    write_comparison,
)
from powertrip.app.report.comparison import accuracy_at_equal_time, covered_time_s, equal_time_s
from tests.unit.report_runs import make_run


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
