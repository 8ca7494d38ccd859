"""`powertrip status ADDRESS`: a deployed aggregator's run as it stands, over its GetStatus
RPC (a real aggregator process on loopback), as JSON that scripts parse."""

from __future__ import annotations

import json
import subprocess
import sys

from powertrip.core.config import RunConfig


def test_status_of_a_waiting_aggregator_parses_as_json_and_a_dead_address_exits_1(
    stack_factory, tmp_path
):
    config = tmp_path / "run.yaml"
    RunConfig(workload="synthetic", num_sites=4, max_rounds=2, seed=1).write_yaml(config)
    _profiler, _policy, aggregator = stack_factory(config, tmp_path / "run")
    cli = [sys.executable, "-m", "powertrip", "status"]
    done = subprocess.run(
        [*cli, aggregator.target, "--format", "json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["state"] == "waiting_for_sites" and status["num_sites"] == 4
    assert status["registered_sites"] == 0 and status["alive_sites"] == 0
    table = subprocess.run([*cli, aggregator.target], capture_output=True, text=True, timeout=60)
    assert "waiting_for_sites" in table.stdout and table.stdout.startswith("field")
    gone = subprocess.run(
        [*cli, "127.0.0.1:1", "--timeout-s", "1"], capture_output=True, text=True, timeout=60
    )
    assert gone.returncode == 1 and "GetStatus failed: UNAVAILABLE" in gone.stderr
