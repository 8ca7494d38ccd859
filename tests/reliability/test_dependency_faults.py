"""The policy and then the profiler are killed with SIGKILL mid-run: the aggregator retries
with backoff, falls back to the last good selection / profiles, counts it in Prometheus,
keeps going, and uses the service again once it is back. Real processes throughout."""

from __future__ import annotations

import json

import pytest

from powertrip.app.experiments.launcher import split_sites
from powertrip.core.config import RunConfig
from tests.reliability.procs import free_port, kill9, scrape, wait_for

pytestmark = pytest.mark.slow


def _decisions(out) -> list[dict]:
    path = out / "decisions.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fallback(decision: dict) -> bool:
    return decision["explanation"].get("fallback") == "last good selection"


def test_policy_and_profiler_outages_fall_back_and_recover(service_factory, tmp_path):
    config = RunConfig(
        workload="synthetic",
        num_sites=4,
        max_rounds=100,
        seed=11,
        policy="powertrip",
        target_accuracy=0.999,
        round_deadline_s=30,
        local_steps=20,
    )
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    out = tmp_path / "run"
    policy_port, profiler_port, metrics_port = free_port(), free_port(), free_port()
    profiler_args = ["--config", str(path), "--port", str(profiler_port)]
    profiler = service_factory("profiler", *profiler_args)
    policy = service_factory("policy", "--port", str(policy_port))
    aggregator = service_factory(
        "aggregator", "--config", str(path), "--out", str(out), "--exit-when-done",
        "--profiler", profiler.target, "--policy", policy.target,
        "--metrics-port", str(metrics_port),
    )  # fmt: skip
    for i, sites in enumerate(split_sites(4, 2)):
        service_factory(
            f"site_worker:{i}", "--aggregator", aggregator.target, "--sites", ",".join(sites),
            "--worker-id", f"w{i}", wait_serving=False,
        )  # fmt: skip
    wait_for(lambda: len(_decisions(out)) >= 3, 120, "round 3")

    # -- policy down: rounds go on with the last good selection, counted
    kill9(policy.process.pid)
    wait_for(lambda: any(_fallback(d) for d in _decisions(out)), 120, "a fallback round")
    metrics = scrape(metrics_port)
    assert metrics["powertrip_policy_fallbacks_total"] >= 1
    assert metrics['powertrip_dependency_retries_total{dependency="policy"}'] >= 5
    assert aggregator.alive()
    first = next(d for d in _decisions(out) if _fallback(d))
    previous = _decisions(out)[first["round"] - 2]
    assert first["k"] == previous["k"]  # the same sites as the last good selection
    log = aggregator.log_tail(200)
    assert "reusing the last good selection" in log

    # -- policy back on the same port: the aggregator uses it again
    service_factory("policy", "--port", str(policy_port))
    seen = len(_decisions(out))
    wait_for(lambda: any(not _fallback(d) for d in _decisions(out)[seen:]), 120, "a policy round")

    # -- profiler down: the last good profiles stand in
    kill9(profiler.process.pid)
    wait_for(
        lambda: scrape(metrics_port).get("powertrip_profiler_fallbacks_total", 0) >= 1,
        120,
        "a profiler fallback",
    )
    assert aggregator.alive()
    service_factory("profiler", *profiler_args)

    aggregator.process.wait(timeout=400)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "done", summary["message"]
    assert summary["rounds"] == 100
