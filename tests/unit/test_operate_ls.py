"""`powertrip ls DIR`: every run under a directory with where it stands, as a table or as
JSON that scripts parse (powertrip/app/operate.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from powertrip.app import operate
from powertrip.core import runfiles


def _run(path, status="done", **summary):
    path.mkdir(parents=True)
    (path / runfiles.ROUNDS).write_text("round,accuracy\n1,0.1\n2,0.2\n")
    if status is not None:
        body = {"status": status, "policy": "static", "rounds": 2, "final_accuracy": 0.2}
        (path / runfiles.SUMMARY).write_text(json.dumps({**body, **summary}))


def test_ls_lists_done_failed_and_unfinished_runs_and_not_their_subfolders(tmp_path):
    _run(tmp_path / "a" / "static-k3", time_to_target_h=1.5)
    _run(tmp_path / "a" / "powertrip", status="failed", policy="powertrip")
    _run(tmp_path / "b", status=None)  # killed before its summary
    (tmp_path / "b" / runfiles.LOGS_DIR).mkdir()
    rows = json.loads(operate.ls_output(tmp_path, "json"))
    assert [(r["run"], r["state"]) for r in rows] == [
        ("a/powertrip", "failed"),
        ("a/static-k3", "done"),
        ("b", operate.IN_PROGRESS),
    ]
    assert rows[1]["time_to_target_h"] == 1.5 and rows[2]["rounds"] == 2
    text = operate.ls_output(tmp_path, "table").splitlines()
    assert text[0].split()[:3] == ["run", "state", "policy"] and len(text) == 4


def test_ls_through_the_cli_parses_as_json_and_names_a_missing_directory(tmp_path):
    _run(tmp_path / "r")
    cli = [sys.executable, "-m", "powertrip", "ls"]
    done = subprocess.run([*cli, str(tmp_path), "--format", "json"], capture_output=True, text=True)
    assert done.returncode == 0 and json.loads(done.stdout)[0]["run"] == "r"
    missing = subprocess.run([*cli, str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 2 and "nope: no such directory" in missing.stderr
