"""Fuzz every RPC of every service over real gRPC: random bytes and random valid-shaped
messages (built from the proto descriptors). No service crashes, each answers every call
within its deadline, stays SERVING afterwards, and its memory stays bounded."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor as fd
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from powertrip.core.config import RunConfig
from powertrip.rpc.channels import open_channel
from powertrip.v1 import aggregator_pb2, policy_pb2, profiler_pb2, site_worker_pb2

pytestmark = pytest.mark.slow

SERVICES = {
    "aggregator": aggregator_pb2.DESCRIPTOR.services_by_name["Aggregator"],
    "profiler": profiler_pb2.DESCRIPTOR.services_by_name["Profiler"],
    "policy": policy_pb2.DESCRIPTOR.services_by_name["Policy"],
    "site_worker": site_worker_pb2.DESCRIPTOR.services_by_name["SiteWorker"],
}
METHODS = [(svc, m) for svc, d in SERVICES.items() for m in d.methods]
SITE_IDS = ["site-000", "site-001", "site-999", "", "w0"]
T = fd.FieldDescriptor


def _repeated(field: fd.FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == T.LABEL_REPEATED


def _scalar(field: fd.FieldDescriptor):
    kind = field.type
    if kind == T.TYPE_STRING:
        return st.one_of(st.sampled_from(SITE_IDS), st.text(max_size=24))
    if kind == T.TYPE_BYTES:
        return st.binary(max_size=256)
    if kind == T.TYPE_BOOL:
        return st.booleans()
    if kind in (T.TYPE_DOUBLE, T.TYPE_FLOAT):
        return st.floats(
            allow_nan=True, allow_infinity=True, width=64 if kind == T.TYPE_DOUBLE else 32
        )
    if kind in (T.TYPE_UINT32, T.TYPE_FIXED32):
        return st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1))
    if kind in (T.TYPE_UINT64, T.TYPE_FIXED64):
        return st.one_of(st.integers(0, 8), st.integers(0, 2**64 - 1))
    if kind in (T.TYPE_INT32, T.TYPE_SINT32, T.TYPE_SFIXED32):
        return st.integers(-(2**31), 2**31 - 1)
    if kind in (T.TYPE_INT64, T.TYPE_SINT64, T.TYPE_SFIXED64):
        return st.integers(-(2**63), 2**63 - 1)
    if kind == T.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    raise NotImplementedError(field.full_name)


@st.composite
def messages(draw, descriptor: fd.Descriptor, depth: int = 0):
    """A random message of `descriptor`: any subset of fields, small repeated fields."""
    cls = message_factory.GetMessageClass(descriptor)
    msg = cls()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        is_message = field.type == T.TYPE_MESSAGE
        if is_message and field.message_type.GetOptions().map_entry:
            key_f, value_f = (
                field.message_type.fields_by_name["key"],
                field.message_type.fields_by_name["value"],
            )
            entries = draw(st.dictionaries(_scalar(key_f), _scalar(value_f), max_size=4))
            getattr(msg, field.name).update(entries)
        elif is_message:
            if depth >= 2:
                continue
            count = draw(st.integers(0, 3)) if _repeated(field) else 1
            for _ in range(count):
                sub = draw(messages(field.message_type, depth + 1))
                if _repeated(field):
                    getattr(msg, field.name).add().CopyFrom(sub)
                else:
                    getattr(msg, field.name).CopyFrom(sub)
        elif _repeated(field):
            getattr(msg, field.name).extend(draw(st.lists(_scalar(field), max_size=4)))
        else:
            setattr(msg, field.name, draw(_scalar(field)))
    return msg


def _identity(b: bytes) -> bytes:
    return b


def _call(channel: grpc.Channel, service: str, method: fd.MethodDescriptor, payloads: list[bytes]):
    """One call with raw request bytes; returns the status code (OK included)."""
    path = f"/{SERVICES[service].full_name}/{method.name}"
    kwargs = dict(request_serializer=_identity, response_deserializer=_identity)
    try:
        if method.client_streaming:
            channel.stream_unary(path, **kwargs)(iter(payloads), timeout=10)
        elif method.server_streaming:
            for _ in channel.unary_stream(path, **kwargs)(payloads[0], timeout=10):
                pass
        else:
            channel.unary_unary(path, **kwargs)(payloads[0], timeout=10)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return exc.code()


def _parses(method: fd.MethodDescriptor, data: bytes) -> bool:
    try:
        message_factory.GetMessageClass(method.input_type).FromString(data)
    except Exception:  # noqa: BLE001 - any failure to parse
        return False
    return True


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from powertrip.app.experiments.launcher import start_service

    tmp = tmp_path_factory.mktemp("fuzz")
    config = RunConfig(workload="synthetic", num_sites=3, max_rounds=2, seed=1, policy="all")
    path = tmp / "run.yaml"
    config.write_yaml(path)
    logs = tmp / "logs"
    started = []
    try:
        started.append(start_service("profiler", ["--config", str(path)], logs))
        started.append(start_service("policy", [], logs))
        agg = start_service(
            "aggregator",
            ["--config", str(path), "--out", str(tmp / "run"), "--profiler", started[0].target,
             "--policy", started[1].target, "--register-timeout-s", "3600"],
            logs,
        )  # fmt: skip
        started.append(agg)
        worker = start_service(
            "site_worker",
            ["--aggregator", agg.target, "--sites", "site-000", "--worker-id", "w0"],
            logs,
        )
        started.append(worker)
        yield {"profiler": started[0], "policy": started[1], "aggregator": agg,
               "site_worker": worker}  # fmt: skip
    finally:
        for service in reversed(started):
            service.stop()


# The suite gates merges, so its fuzzing is reproducible: the same 120 cases per kind on every
# run. POWERTRIP_FUZZ_EXPLORE=1 draws new ones (how the non-ASCII token case was found);
# hypothesis prints a failing case with how to replay it.
FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=os.environ.get("POWERTRIP_FUZZ_EXPLORE", "") != "1",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("kind", ["bytes", "messages"])
def test_fuzz_every_rpc_keeps_services_healthy(services, kind):
    rss_before = {name: _rss_kb(s.process.pid) for name, s in services.items()}
    channels = {name: open_channel(s.target) for name, s in services.items()}
    seen: dict[str, set] = {}

    if kind == "bytes":
        strategy = st.tuples(
            st.sampled_from(METHODS), st.lists(st.binary(max_size=512), min_size=1, max_size=4)
        )
    else:
        strategy = st.sampled_from(METHODS).flatmap(
            lambda sm: st.tuples(
                st.just(sm),
                st.lists(
                    messages(sm[1].input_type).map(lambda m: m.SerializeToString()),
                    min_size=1,
                    max_size=4,
                ),
            )
        )

    @FUZZ
    @given(strategy)
    def one(case):
        (service, method), payloads = case
        code = _call(channels[service], service, method, payloads)
        # never a server crash or a hang: UNKNOWN means an unhandled exception in a handler
        assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED), (
            service, method.name, code)  # fmt: skip
        # bytes that are not the request type are the caller's fault, never INTERNAL (#18):
        # a malformed first message is INVALID_ARGUMENT (every streaming servicer reads it)
        assert code != grpc.StatusCode.INTERNAL, (service, method.name, payloads)
        if not _parses(method, payloads[0]):
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (service, method.name, code)
        seen.setdefault(f"{service}.{method.name}", set()).add(code.name)

    try:
        one()
        for name, service in services.items():
            assert service.alive(), f"{name} died:\n{service.log_tail()}"
            reply = health_pb2_grpc.HealthStub(channels[name]).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
            # bounded memory: no growth beyond a generous allowance for caches and arenas
            assert _rss_kb(service.process.pid) < rss_before[name] * 1.5 + 50_000, name
    finally:
        for channel in channels.values():
            channel.close()
    print(kind, {k: sorted(v) for k, v in sorted(seen.items())})
    assert len(seen) >= len(METHODS) // 2, seen


def test_tokens_with_any_characters_are_refused_not_crashed_on(services):
    """Regression for a case the fuzzer found: a session token with a non-ASCII character
    (here U+0080) made `secrets.compare_digest` raise TypeError, and NextTask answered
    UNKNOWN. Any token that is not the right one must be UNAUTHENTICATED."""
    requests = [
        ("NextTask", aggregator_pb2.NextTaskRequest(worker_id="w0", session_token="\x80")),
        ("NextTask", aggregator_pb2.NextTaskRequest(worker_id="w0", session_token="é" * 32)),
        (
            "DownloadModel",
            aggregator_pb2.DownloadModelRequest(worker_id="w0", session_token="\u2603"),
        ),
    ]
    methods = SERVICES["aggregator"].methods_by_name
    with open_channel(services["aggregator"].target) as channel:
        for name, request in requests:
            code = _call(channel, "aggregator", methods[name], [request.SerializeToString()])
            assert code == grpc.StatusCode.UNAUTHENTICATED, (name, request, code)
