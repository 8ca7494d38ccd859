"""Resumable uploads over a cut link (issue #18, item 3), real processes and real gRPC: an
upload cut mid-chunk (the relay killed) resumes from the bytes the aggregator holds, and
the cost of the cut in link bytes (upload_link.py).

The delta is accepted once and the next model is the FedAvg of the accepted deltas, bit
for bit; a resumed stream passes the same checks as a fresh one (session, stale round,
duplicate), a resume at the wrong position or with a different header is refused.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from powertrip.rpc.channels import open_channel
from powertrip.rpc.tensors import CHUNK_BYTES, TensorAssembler, encode_tensors, layout_of
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.reliability.procs import wait_for
from tests.reliability.upload_link import (
    ABORTED,
    ACCEPTED,
    HEADERS_ALLOWANCE,
    SITES,
    _assert_model_is,
    _cut_when_held,
    _download,
    _expected_model,
    _header,
    _metric,
    _random_delta,
    _register,
    _rejected,
    _status,
    _stream,
    _task,
)

pytestmark = pytest.mark.slow


# ---- the tests ------------------------------------------------------------------------------
def test_encode_from_a_position_continues_an_assembler_exactly():
    rng = np.random.default_rng(0)
    arrays = {
        "a": rng.standard_normal((300, 7)).astype(np.float32),
        "empty": np.zeros((0, 3), np.float32),
        "b": rng.standard_normal(5000).astype(np.float64),
    }
    chunks = list(encode_tensors(arrays, chunk_bytes=1000))
    for cut in range(len(chunks) + 1):
        assembler = TensorAssembler(expected=layout_of(arrays))
        for chunk in chunks[:cut]:
            assembler.add(chunk)
        for chunk in encode_tensors(arrays, chunk_bytes=700, start=assembler.position):
            assembler.add(chunk)
        out = assembler.finish()
        assert all(np.array_equal(out[k], v) for k, v in arrays.items())
    assert list(encode_tensors(arrays, start=(3, 0))) == []


def test_cut_upload_resumes_from_held_bytes_and_is_accepted_once(link_stack, capsys):
    s = link_stack
    direct_channel = open_channel(s.aggregator.target)
    direct = aggregator_pb2_grpc.AggregatorStub(direct_channel)
    a = _register(direct, "A", SITES[0])
    b = _register(direct, "B", SITES[1])
    task_a, task_b = _task(direct, "A", a.session_token), _task(direct, "B", b.session_token)
    model = _download(direct, "A", a.session_token, task_a.model_version)
    nbytes = sum(v.nbytes for v in model.values())
    delta_a, delta_b = _random_delta(model, 1), _random_delta(model, 2)
    head_a = _header(task_a, "A", a.session_token, samples=10)

    # ---- A's upload, cut mid-chunk by killing the relay
    before = s.link.up_bytes
    with open_channel(s.link.address) as channel:
        call = aggregator_pb2_grpc.AggregatorStub(channel).UploadDelta.future(
            _stream(head_a, delta_a), timeout=60
        )
        held = _cut_when_held(direct, task_a, "A", a.session_token, s.relay, 1_100_000)
        with pytest.raises(grpc.RpcError) as info:
            call.result(timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
    sent_before_cut = s.link.up_bytes - before
    status = _status(direct, task_a, "A", a.session_token)
    assert status.state == aggregator_pb2.UPLOAD_STATE_PARTIAL
    assert 0 < status.bytes_held == held < nbytes and status.total_bytes == nbytes
    where = (status.next.tensor_index, status.next.offset)

    # ---- resumed streams pass the same checks: session, position
    with pytest.raises(grpc.RpcError) as info:
        forged = _header(task_a, "A", "forged", samples=10, resume=status.next)
        direct.UploadDelta(_stream(forged, delta_a, where), timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    elsewhere = aggregator_pb2.UploadPosition(tensor_index=where[0], offset=where[1] + 4)
    with pytest.raises(grpc.RpcError) as info:
        off = _header(task_a, "A", a.session_token, samples=10, resume=elsewhere)
        direct.UploadDelta(_stream(off, delta_a, (where[0], where[1] + 4)), timeout=30)
    assert info.value.code() == ABORTED and "reason=resume_offset" in info.value.details()
    assert _status(direct, task_a, "A", a.session_token).bytes_held == held  # still held

    # ---- the link comes back; A asks where it stands and sends only the rest
    s.relay.start()
    s.link.settle()
    before = s.link.up_bytes
    with open_channel(s.link.address) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        status = _status(stub, task_a, "A", a.session_token)
        resumed = _header(task_a, "A", a.session_token, samples=10, resume=status.next)
        reply = stub.UploadDelta(_stream(resumed, delta_a, where), timeout=60)
    sent_after_cut = s.link.up_bytes - before
    assert reply.accepted and reply.bytes_received == nbytes
    assert _status(direct, task_a, "A", a.session_token).state == ACCEPTED
    with pytest.raises(grpc.RpcError) as info:  # accepted once: a second resume is a duplicate
        direct.UploadDelta(_stream(resumed, delta_a, where), timeout=30)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS

    # ---- B: cut by the client this time, then a "resume" with another header: refused,
    # and the held bytes are dropped, so B starts over
    head_b = _header(task_b, "B", b.session_token, samples=30)
    with open_channel(s.link.address) as channel:
        call = aggregator_pb2_grpc.AggregatorStub(channel).UploadDelta.future(
            _stream(head_b, _random_delta(model, 3)), timeout=60
        )
        wait_for(lambda: _status(direct, task_b, "B", b.session_token).bytes_held > 0, 60, "B held")
        call.cancel()
    wait_for(
        lambda: _status(direct, task_b, "B", b.session_token).state
        == aggregator_pb2.UPLOAD_STATE_PARTIAL,
        10, "B's cut upload to be held",
    )  # fmt: skip
    status = _status(direct, task_b, "B", b.session_token)
    other = _header(task_b, "B", b.session_token, samples=31, resume=status.next)
    with pytest.raises(grpc.RpcError) as info:
        direct.UploadDelta(
            _stream(other, delta_b, (status.next.tensor_index, status.next.offset)), timeout=30
        )
    assert info.value.code() == ABORTED and "reason=resume_mismatch" in info.value.details()
    assert _status(direct, task_b, "B", b.session_token).state == aggregator_pb2.UPLOAD_STATE_NONE

    # ---- B's whole delta, uninterrupted, over the same link: the baseline
    s.link.settle()
    before = s.link.up_bytes
    with open_channel(s.link.address) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        assert stub.UploadDelta(_stream(head_b, delta_b), timeout=60).accepted
    whole = s.link.up_bytes - before

    resent = sent_before_cut + sent_after_cut - whole
    with capsys.disabled():
        print(
            f"\n  resumable upload: delta {nbytes} B; link bytes of an uncut upload {whole}; "
            f"cut after {sent_before_cut} B ({held} B verified and held); "
            f"{sent_after_cut} B after the cut; re-sent {resent} B "
            f"({resent / CHUNK_BYTES:.2f} chunk). Without resumption: {sent_before_cut} B "
            f"lost and the whole {whole} B again."
        )
    assert 0 < held < nbytes
    assert resent < CHUNK_BYTES + HEADERS_ALLOWANCE, resent
    assert sent_after_cut < whole - held + HEADERS_ALLOWANCE

    # ---- the next model is the FedAvg of exactly the two accepted deltas
    expected = _expected_model(s.out, model, {SITES[0]: (delta_a, 10.0), SITES[1]: (delta_b, 30.0)})
    _assert_model_is(direct, "A", a.session_token, expected)
    # a stale round's resume is refused as one (held bytes went with the round)
    with pytest.raises(grpc.RpcError) as info:
        direct.UploadDelta(_stream(resumed, delta_a, where), timeout=30)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "reason=stale_round" in info.value.details()
    port = s.metrics_port
    assert _metric(port, "powertrip_upload_resumes_total") == 1
    assert _rejected(port, "resume_offset") == 1 and _rejected(port, "resume_mismatch") == 1
    assert _rejected(port, "duplicate") == 1
    direct_channel.close()
