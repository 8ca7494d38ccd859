"""Resumable uploads (issue #18, item 3), real processes and real gRPC: when the route drops
silently, the worker's resume takes over the upload the aggregator still thinks is
streaming (upload_link.py)."""

from __future__ import annotations

import time

import grpc
import pytest

from powertrip.rpc.channels import open_channel
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.reliability.procs import wait_for
from tests.reliability.upload_link import (
    SITES,
    _assert_model_is,
    _download,
    _expected_model,
    _header,
    _metric,
    _random_delta,
    _rejected,
    _site_tasks,
    _status,
    _stream,
)

pytestmark = pytest.mark.slow


def test_resume_takes_over_an_upload_the_aggregator_still_thinks_is_streaming(link_stack):
    """The route drops: the worker's connection goes, the aggregator's stays open and
    silent, its handler still waiting for the next chunk. The worker's resume takes the
    held bytes over from that stream; the stale stream, when it finally breaks, changes
    nothing. The delta is accepted once and the model is exact."""
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    reply = direct.Register(
        aggregator_pb2.RegisterRequest(worker_id="W", site_ids=SITES), timeout=10
    )
    session = reply.session_token
    tasks = _site_tasks(direct, "W", session)
    task = tasks[SITES[0]]
    model = _download(direct, "W", session, task.model_version)
    deltas = {site: _random_delta(model, 20 + i) for i, site in enumerate(SITES)}
    head = _header(task, "W", session, samples=7)
    with open_channel(s.link.address) as channel:
        call = aggregator_pb2_grpc.AggregatorStub(channel).UploadDelta.future(
            _stream(head, deltas[SITES[0]]), timeout=120
        )
        wait_for(
            lambda: _status(direct, task, "W", session).bytes_held >= 1_100_000, 60, "progress"
        )
        s.link.drop_route()
        with pytest.raises(grpc.RpcError) as info:
            call.result(timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
    time.sleep(0.3)  # bytes already past the link land first (else: ABORTED resume_offset)
    status = _status(direct, task, "W", session)  # still streaming, as far as it knows
    assert status.state == aggregator_pb2.UPLOAD_STATE_PARTIAL
    assert "upload of site-000 cut" not in s.aggregator.log_path.read_text()
    where = (status.next.tensor_index, status.next.offset)
    resumed = _header(task, "W", session, samples=7, resume=status.next)
    reply = direct.UploadDelta(_stream(resumed, deltas[SITES[0]], where), timeout=60)
    assert reply.accepted and reply.bytes_received == sum(v.nbytes for v in model.values())
    head_b = _header(tasks[SITES[1]], "W", session, samples=9)
    assert direct.UploadDelta(_stream(head_b, deltas[SITES[1]]), timeout=60).accepted
    expected = _expected_model(
        s.out, model, {SITES[0]: (deltas[SITES[0]], 7.0), SITES[1]: (deltas[SITES[1]], 9.0)}
    )
    _assert_model_is(direct, "W", session, expected)
    assert _metric(s.metrics_port, "powertrip_upload_resumes_total") == 1
    # the stale stream ends: refused as superseded if a chunk still in flight reaches it,
    # else as broken once its connection finally goes; either way nothing changes
    s.link.close()

    def stale_ended() -> float:
        return sum(_rejected(s.metrics_port, r) for r in ("stream_aborted", "superseded"))

    wait_for(lambda: stale_ended() == 1, 30, "the stale stream")
    assert _rejected(s.metrics_port, "duplicate") == 0
    direct_channel.close()
