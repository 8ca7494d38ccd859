"""Client-side helpers: channels with sane options, deadlines that scale with payload,
readiness waits through the standard health service."""

from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from powertrip.rpc.server import CONTROL_MESSAGE_BYTES

#: Slowest link we plan for when a deadline depends on payload size (bytes/s).
MIN_PLANNED_BANDWIDTH = 5e6


def open_channel(target: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    options = [
        # the aggregator's SelectSites request and the profiler's reply grow with the sites;
        # what a server accepts is its own limit (powertrip.rpc.server)
        ("grpc.max_receive_message_length", CONTROL_MESSAGE_BYTES),
        ("grpc.max_send_message_length", CONTROL_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 30_000),
        # a client started beside its server (the embedded deployment starts a run's
        # workers with their aggregator) dials before the server listens; gRPC's first
        # retry then came 1 s later, 0.8 s of every run's start-up. A peer that is down
        # for long is retried every 5 s at most (gRPC's cap is 120 s): a worker waiting for
        # a remote aggregator joins within seconds of it coming up.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 5_000),
    ]
    if credentials is not None:
        return grpc.secure_channel(target, credentials, options=options)
    return grpc.insecure_channel(target, options=options)


def deadline_for(payload_bytes: int, base_s: float = 10.0) -> float:
    """Deadline (seconds) for a call moving `payload_bytes`: a floor plus time at a slow link."""
    return base_s + payload_bytes / MIN_PLANNED_BANDWIDTH


def wait_until_serving(
    target: str,
    timeout_s: float = 30.0,
    service: str = "",
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """Poll grpc.health.v1 until SERVING; raise TimeoutError naming the target otherwise."""
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    with open_channel(target, credentials) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last_error = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.RpcError as exc:
                last_error = exc.code().name
            time.sleep(0.1)
    raise TimeoutError(f"{target} did not become SERVING within {timeout_s:.0f}s ({last_error})")
