"""A run that starts with enough sites (`--min-sites`, as Flower's min_available_clients):
round 1 starts once 3 of 5 sites are hosted, the two workers started later join the ranking,
and the run ends with all five. Real processes, real gRPC on loopback."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import pytest

from powertrip.core import runfiles
from powertrip.core.config import RunConfig

FIRST = ("site-000", "site-001", "site-002")
LATE = ("site-003", "site-004")


@pytest.fixture()
def run_yaml(tmp_path):
    config = RunConfig(
        workload="synthetic",
        num_sites=5,
        max_rounds=120,
        local_steps=20,
        seed=5,
        policy="all",
        target_accuracy=1.0,
        round_deadline_s=60,
    )
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    return path


def _rounds(out) -> list[dict]:
    path = out / runfiles.ROUNDS
    return list(csv.DictReader(path.open())) if path.exists() else []


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_round_one_starts_with_three_of_five_and_the_late_two_join(
    service_factory, stack_factory, run_yaml, tmp_path
):
    out = tmp_path / "run"
    _profiler, _policy, aggregator = stack_factory(run_yaml, out, "--min-sites", "3")

    def worker(*sites: str):
        return service_factory(
            "site_worker", "--aggregator", aggregator.target, "--sites", ",".join(sites),
            "--worker-id", f"vm-{sites[0]}",
        )  # fmt: skip

    worker(*FIRST)
    first = _wait(lambda: _rounds(out), 120, "round 1 with three sites")[0]
    assert set(first["sites"].split(";")) == set(FIRST)  # the late sites were not selected
    worker(*LATE)
    summary = out / runfiles.SUMMARY
    _wait(summary.exists, 240, "the run's summary")
    assert json.loads(summary.read_text())["status"] == "done"
    rows = _rounds(out)
    sites = [set(r["sites"].split(";")) for r in rows]
    joined = next(i for i, s in enumerate(sites) if s == set(FIRST) | set(LATE))
    assert 0 < joined < len(rows) and all(s == set(FIRST) for s in sites[:joined])
    assert sites[-1] == set(FIRST) | set(LATE)  # it ends with all five


def test_min_sites_above_the_runs_sites_is_refused_by_name(run_yaml):
    done = subprocess.run(
        [sys.executable, "-m", "services.aggregator", "--config", str(run_yaml),
         "--host", "127.0.0.1", "--port", "0", "--min-sites", "6", "--insecure"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--min-sites must be in 0..5 (num_sites; 0 means all), got 6" in done.stderr
