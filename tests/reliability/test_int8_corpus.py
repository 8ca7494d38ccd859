"""A run whose deltas cross as int8 (issue #62), over real gRPC against a real aggregator:
a bad scale (NaN, Inf, negative, or one that changes inside a tensor), a wrong length, and
an fp32 stream where the run expects int8 are each refused with their own reason and one
`powertrip_delta_rejected_total{reason}` increment; then both sites' good int8 deltas are
accepted and the next model is exactly the FedAvg of their dequantized values: nothing
refused reached the model, and the round went on."""

from __future__ import annotations

import math
import zlib

import grpc
import numpy as np
import pytest

from powertrip.core import deltacodec
from powertrip.core.fedavg import apply_delta, weighted_average
from powertrip.rpc.tensors import encode_tensors
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc
from tests.reliability.procs import wait_for
from tests.reliability.test_bad_input_corpus import (
    TOKENS,
    _channel,
    _download,
    _register,
    _stream,
    _tasks,
    rejected_total,
    two_site_stack,
)


@pytest.fixture()
def int8_stack(stack_factory, tmp_path):
    return two_site_stack(stack_factory, tmp_path, delta_encoding="int8")


def _int8(arrays, chunk_bytes: int = 1 << 20):
    return list(encode_tensors(arrays, chunk_bytes=chunk_bytes, delta_encoding="int8"))


def test_malformed_int8_deltas_are_refused_and_counted_and_the_round_goes_on(int8_stack):
    aggregator, metrics_port = int8_stack
    with _channel(aggregator.target) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)
        a = _register(stub, "A", "site-000", {"site-000": TOKENS["site-000"]})
        b = _register(stub, "B", "site-001", {"site-001": TOKENS["site-001"]})
        assert a.spec.delta_encoding == "int8"
        task_a = _tasks(stub, "A", a.session_token)[0]
        task_b = _tasks(stub, "B", b.session_token)[0]
        model = _download(stub, "A", a.session_token, task_a.model_version)
        rng = np.random.default_rng(0)
        delta_a = {k: rng.normal(0, 0.1, v.shape).astype(v.dtype) for k, v in model.items()}
        delta_b = {k: rng.normal(0, 0.1, v.shape).astype(v.dtype) for k, v in model.items()}
        first = next(k for k, v in model.items() if v.size > 4 and v.dtype.kind == "f")
        index = list(model).index(first)

        def header(**kw):
            fields = dict(
                task_id=task_a.task_id, site_id="site-000", round=task_a.round,
                model_version=task_a.model_version, num_samples=10, worker_id="A",
                session_token=a.session_token,
            )  # fmt: skip
            fields.update(kw)
            return aggregator_pb2.DeltaHeader(**fields)

        def with_scale(scale: float):
            chunks = _int8(delta_a)
            chunks[index].scale = scale
            return chunks

        longer = _int8(delta_a)
        longer[index].data = longer[index].data + b"\0" * 4
        longer[index].ClearField("crc32c")  # a sender that checksums what it sends
        longer[index].crc32 = zlib.crc32(longer[index].data)
        shorter = _int8(delta_a)
        shorter[index].data = shorter[index].data[:-2]
        shorter[index].ClearField("crc32c")
        shorter[index].crc32 = zlib.crc32(shorter[index].data)
        split = _int8(delta_a, chunk_bytes=4)  # several chunks per tensor
        at = next(i for i, c in enumerate(split) if c.tensor_index == index and c.offset > 0)
        split[at].scale = split[at].scale * 2

        corpus = [
            ("NaN scale", with_scale(math.nan), "scale"),
            ("Inf scale", with_scale(math.inf), "scale"),
            ("negative scale", with_scale(-0.01), "scale"),
            ("scale changes inside a tensor", split, "encoding"),
            ("fp32 to an int8 run", list(encode_tensors(delta_a)), "encoding"),
            ("longer than the tensor", longer, "oversized"),
            ("shorter than the tensor", shorter, "truncated"),
        ]

        def rejected(reason: str) -> float:
            return rejected_total(metrics_port, reason)

        for name, chunks, reason in corpus:
            before = rejected(reason)
            with pytest.raises(grpc.RpcError) as info:
                stub.UploadDelta(_stream(header(), chunks), timeout=30)
            assert f"reason={reason}" in info.value.details(), f"{name}: {info.value.details()}"
            wait_for(lambda: rejected(reason) >= before + 1, 10, f"{name} to be counted")  # noqa: B023
            assert rejected(reason) == before + 1, name

        assert stub.UploadDelta(_stream(header(), _int8(delta_a)), timeout=30).accepted
        head_b = header(
            task_id=task_b.task_id, site_id="site-001", worker_id="B",
            session_token=b.session_token, num_samples=30,
        )  # fmt: skip
        assert stub.UploadDelta(_stream(head_b, _int8(delta_b)), timeout=30).accepted

        def dequantized(delta):
            encoded = deltacodec.encode_all(delta, "int8")
            return {
                k: deltacodec.decode(e.wire, e.dtype, e.encoding, e.scale)
                for k, e in encoded.items()
            }

        expected = apply_delta(
            model, weighted_average([dequantized(delta_a), dequantized(delta_b)], [10, 30])
        )
        task2 = _tasks(stub, "A", a.session_token)[0]
        assert task2.model_version == task_a.model_version + 1
        new = _download(stub, "A", a.session_token, task2.model_version)
        for key in model:
            np.testing.assert_allclose(new[key], expected[key], rtol=1e-6, atol=1e-7)
