"""gRPC message limits: the internal services take a 100,000-site profile table (about
4.5 MB), the aggregator's public port keeps 4 MiB."""

from __future__ import annotations

import grpc
import pytest

from powertrip.rpc.channels import open_channel
from powertrip.rpc.server import CONTROL_MESSAGE_BYTES, MAX_MESSAGE_BYTES, start_server
from services.aggregator.__main__ import SPEC as AGGREGATOR
from services.policy.__main__ import SPEC as POLICY
from services.profiler.__main__ import SPEC as PROFILER

TABLE_100K = 4_500_000  # bytes: one 100,000-site SiteColumns message


def _echo_server(max_message_bytes: int):
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: b"ok")
    generic = grpc.method_handlers_generic_handler("t.Echo", {"Call": handler})
    return start_server(
        lambda server: server.add_generic_rpc_handlers([generic]),
        ["t.Echo"],
        port=0,
        host="127.0.0.1",
        max_workers=2,
        max_message_bytes=max_message_bytes,
    )


@pytest.mark.parametrize(
    ("limit", "code"),
    [(CONTROL_MESSAGE_BYTES, None), (MAX_MESSAGE_BYTES, grpc.StatusCode.RESOURCE_EXHAUSTED)],
)
def test_a_100k_site_table_passes_only_the_control_limit(limit, code):
    running = _echo_server(limit)
    try:
        with open_channel(f"127.0.0.1:{running.port}") as channel:
            call = channel.unary_unary("/t.Echo/Call")
            if code is None:
                assert call(b"\0" * TABLE_100K, timeout=30) == b"ok"
            else:
                with pytest.raises(grpc.RpcError) as info:
                    call(b"\0" * TABLE_100K, timeout=30)
                assert info.value.code() == code
    finally:
        running.stop(0)


def test_only_the_internal_services_take_the_larger_messages():
    assert POLICY.max_message_bytes == PROFILER.max_message_bytes == CONTROL_MESSAGE_BYTES
    assert AGGREGATOR.max_message_bytes == MAX_MESSAGE_BYTES < TABLE_100K < CONTROL_MESSAGE_BYTES
