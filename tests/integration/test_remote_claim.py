"""Remote site workers claim their sites through the profiler (`--claim-site`), the one claim
book of a deployment, so a remote worker never takes a local worker's site: real processes,
real gRPC on loopback.  The README's old remote command (`--sites site-007` against a run of
fewer sites) now fails at once, naming the sites the run has."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import grpc
import pytest

from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.v1 import profiler_pb2, profiler_pb2_grpc
from services.site_worker.link import LinkError, route_iface


@pytest.fixture()
def run_yaml(tmp_path):
    config = RunConfig(
        workload="synthetic",
        num_sites=2,
        max_rounds=2,
        seed=4,
        policy="all",
        target_accuracy=1.0,
        round_deadline_s=60,
    )
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    return path


def _worker(profiler, aggregator, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.site_worker", "--host", "127.0.0.1", "--port", "0",
         "--aggregator", aggregator.target, "--profiler", profiler.target, "--claim-site", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_remote_workers_claim_named_and_free_sites_and_the_run_completes(
    service_factory, stack_factory, run_yaml, tmp_path
):
    out = tmp_path / "run"
    profiler, _policy, aggregator = stack_factory(run_yaml, out)

    # a site the run does not have: refused by name, before anything registers
    bad = _worker(profiler, aggregator, "--sites", "site-007", "--worker-id", "vm-7")
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "NOT_FOUND" in bad.stderr and "this run has 2 sites (site-000 .. site-001)" in (
        bad.stderr
    ), bad.stderr[-2000:]

    # a named one that exists, then a free one: the profiler hands out the other site
    service_factory(
        "site_worker", "--aggregator", aggregator.target, "--profiler", profiler.target,
        "--claim-site", "--sites", "site-001", "--worker-id", "vm-a",
    )  # fmt: skip
    service_factory(
        "site_worker", "--aggregator", aggregator.target, "--profiler", profiler.target,
        "--claim-site", "--worker-id", "vm-b",
    )  # fmt: skip
    with open_channel(profiler.target) as channel:
        stub = profiler_pb2_grpc.ProfilerStub(channel)
        # the claims stand: a third worker finds no free site, vm-b gets its own back
        with pytest.raises(grpc.RpcError) as err:
            stub.ClaimSite(profiler_pb2.ClaimSiteRequest(worker_id="vm-c"), timeout=5)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        again = stub.ClaimSite(profiler_pb2.ClaimSiteRequest(worker_id="vm-b"), timeout=5)
        assert again.site.site_id == "site-000"

    summary = out / "summary.json"
    deadline = time.monotonic() + 120
    while not summary.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert json.loads(summary.read_text())["status"] == "done"
    rows = list(csv.DictReader((out / "rounds.csv").open()))
    assert [set(r["sites"].split(";")) for r in rows] == [{"site-000", "site-001"}] * 2


def test_the_shaped_interface_is_the_one_towards_the_aggregator():
    # loopback has no interface to shape: the default route's is used, as before
    assert route_iface("127.0.0.1:50051") == route_iface("localhost:1")
    with pytest.raises(LinkError, match="does not resolve"):
        route_iface("no-such-host.invalid:50051", resolve_timeout_s=0)
