"""A site worker is killed with SIGKILL mid-run: the round finishes at its deadline with the
remaining sites, the dead sites are marked (the policy sees alive=False and skips them), and
they rejoin once a worker re-registers. Real processes and real gRPC throughout."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from powertrip.config import RunConfig
from powertrip.experiments.launcher import split_sites
from powertrip.rpc.channels import open_channel
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.reliability.procs import kill9, wait_for

pytestmark = pytest.mark.slow

DEADLINE_S = 10.0


def _decisions(out) -> list[dict]:
    path = out / "decisions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _status(target: str) -> aggregator_pb2.RunStatus:
    with open_channel(target) as channel:
        return aggregator_pb2_grpc.AggregatorStub(channel).GetStatus(
            aggregator_pb2.GetStatusRequest(), timeout=5
        )


def _round_reached(target: str, n: int) -> bool:
    try:
        return _status(target).round >= n
    except grpc.RpcError:
        return False


def test_killed_worker_round_finishes_at_deadline_and_sites_rejoin(service_factory, tmp_path):
    config = RunConfig(
        workload="synthetic",
        num_sites=4,
        max_rounds=120,
        seed=7,
        policy="all",
        target_accuracy=0.999,
        round_deadline_s=DEADLINE_S,
        local_steps=20,
    )
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    out = tmp_path / "run"
    profiler = service_factory("profiler", "--config", str(path))
    policy = service_factory("policy")
    aggregator = service_factory(
        "aggregator", "--config", str(path), "--out", str(out), "--exit-when-done",
        "--profiler", profiler.target, "--policy", policy.target,
    )  # fmt: skip
    groups = split_sites(4, 2)
    worker_args = [
        ["--aggregator", aggregator.target, "--sites", ",".join(sites), "--worker-id", f"w{i}"]
        for i, sites in enumerate(groups)
    ]
    service_factory("site_worker:0", *worker_args[0], wait_serving=False)
    victim = service_factory("site_worker:1", *worker_args[1], wait_serving=False)
    victim_sites = set(groups[1])

    wait_for(lambda: _round_reached(aggregator.target, 3), 120, "round 3")
    kill9(victim.process.pid)
    killed_at = time.monotonic()
    victim.process.wait(timeout=10)

    def failed_round():
        return next((d for d in _decisions(out) if victim_sites & set(d["failed_sites"])), None)

    wait_for(lambda: failed_round() is not None, 3 * DEADLINE_S + 60, "the deadline round")
    detected_after = time.monotonic() - killed_at
    failed = failed_round()
    assert set(failed["failed_sites"]) == victim_sites, failed
    # the round did not wait much past its deadline (generous margin: shared CI cores)
    wall = {
        int(r.split(",")[0]): float(r.split(",")[1])
        for r in (out / "wall.csv").read_text().splitlines()[1:]
    }
    assert wall[failed["round"]] < DEADLINE_S + 15, wall[failed["round"]]
    assert detected_after < 2 * DEADLINE_S + 30
    # while dead, the victim's sites are marked and never selected
    wait_for(lambda: len(_decisions(out)) >= failed["round"] + 2, 60, "two more rounds")
    after = [d for d in _decisions(out) if d["round"] > failed["round"]]
    assert set(after[0]["dead_sites"]) == victim_sites
    assert after[0]["k"] == 2 and after[0]["failed_sites"] == []

    # a replacement worker registers the same sites: they are alive and selected again
    service_factory("site_worker:1", *worker_args[1], wait_serving=False)

    def rejoined():
        return next(
            (
                d
                for d in _decisions(out)
                if d["round"] > failed["round"] and d["k"] == 4 and not d["failed_sites"]
            ),
            None,
        )

    wait_for(lambda: rejoined() is not None, 120, "the sites to rejoin")
    assert rejoined()["dead_sites"] == []
    aggregator.process.wait(timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done" and summary["rounds"] == 120
