"""Bad-input corpus over real gRPC: every malformed, forged or mistimed upload gets its own
gRPC status and one `powertrip_delta_rejected_total{reason}` increment, and nothing of it
reaches the model (the round's result is checked exactly afterwards). Registration with
per-site join tokens: no token -> UNAUTHENTICATED, another site's token -> PERMISSION_DENIED.
"""

from __future__ import annotations

import time
import zlib

import grpc
import numpy as np
import pytest
import yaml

from powertrip.core.config import RunConfig
from powertrip.rpc.tensors import TensorAssembler, encode_tensors
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc, common_pb2
from tests.reliability.procs import free_port, scrape, wait_for

TOKENS = {"site-000": "a" * 32, "site-001": "b" * 32}
BIG = 16 << 20  # the test client may send more than the service accepts


def _channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(
        target,
        options=[("grpc.max_send_message_length", BIG), ("grpc.max_receive_message_length", BIG)],
    )


def _register(stub, worker: str, site: str, tokens: dict[str, str]):
    return stub.Register(
        aggregator_pb2.RegisterRequest(worker_id=worker, site_ids=[site], site_tokens=tokens),
        timeout=10,
    )


def _tasks(stub, worker: str, session: str) -> list[aggregator_pb2.Task]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        polled = stub.NextTask(
            aggregator_pb2.NextTaskRequest(worker_id=worker, wait_s=2, session_token=session),
            timeout=10,
        )
        if polled.tasks:
            return list(polled.tasks)
    raise AssertionError(f"no task for {worker}")


def _download(stub, worker, session, version) -> dict[str, np.ndarray]:
    assembler = TensorAssembler()
    request = aggregator_pb2.DownloadModelRequest(
        worker_id=worker, model_version=version, session_token=session
    )
    for chunk in stub.DownloadModel(request, timeout=30):
        assembler.add(chunk)
    return assembler.finish()


def rejected_total(metrics_port: int, reason: str) -> float:
    """powertrip_delta_rejected_total{reason} as the aggregator's metrics endpoint serves it."""
    return scrape(metrics_port).get(f'powertrip_delta_rejected_total{{reason="{reason}"}}', 0.0)


def _stream(header, chunks):
    yield aggregator_pb2.UploadDeltaRequest(header=header)
    for chunk in chunks:
        yield aggregator_pb2.UploadDeltaRequest(chunk=chunk)


def _chunk(name, array, index, count, data=None, crc=None, **kw):
    data = array.tobytes() if data is None else data
    return common_pb2.TensorChunk(
        name=name,
        dtype=str(array.dtype),
        shape=list(array.shape),
        offset=0,
        data=data,
        crc32=zlib.crc32(data) if crc is None else crc,
        tensor_index=index,
        tensor_count=count,
        **kw,
    )


def two_site_stack(stack_factory, tmp_path, **settings):
    """A real aggregator (and its services) for two sites with per-site tokens, metrics
    served: (the aggregator, its metrics port). FedAvg with fp32 deltas unless `settings`
    say otherwise: the tests send raw deltas and check the model is their plain average."""
    settings = {"outer_optimizer": "fedavg", "delta_encoding": "fp32", **settings}
    config = RunConfig(
        workload="synthetic", num_sites=2, max_rounds=2, seed=3, policy="all",
        target_accuracy=0.999, round_deadline_s=300, **settings,
    )  # fmt: skip
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(yaml.safe_dump(TOKENS))
    metrics_port = free_port()
    _, _, aggregator = stack_factory(
        path, tmp_path / "run", "--site-tokens", str(tokens), "--metrics-port", str(metrics_port)
    )
    return aggregator, metrics_port


@pytest.fixture()
def stack(stack_factory, tmp_path):
    return two_site_stack(stack_factory, tmp_path)


