"""Group locks keep two reproduce processes out of one (set-up, seed) group, and `--jobs`
helpers get the command's own arguments."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from powertrip.app.experiments.grouplock import LOCK_NAME, GroupLock
from powertrip.app.experiments.jobs import helper_argv
from reproduction import reproduce as R

HOLD = """
import sys, time
from pathlib import Path
from powertrip.app.experiments.grouplock import GroupLock
lock = GroupLock(Path(sys.argv[1]))
print("held" if lock.acquire() else "busy", flush=True)
time.sleep(60)
"""


def _holder(group_dir) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(group_dir)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_group_held_by_another_process_is_busy_until_it_ends(tmp_path):
    holder = _holder(tmp_path)
    try:
        lock = GroupLock(tmp_path)
        assert not lock.acquire() and not lock.held
        assert lock.owner() == f"pid {holder.pid} on {os.uname().nodename}"
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up: the kernel lets go of the flock
        holder.wait()
    lock = GroupLock(tmp_path)
    assert lock.acquire() and lock.held
    assert (tmp_path / LOCK_NAME).read_text().startswith(f'{{"pid": {os.getpid()}')
    lock.release()
    assert not lock.held and (tmp_path / LOCK_NAME).exists()


def test_the_same_process_may_take_a_lock_again_after_release(tmp_path):
    with GroupLock(tmp_path) as first:
        assert first.acquire() and first.acquire()  # taking a held lock again is a no-op
    with GroupLock(tmp_path) as second:
        assert second.acquire()


def test_execute_leaves_a_locked_group_to_its_owner_and_runs_nothing(tmp_path):
    runs = R.plan(R.PAPER, ["10"], [0], 100, [10, 70])
    holder = _holder(tmp_path / "runs" / "uniform" / "seed0")
    try:
        lines: list[str] = []
        logs = R.execute(
            runs,
            tmp_path,
            R.base_config(_args()),
            variants=R.VARIANTS,
            budget_factor=1.5,
            log=lines.append,
        )
    finally:
        holder.kill()
        holder.wait()
    assert [log.status for log in logs] == ["busy"] * len(runs)
    owner = f"pid {holder.pid} on {os.uname().nodename}"
    assert lines == [f"busy uniform seed 0: another reproduce ({owner}) runs it"]
    assert not list(tmp_path.glob("runs/*/seed*/logs"))  # no services were started
    assert not list(tmp_path.glob("runs/*/seed*/*/"))  # and no run directory touched


def _args():
    import argparse

    return argparse.Namespace(
        config=None, workload=None, quick=False, sites=None, workers=None, data_dir=None
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["reproduce", "--figure", "9", "--jobs", "3"], ["reproduce", "--figure", "9"]),
        (["reproduce", "--jobs=2", "--summary", "x.md", "--quiet"], ["reproduce"]),
        (["reproduce", "--summary=x.md", "--set", "lr=0.2"], ["reproduce", "--set", "lr=0.2"]),
        (["reproduce", "--runs-only", "--report-only"], ["reproduce"]),
    ],
)
def test_helpers_repeat_the_command_without_jobs_summary_or_reports(argv, expected):
    assert helper_argv(argv) == [*expected, "--jobs", "1", "--runs-only", "--quiet"]


def test_jobs_must_be_positive(tmp_path, capsys):
    from powertrip.app import cli

    code = cli.main(
        ["reproduce", "--workload", "synthetic", "--quick", "--jobs", "0", "--out", str(tmp_path)]
    )
    assert code == 2 and "--jobs must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "reproduce.json").exists()  # refused before anything was written
