"""Regression for issue #18 item 1: malformed requests wedged a connection.

grpcio's server leaked the HTTP/2 stream of every request that failed to deserialise (it
answered INTERNAL, then tried to send a second status), so with `grpc.max_concurrent_streams`
= 256 a few hundred of them on one connection made it refuse every later call, the health
check included (UNAVAILABLE, RST_STREAM code 7). Now every malformed request, of every
method, unary or streamed, is answered INVALID_ARGUMENT naming the message type, counted in
`powertrip_malformed_requests_total{method}`, and the connection stays usable.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from concurrent import futures

import grpc
import pytest
from google.protobuf import descriptor as fd
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc

from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.rpc.server import MAX_CONCURRENT_STREAMS
from powertrip.v1 import aggregator_pb2, policy_pb2, profiler_pb2
from tests.reliability.procs import free_port, scrape

pytestmark = pytest.mark.slow

SERVICES = {
    "aggregator": aggregator_pb2.DESCRIPTOR.services_by_name["Aggregator"],
    "policy": policy_pb2.DESCRIPTOR.services_by_name["Policy"],
    "profiler": profiler_pb2.DESCRIPTOR.services_by_name["Profiler"],
}
#: malformed requests per method, all on one connection: many times the stream limit
PER_METHOD = 2000
THREADS = 6
#: a real call per service, answered normally once the malformed ones are done
REAL_CALLS = {
    "aggregator": ("GetStatus", aggregator_pb2.GetStatusRequest()),
    "policy": ("ListPolicies", policy_pb2.ListPoliciesRequest()),
    "profiler": ("GetProfiles", profiler_pb2.GetProfilesRequest(site_ids=["site-000"])),
}

assert PER_METHOD > 4 * MAX_CONCURRENT_STREAMS


def _identity(b: bytes) -> bytes:
    return b


def malformed_payloads(descriptor: fd.Descriptor, count: int, seed: int) -> list[bytes]:
    """`count` byte strings that do not parse as `descriptor`: random bytes, truncated
    fields, field number 0, invalid wire types, bad UTF-8 in strings (each checked here)."""
    cls = message_factory.GetMessageClass(descriptor)
    rng = random.Random(seed)
    shapes = [
        lambda: rng.randbytes(rng.randint(1, 64)),
        lambda: b"\x00" + rng.randbytes(rng.randint(0, 16)),  # field number 0
        lambda: bytes([rng.randint(1, 15) << 3 | rng.choice((6, 7))]),  # wire types 6, 7
        lambda: b"\x0a" + bytes([rng.randint(5, 100)]) + rng.randbytes(rng.randint(0, 4)),
        lambda: b"\x08" + b"\xff" * rng.randint(1, 12),  # varint with no end
        lambda: b"\x0a\x02\xc3\x28",  # field 1, invalid UTF-8 (malformed if it is a string)
    ]
    out: list[bytes] = []
    while len(out) < count:
        data = rng.choice(shapes)()
        try:
            cls.FromString(data)
        except Exception:  # noqa: BLE001 - any failure to parse makes it a case
            out.append(data)
    return out


def _send(channel: grpc.Channel, path: str, method: fd.MethodDescriptor, data: bytes):
    """One call with raw request bytes: (code name, details)."""
    kwargs = dict(request_serializer=_identity, response_deserializer=_identity)
    try:
        if method.client_streaming:
            channel.stream_unary(path, **kwargs)(iter([data]), timeout=10)
        elif method.server_streaming:
            for _ in channel.unary_stream(path, **kwargs)(data, timeout=10):
                pass
        else:
            channel.unary_unary(path, **kwargs)(data, timeout=10)
        return "OK", ""
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Profiler, policy and aggregator as processes, each with a metrics port."""
    from powertrip.app.experiments.launcher import start_service

    tmp = tmp_path_factory.mktemp("malformed")
    config = RunConfig(workload="synthetic", num_sites=3, max_rounds=2, seed=1, policy="all")
    path = tmp / "run.yaml"
    config.write_yaml(path)
    logs = tmp / "logs"
    metrics = {name: free_port() for name in SERVICES}
    started: dict = {}
    try:
        started["profiler"] = start_service(
            "profiler",
            ["--config", str(path), "--metrics-port", str(metrics["profiler"])],
            logs,
        )
        started["policy"] = start_service(
            "policy", ["--metrics-port", str(metrics["policy"])], logs
        )
        started["aggregator"] = start_service(
            "aggregator",
            ["--config", str(path), "--out", str(tmp / "run"),
             "--profiler", started["profiler"].target, "--policy", started["policy"].target,
             "--register-timeout-s", "3600", "--metrics-port", str(metrics["aggregator"])],
            logs,
        )  # fmt: skip
        yield {name: (service, metrics[name]) for name, service in started.items()}
    finally:
        for service in reversed(list(started.values())):
            service.stop()


@pytest.mark.parametrize("name", list(SERVICES))
def test_malformed_requests_never_wedge_a_connection(stack, name):
    service, metrics_port = stack[name]
    descriptor = SERVICES[name]
    cases = [
        (f"/{descriptor.full_name}/{method.name}", method, data)
        for index, method in enumerate(descriptor.methods)
        for data in malformed_payloads(method.input_type, PER_METHOD, seed=index)
    ]
    random.Random(18).shuffle(cases)  # every kind of method, interleaved, on one connection
    before = scrape(metrics_port)
    started = time.monotonic()
    with open_channel(service.target) as channel:
        with futures.ThreadPoolExecutor(THREADS) as pool:
            answers = list(pool.map(lambda case: (case[0], case[1], *_send(channel, *case)), cases))
        elapsed = time.monotonic() - started

        codes = Counter(code for _, _, code, _ in answers)
        assert codes == {"INVALID_ARGUMENT": len(cases)}, (name, dict(codes))
        for path, method, _, details in answers:
            assert details.startswith(f"malformed {method.input_type.full_name}: "), (
                path, details)  # fmt: skip

        # the same connection still answers: health, and a real method
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        method_name, request = REAL_CALLS[name]
        method = descriptor.methods_by_name[method_name]
        response_class = message_factory.GetMessageClass(method.output_type)
        response = channel.unary_unary(
            f"/{descriptor.full_name}/{method_name}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_class.FromString,
        )(request, timeout=10)
        assert isinstance(response, response_class)

    assert service.alive(), service.log_tail()
    after = scrape(metrics_port)
    for method in descriptor.methods:
        path = f"/{descriptor.full_name}/{method.name}"
        key = f'powertrip_malformed_requests_total{{method="{path}"}}'
        assert key in before, f"no zero series for {path} before any malformed request"
        assert after.get(key, 0) - before[key] == PER_METHOD, (key, after.get(key))
    print(f"{name}: {len(cases)} malformed requests on one connection in {elapsed:.1f}s")