def test_bad_input_corpus_each_case_has_its_status_and_reason(stack):
    aggregator, metrics_port = stack
    with _channel(aggregator.target) as channel:
        stub = aggregator_pb2_grpc.AggregatorStub(channel)

        # ---- registration with per-site tokens
        for tokens, code in [
            ({}, grpc.StatusCode.UNAUTHENTICATED),
            ({"site-000": "x" * 32}, grpc.StatusCode.UNAUTHENTICATED),
            ({"site-000": TOKENS["site-001"]}, grpc.StatusCode.PERMISSION_DENIED),
        ]:
            with pytest.raises(grpc.RpcError) as info:
                _register(stub, "A", "site-000", tokens)
            assert info.value.code() == code, info.value.details()
        a = _register(stub, "A", "site-000", {"site-000": TOKENS["site-000"]})
        b = _register(stub, "B", "site-001", {"site-001": TOKENS["site-001"]})
        task_a = _tasks(stub, "A", a.session_token)[0]
        task_b = _tasks(stub, "B", b.session_token)[0]
        model = _download(stub, "A", a.session_token, task_a.model_version)
        with pytest.raises(grpc.RpcError) as info:
            _download(stub, "A", "forged", task_a.model_version)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED

        names = list(model)
        count = len(names)
        zeros = {k: np.zeros_like(v) for k, v in model.items()}
        first = names[0]

        def header(**kw):
            fields = dict(
                task_id=task_a.task_id, site_id="site-000", round=task_a.round,
                model_version=task_a.model_version, num_samples=10, worker_id="A",
                session_token=a.session_token,
            )  # fmt: skip
            fields.update(kw)
            return aggregator_pb2.DeltaHeader(**fields)

        def replaced(array):
            return list(encode_tensors({**zeros, first: array}))

        good = list(encode_tensors(zeros))
        bad_crc = list(good)
        bad_crc[0] = _chunk(first, zeros[first], 0, count, crc=zeros[first].size + 1)
        huge = np.zeros(3 << 20, dtype=np.uint8)  # 3 MiB in one message (limit: 1 MiB chunks)
        overrun = _chunk(first, zeros[first], 0, count, data=zeros[first].tobytes() + b"\0" * 8)
        fewer = list(encode_tensors({k: zeros[k] for k in names[:-1]}))

        corpus = [
            # name, header, chunks, status, reason
            ("nan", header(), replaced(np.full_like(zeros[first], np.nan)),
             grpc.StatusCode.INVALID_ARGUMENT, "non_finite"),
            ("inf", header(), replaced(np.full_like(zeros[first], np.inf)),
             grpc.StatusCode.INVALID_ARGUMENT, "non_finite"),
            ("wrong shape", header(), replaced(np.zeros((3, 3), np.float32)),
             grpc.StatusCode.INVALID_ARGUMENT, "shape"),
            ("wrong dtype", header(), replaced(zeros[first].astype(np.float64)),
             grpc.StatusCode.INVALID_ARGUMENT, "dtype"),
            ("wrong tensor count", header(), fewer,
             grpc.StatusCode.INVALID_ARGUMENT, "tensor_count"),
            ("oversized message", header(),
             [_chunk(first, huge, 0, count)],
             grpc.StatusCode.RESOURCE_EXHAUSTED, "oversized_message"),
            ("oversized stream", header(), [overrun],
             grpc.StatusCode.RESOURCE_EXHAUSTED, "oversized"),
            ("truncated stream", header(), good[: count // 2],
             grpc.StatusCode.INVALID_ARGUMENT, "truncated"),
            ("checksum mismatch", header(), bad_crc,
             grpc.StatusCode.INVALID_ARGUMENT, "checksum"),
            ("stale round", header(round=task_a.round - 1), good,
             grpc.StatusCode.FAILED_PRECONDITION, "stale_round"),
            ("future round", header(round=task_a.round + 5), good,
             grpc.StatusCode.FAILED_PRECONDITION, "future_round"),
            ("stale model", header(model_version=task_a.model_version + 1), good,
             grpc.StatusCode.FAILED_PRECONDITION, "stale_model"),
            ("unknown site id", header(site_id="site-099"), good,
             grpc.StatusCode.NOT_FOUND, "unknown_site"),
            ("another site's identity", header(site_id="site-001", task_id=task_b.task_id),
             good, grpc.StatusCode.PERMISSION_DENIED, "wrong_identity"),
            ("another worker's session", header(worker_id="B"), good,
             grpc.StatusCode.UNAUTHENTICATED, "unauthenticated"),
            ("no header", None, good, grpc.StatusCode.INVALID_ARGUMENT, "no_header"),
            ("zero samples", header(num_samples=0), good,
             grpc.StatusCode.INVALID_ARGUMENT, "num_samples"),
        ]  # fmt: skip

        def rejected(reason: str) -> float:
            return rejected_total(metrics_port, reason)

        for name, head, chunks, code, reason in corpus:
            before = rejected(reason)
            if head is None:
                messages = (aggregator_pb2.UploadDeltaRequest(chunk=c) for c in chunks)
            else:
                messages = _stream(head, chunks)
            with pytest.raises(grpc.RpcError) as info:
                stub.UploadDelta(messages, timeout=30)
            assert info.value.code() == code, f"{name}: {info.value.details()}"
            assert f"reason={reason}" in info.value.details(), name
            # gRPC may answer the client before the handler has counted: wait a little
            wait_for(lambda: rejected(reason) >= before + 1, 10, f"{name} to be counted")  # noqa: B023
            assert rejected(reason) == before + 1, name

        # over gRPC's own 4 MiB message cap: the transport refuses it before our checks see
        # the message; the handler sees a broken or cut stream and counts it as one of these
        def total_rejected() -> float:
            return sum(
                v for k, v in scrape(metrics_port).items()
                if k.startswith("powertrip_delta_rejected_total")
            )  # fmt: skip

        before = total_rejected()
        with pytest.raises(grpc.RpcError) as info:
            big = [_chunk(first, np.zeros(5 << 20, np.uint8), 0, count)]
            stub.UploadDelta(_stream(header(), big), timeout=30)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        wait_for(lambda: total_rejected() >= before + 1, 10, "the cut stream to be counted")
        assert total_rejected() == before + 1

        # a good delta, then the same again: a duplicate
        ones = {k: np.ones_like(v) for k, v in model.items()}
        assert stub.UploadDelta(_stream(header(), encode_tensors(ones)), timeout=30).accepted
        before = rejected("duplicate")
        with pytest.raises(grpc.RpcError) as info:
            stub.UploadDelta(_stream(header(), encode_tensors(ones)), timeout=30)
        assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert rejected("duplicate") == before + 1

        head_b = header(
            task_id=task_b.task_id, site_id="site-001", worker_id="B",
            session_token=b.session_token, num_samples=30,
        )  # fmt: skip
        assert stub.UploadDelta(_stream(head_b, encode_tensors(zeros)), timeout=30).accepted

        # nothing rejected was aggregated: next model = old + (1 * 10 + 0 * 30) / 40, exactly
        task2 = _tasks(stub, "A", a.session_token)[0]
        new = _download(stub, "A", a.session_token, task2.model_version)
        for key in model:
            np.testing.assert_allclose(new[key], model[key] + 0.25, rtol=1e-6, atol=1e-6)
        health = scrape(metrics_port)
        assert health['powertrip_auth_failures_total{kind="site_token"}'] == 2
        assert health['powertrip_auth_failures_total{kind="wrong_site_token"}'] == 1
