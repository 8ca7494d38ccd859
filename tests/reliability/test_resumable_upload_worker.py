"""Resumable uploads over a cut link (issue #18, item 3), real processes and real gRPC: the
site worker's own upload resumes after the link is cut, and gives up when the round is
over (upload_link.py)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry

from powertrip.rpc.channels import open_channel
from powertrip.rpc.tensors import CHUNK_BYTES
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from services.site_worker.config import WorkerConfig
from services.site_worker.metrics import SiteWorkerMetrics
from services.site_worker.worker import SiteWorker
from tests.reliability.procs import wait_for
from tests.reliability.upload_link import (
    HEADERS_ALLOWANCE,
    SITES,
    _assert_model_is,
    _cut_when_held,
    _download,
    _expected_model,
    _header,
    _metric,
    _random_delta,
    _rejected,
    _round_sites,
    _site_tasks,
    _stream,
)

pytestmark = pytest.mark.slow


def test_site_worker_upload_resumes_after_the_link_is_cut(link_stack, capsys):
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    registry = CollectorRegistry()
    worker = SiteWorker(
        WorkerConfig(aggregator=s.link.address, worker_id="W", site_ids=SITES),
        SiteWorkerMetrics(registry),
    )
    channel = open_channel(s.link.address)
    stub = aggregator_pb2_grpc.AggregatorStub(channel)
    reply = stub.Register(aggregator_pb2.RegisterRequest(worker_id="W", site_ids=SITES), timeout=10)
    session = reply.session_token
    tasks = _site_tasks(stub, "W", session)
    model = _download(direct, "W", session, tasks[SITES[0]].model_version)
    nbytes = sum(v.nbytes for v in model.values())
    deltas = {site: _random_delta(model, 10 + i) for i, site in enumerate(SITES)}
    samples = {SITES[0]: 12, SITES[1]: 20}

    def result(site):
        return SimpleNamespace(
            delta={k: torch.from_numpy(v) for k, v in deltas[site].items()},
            num_samples=samples[site], mean_loss=0.5, steps=4,
        )  # fmt: skip

    def cut_and_restore() -> None:
        held.append(_cut_when_held(direct, tasks[SITES[0]], "W", session, s.relay, 1_100_000))
        time.sleep(0.5)
        s.relay.start()

    held: list[int] = []
    cutter = threading.Thread(target=cut_and_restore)
    before = s.link.up_bytes
    cutter.start()
    started = time.monotonic()
    worker.upload(stub, session, tasks[SITES[0]], result(SITES[0]), 0.1)  # resumes by itself
    took = time.monotonic() - started
    cutter.join()
    cut_upload = s.link.up_bytes - before
    s.link.settle()
    before = s.link.up_bytes
    worker.upload(stub, session, tasks[SITES[1]], result(SITES[1]), 0.1)
    whole = s.link.up_bytes - before
    resent = cut_upload - whole
    with capsys.disabled():
        print(
            f"\n  site worker: delta {nbytes} B; cut with {held[0]} B held; the cut upload "
            f"took {cut_upload} link bytes in {took:.1f}s, an uncut one {whole}: "
            f"re-sent {resent} B ({resent / CHUNK_BYTES:.2f} chunk)"
        )
    assert 0 < held[0] < nbytes
    assert resent < CHUNK_BYTES + HEADERS_ALLOWANCE, resent
    assert worker.counters.bytes_up == 2 * nbytes
    # the worker's own metrics: both uploads' bytes, the one resume, a throughput
    assert registry.get_sample_value("powertrip_site_upload_bytes_total") == 2 * nbytes
    assert registry.get_sample_value("powertrip_site_upload_resumes_total") == 1
    assert registry.get_sample_value("powertrip_site_upload_bytes_per_second") > 0
    assert _metric(s.metrics_port, "powertrip_upload_resumes_total") == 1
    assert _rejected(s.metrics_port, "duplicate") == 0
    expected = _expected_model(
        s.out, model, {site: (deltas[site], float(samples[site])) for site in SITES}
    )
    _assert_model_is(direct, "W", session, expected)
    channel.close()
    direct_channel.close()


def test_site_worker_gives_up_when_the_round_is_over(link_stack):
    """A worker whose link is down retries its upload, and stops at the aggregator's answer
    that the round is over (it closed meanwhile), not at the end of its own window."""
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    worker = SiteWorker(WorkerConfig(aggregator=s.link.address, worker_id="W", site_ids=SITES))
    reply = direct.Register(
        aggregator_pb2.RegisterRequest(worker_id="W", site_ids=SITES), timeout=10
    )
    session = reply.session_token
    tasks = _site_tasks(direct, "W", session)
    model = _download(direct, "W", session, tasks[SITES[0]].model_version)
    zeros = {k: np.zeros_like(v) for k, v in model.items()}
    for site in SITES:  # the round closes with these two
        head = _header(tasks[site], "W", session, samples=5)
        assert direct.UploadDelta(_stream(head, zeros), timeout=60).accepted
    wait_for(lambda: _round_sites(s.out, 1) is not None, 60, "round 1 to close")
    late = SimpleNamespace(
        delta={k: torch.from_numpy(v) for k, v in zeros.items()},
        num_samples=1, mean_loss=0.0, steps=1,
    )  # fmt: skip
    s.relay.kill()
    threading.Timer(1.0, s.relay.start).start()
    channel = open_channel(s.link.address)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        worker.upload(
            aggregator_pb2_grpc.AggregatorStub(channel), session, tasks[SITES[0]], late, 0.1
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value.details()
    assert time.monotonic() - started < 15
    channel.close()
    direct_channel.close()
