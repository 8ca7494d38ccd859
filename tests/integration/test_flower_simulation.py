"""PowerTrip inside Flower, for real: examples/flower/simulate.py runs a Flower simulation
(the Ray backend) with 20 virtual clients, each a site of PowerTrip's generated population
training PowerTrip's FEMNIST model on its own data; PowerTripStrategy picks the training
nodes each round. Then a real policy service process is asked, round by round, with the
profiles and history the strategy had: its choice must equal the strategy's."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install -e '.[flower]'")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray: '.[flower]'")

from powertrip.core.workloads import get_workload  # noqa: E402
from powertrip.v1 import policy_pb2_grpc  # noqa: E402
from tests.reliability.procs import REPO  # noqa: E402
from tests.unit.test_flower_strategy import select_request  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
NODES, ROUNDS, SEED = 20, 4, 2


@pytest.mark.parametrize(("policy", "params"), [("powertrip", {}), ("oort", {"k": 4})])
def test_a_flower_simulation_chooses_what_the_policy_service_chooses(
    service_factory, tmp_path, policy, params
):
    out = tmp_path / policy
    done = subprocess.run(
        [sys.executable, str(REPO / "examples/flower/simulate.py"), "--nodes", str(NODES),
         "--rounds", str(ROUNDS), "--policy", policy, "--params", json.dumps(params),
         "--seed", str(SEED), "--local-steps", "3", "--out", str(out)],
        capture_output=True, text=True, timeout=800, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    decisions = json.loads((out / "decisions.json").read_text())
    assert [d["round"] for d in decisions] == list(range(1, ROUNDS + 1))
    assert all(len(d["profiles"]) == NODES for d in decisions)
    defaults = get_workload("femnist").defaults

    service = service_factory("policy")
    with grpc.insecure_channel(service.target) as channel:
        stub = policy_pb2_grpc.PolicyStub(channel)
        for d in decisions:
            request = select_request(
                policy, params, d["profiles"], d["history"], server_round=d["round"],
                update_size_bytes=defaults.update_size_bytes, tau_s=defaults.tau_s, seed=SEED,
                target_accuracy=defaults.target_accuracy,
            )  # fmt: skip
            reply = stub.SelectSites(request, timeout=30)
            assert list(reply.site_ids) == d["site_ids"], f"round {d['round']}"

    # every round trained, was charged on the time model and evaluated
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert [int(r["k"]) for r in rows] == [len(d["site_ids"]) for d in decisions]
    assert all(float(r["round_time_s"]) > 0 and 0 < float(r["accuracy"]) <= 1 for r in rows)
    assert all(int(r["delivered"]) == int(r["k"]) for r in rows)
    if policy == "oort":  # it reads the sites' reported losses: the history carries them
        assert all(len(d["history"][-1]["site_train_loss"]) == 4 for d in decisions[1:])


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:  # gone, or not ours to read
        return ""


def test_the_example_runs_with_flwr_run(tmp_path):
    """`flwr run examples/flower`, as its README says: Flower starts its own
    local SuperLink (here under a private FLWR_HOME), runs the app in the active environment
    (FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1: powertrip is not on PyPI), and the
    ServerApp evaluates after each round. The SuperLink it leaves running is stopped."""
    flwr = shutil.which("flwr", path=str(Path(sys.executable).parent))
    if flwr is None:
        pytest.skip("no flwr command beside this Python")
    try:  # a SuperLink of the user's own answers on Flower's fixed local port: leave it be
        urllib.request.urlopen("http://127.0.0.1:39091/health", timeout=1)
        pytest.skip("a local Flower SuperLink is already running on 127.0.0.1:39091")
    except OSError:
        pass
    home = tmp_path / "flwr-home"
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    try:
        done = subprocess.run(
            [flwr, "run", str(REPO / "examples/flower"), "--stream",
             "--run-config", "num-server-rounds=2 local-steps=2"],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
        )  # fmt: skip
    finally:
        for proc in Path("/proc").glob("[0-9]*"):  # the SuperLink it started under `home`
            args = _cmdline(proc)
            if "flower-superlink" in args and str(home) in args:
                os.kill(int(proc.name), signal.SIGTERM)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    deadline = time.monotonic() + 30  # a SuperLink drains before it exits
    while [p for p in Path("/proc").glob("[0-9]*") if str(home) in _cmdline(p)]:
        assert time.monotonic() < deadline, "the local SuperLink is still running"
        time.sleep(0.5)
    assert "configure_train: PowerTrip powertrip chose k=" in log, log[-4000:]
    assert "ServerApp-side Evaluate Metrics" in log and "2: {'accuracy'" in log, log[-4000:]
