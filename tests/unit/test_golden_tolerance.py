"""The golden runs' check for a kernel family with no record (tests/golden/golden.py): every
column of a static run's rounds.csv equal to the reference family's but accuracy and losses,
which must lie within the stated tolerance."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "golden.py"


@pytest.fixture(scope="module")
def golden():
    spec = importlib.util.spec_from_file_location("golden_script", GOLDEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "rounds.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder


ROW = {"round": "1", "sim_time_s": "107.3", "k": "3", "sites": "site-001;site-002",
       "accuracy": "0.0485", "loss": "3.86", "train_loss": "4.02"}  # fmt: skip


def test_the_reference_runs_exist_for_every_static_run(golden):
    for name in golden.STATIC:
        assert (golden.REFERENCE / name / "rounds.csv").is_file(), name


def test_drift_within_the_tolerance_passes_and_beyond_it_fails_naming_the_column(golden, tmp_path):
    ref = _write(tmp_path / "ref", [ROW])
    close = {**ROW, "accuracy": "0.0490", "loss": "3.861"}
    assert golden.within_tolerance("r", _write(tmp_path / "close", [close]), ref) == []
    far = {**ROW, "accuracy": f"{0.0485 + golden.ACCURACY_TOL * 2:.4f}"}
    problems = golden.within_tolerance("r", _write(tmp_path / "far", [far]), ref)
    assert len(problems) == 1 and "accuracy" in problems[0] and "round 1" in problems[0]


def test_any_other_column_must_be_equal(golden, tmp_path):
    ref = _write(tmp_path / "ref", [ROW])
    moved = {**ROW, "sites": "site-001;site-003"}
    problems = golden.within_tolerance("r", _write(tmp_path / "moved", [moved]), ref)
    assert problems == ["r round 1: sites site-001;site-003 != site-001;site-002"]
    short = golden.within_tolerance(
        "r", _write(tmp_path / "short", [ROW]), _write(tmp_path / "two", [ROW, ROW])
    )
    assert "1 rounds, the reference has 2" in short[0]


def test_an_emulated_core_count_reaches_every_process(golden, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, **golden.cores_env(16, tmp_path)}
    done = subprocess.run([sys.executable, "-c", "import os; print(os.cpu_count())"],
                          env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "16" and env["OMP_NUM_THREADS"] == "16"
