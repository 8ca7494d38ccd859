"""The run's own series (services/aggregator/metrics.py): which run it is, the state it is in
(one of them 1), and when it last made progress, which PowerTripRunStalled watches."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from services.aggregator.metrics import RUN_STATES, AggregatorMetrics


def _value(registry: CollectorRegistry, name: str, **labels) -> float | None:
    return registry.get_sample_value(name, labels or None)


def test_run_info_state_and_progress_follow_the_run():
    registry = CollectorRegistry()
    metrics = AggregatorMetrics(registry, round_deadline_s=60)
    metrics.show_run("compose", "powertrip", "femnist", "simulated")
    info = {"run_id": "compose", "policy": "powertrip", "workload": "femnist"}
    assert _value(registry, "powertrip_run_info", **info, clock="simulated") == 1
    states = {s: _value(registry, "powertrip_run_state", state=s) for s in RUN_STATES}
    assert states == {"waiting_for_sites": 1, "running": 0, "done": 0, "failed": 0}
    assert _value(registry, "powertrip_last_progress_timestamp_seconds") == 0  # not started

    before = time.time()
    metrics.show_state("running")
    assert _value(registry, "powertrip_last_progress_timestamp_seconds") >= before
    metrics.show_state("done")
    states = {s: _value(registry, "powertrip_run_state", state=s) for s in RUN_STATES}
    assert states == {"waiting_for_sites": 0, "running": 0, "done": 1, "failed": 0}
