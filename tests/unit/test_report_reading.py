"""powertrip.app.report reading a run directory: types parsed, and a missing file, column or
key or a bad value named in the error; unknown columns ignored.

The runs are written by report_runs.make_run; `comparison_dir` (three policies, one never
reaching the target) is in conftest.py.
"""

from __future__ import annotations

import json

import pytest

from powertrip.app.report import ReportError, load_run
from tests.unit.report_runs import HEADER, make_run


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
