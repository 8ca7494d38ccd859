"""PowerTrip inside Flower, for real: the example app (examples/flower) sent by `flwr run` to
a SuperLink in simulation mode (the Ray backend, tests/integration/flower_link.py) with 20
virtual clients, each a site of PowerTrip's generated population training PowerTrip's
FEMNIST model on its own data; PowerTripStrategy picks the training nodes each round. Then a
real policy service process is asked, round by round, with the profiles and history the
strategy had: its choice must equal the strategy's. The README's own commands and the
minimal app: tests/integration/test_flower_example.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import grpc
import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install -e '.[flower]'")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray: '.[flower]'")

from powertrip.app.flower import read_decisions  # noqa: E402
from powertrip.core.workloads import get_workload  # noqa: E402
from powertrip.v1 import policy_pb2_grpc  # noqa: E402
from tests.integration.flower_link import superlink  # noqa: E402
from tests.reliability.procs import REPO  # noqa: E402
from tests.unit.test_flower_strategy import select_request  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
NODES, ROUNDS, SEED = 20, 4, 2


def run_example(tmp_path: Path, nodes: int, profile_timeout_s: float = 300.0, **config) -> Path:
    """The example app on `nodes` simulated SuperNodes, one CPU each, `config` its run_config
    (`local_steps=3`: `local-steps=3`); the directory of its one run. The profile timeout is
    300 s by default: the nodes are this machine's processes, so a slow answer means a busy
    machine, not a lost node."""
    out = tmp_path / "out"  # not tmp_path/powertrip: the nodes' working directory is
    # tmp_path (the SuperLink's), where a directory named powertrip would shadow the package
    settings = {**config, "min_available_nodes": nodes, "profile_timeout_s": profile_timeout_s}
    run_config = " ".join(f"{k.replace('_', '-')}={v!r}" for k, v in settings.items())
    with superlink(tmp_path) as link:
        link.run(
            REPO / "examples/flower", "--run-config", f"{run_config} out-dir='{out}'",
            "--federation-config", f"num-supernodes={nodes} client-resources-num-cpus=1",
            cwd=tmp_path, timeout=800,
        )  # fmt: skip
    [run] = out.glob("run-*")  # OUT-DIR/run-<Flower run id>
    return run


@pytest.mark.parametrize(("policy", "params"), [("powertrip", {}), ("oort", {"k": 4})])
def test_a_flower_simulation_chooses_what_the_policy_service_chooses(
    service_factory, tmp_path, policy, params
):
    out = run_example(
        tmp_path, NODES, num_server_rounds=ROUNDS, policy=policy,
        policy_params=json.dumps(params), seed=SEED, local_steps=3,
    )  # fmt: skip
    decisions = read_decisions(out / "decisions.jsonl")
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


def test_a_three_second_profile_timeout_does_not_lose_round_one_to_rays_cold_start(tmp_path):
    """With 3 s for the profile query, Ray's workers starting used to miss it on every node
    and round 1 trained nothing; the first query now waits (startup_timeout_s) until
    min_available_nodes have answered, so round 1 trains among all of them."""
    out = run_example(tmp_path, 6, profile_timeout_s=3.0, num_server_rounds=2, local_steps=2)
    decisions = read_decisions(out / "decisions.jsonl")
    assert [d["round"] for d in decisions] == [1, 2]
    assert len(decisions[0]["profiles"]) == 6 and decisions[0]["site_ids"]
    assert all(not d["reason"].startswith("no training") for d in decisions)
