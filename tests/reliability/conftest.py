"""Load and soak tests run under `make reliability` (POWERTRIP_RELIABILITY=1), not `make test`.
The fixture of the resumable-upload tests (test_resumable_upload_*.py): an aggregator behind
the link of upload_link.py."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from powertrip.core.config import RunConfig
from tests.reliability.procs import free_port
from tests.reliability.upload_link import RATE, Relay, ThinLink


def pytest_collection_modifyitems(config, items):
    if os.environ.get("POWERTRIP_RELIABILITY") == "1":
        return
    skip = pytest.mark.skip(reason="load/soak: run with `make reliability`")
    for item in items:
        if "load" in item.keywords:
            item.add_marker(skip)


@pytest.fixture()
def link_stack(stack_factory, tmp_path):
    """An aggregator for two shakespeare sites (3.3 MB model), the link in front of it."""
    config = RunConfig(
        workload="shakespeare", num_sites=2, max_rounds=2, seed=5, policy="all",
        target_accuracy=0.999, round_deadline_s=300, eval_samples=32,
        # the tests stream raw fp32 deltas (3.3 MB: long enough to cut) and check FedAvg
        outer_optimizer="fedavg", delta_encoding="fp32",
    )  # fmt: skip
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    metrics_port = free_port()
    out = tmp_path / "run"
    _, _, aggregator = stack_factory(path, out, "--metrics-port", str(metrics_port))
    relay = Relay(aggregator.target)
    link = ThinLink(("127.0.0.1", relay.port), RATE)
    yield SimpleNamespace(
        aggregator=aggregator, relay=relay, link=link, metrics_port=metrics_port, out=out
    )
    link.close()
    relay.stop()
