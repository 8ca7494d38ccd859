"""How a run starts its aggregator and site workers: together, on a port picked for the
aggregator, and the old way (port 0, then the workers) when that port was taken."""

from __future__ import annotations

import socket

import pytest

from powertrip.app.experiments import runner
from powertrip.app.experiments.launcher import Deployment
from powertrip.core import runfiles
from powertrip.core.config import RunConfig

pytestmark = pytest.mark.slow


def _run(tmp_path, name: str):
    config = RunConfig(
        workload="synthetic", num_sites=8, max_rounds=2, seed=3, target_accuracy=0.99
    )
    out = tmp_path / name
    out.mkdir()
    config.write_yaml(out / "base.yaml")
    with Deployment(out / "base.yaml", out / "logs") as deployment:
        outcome = runner.run_once(config, out, deployment, show_progress=False)
    return outcome, out


def test_a_taken_port_falls_back_to_port_zero_and_the_run_is_the_same(tmp_path, monkeypatch):
    plain, plain_dir = _run(tmp_path, "plain")
    log = (plain_dir / runfiles.LOGS_DIR / "aggregator.log").read_text()
    assert "cannot bind" not in log

    with socket.socket() as holder:  # a port some other process took first
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        monkeypatch.setattr(runner, "free_port", lambda: taken)
        again, again_dir = _run(tmp_path, "again")

    log = (again_dir / runfiles.LOGS_DIR / "aggregator.log").read_text()
    assert f"cannot bind 127.0.0.1:{taken}" in log  # the first try did meet the taken port
    assert again.summary["stopped_reason"] == plain.summary["stopped_reason"]
    assert again.summary["rounds"] == plain.summary["rounds"] == 2
    assert (again_dir / runfiles.ROUNDS).read_text() == (plain_dir / runfiles.ROUNDS).read_text()


def test_a_spent_wall_budget_stops_the_run_after_its_round(tmp_path):
    """max_wall_hours through a real run: 0.36 ms of wall time is spent by round 1's end."""
    config = RunConfig(
        workload="synthetic", num_sites=8, max_rounds=5, seed=3, target_accuracy=0.99,
        max_wall_hours=1e-7,
    )  # fmt: skip
    out = tmp_path / "wall"
    out.mkdir()
    config.write_yaml(out / "base.yaml")
    with Deployment(out / "base.yaml", out / "logs") as deployment:
        outcome = runner.run_once(config, out, deployment, show_progress=False)
    assert outcome.summary["stopped_reason"] == "wall_budget"
    assert outcome.summary["rounds"] == 1
