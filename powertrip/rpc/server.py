"""One way to run a gRPC service: health, reflection, metrics and graceful shutdown.

Every PowerTrip service serves `grpc.health.v1` and server reflection, exposes Prometheus
metrics on its own port, and on SIGTERM/SIGINT drains in-flight calls before stopping
(the shape of grpc/grpc's examples/python/{health_checking,reflection,graceful_shutdown}).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from powertrip.rpc.malformed import (
    MalformedRequestInterceptor,
    malformed_counter,
    zero_methods,
)

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # chunks are <= 1 MiB; headroom for headers
#: Messages between the aggregator, policy and profiler carry every site's profile: about
#: 45 bytes a site, so 4.5 MB at 100,000 sites. The internal services' servers and every
#: client channel take this much; the aggregator's server, whose port site workers (and
#: anyone else) reach, keeps MAX_MESSAGE_BYTES.
CONTROL_MESSAGE_BYTES = 64 * 1024 * 1024
#: HTTP/2 streams one connection may hold open at once (one site worker needs a handful).
#: Safe only because no request reaches grpcio's failing-deserialiser path, which leaks
#: the stream (see powertrip.rpc.malformed): a few hundred malformed requests would
#: otherwise use the limit up and wedge the connection.
MAX_CONCURRENT_STREAMS = 256


#: a method's (request deserializer, response serializer)
Codecs = tuple[Callable[[bytes], Any], Callable[[Any], bytes]]


def add_servicer(
    server: grpc.Server,
    service: ServiceDescriptor,
    servicer: object,
    codecs: Mapping[str, Codecs] | None = None,
) -> None:
    """What the generated `add_<Service>Servicer_to_server` does, built from the service's
    descriptor, with `codecs` replacing the generated message codecs of the named methods
    (the aggregator's bulk methods use `chunkwire`'s)."""
    codecs = codecs or {}
    unknown = set(codecs) - {m.name for m in service.methods}
    if unknown:
        raise ValueError(f"{service.full_name} has no method(s) {sorted(unknown)}")
    handlers = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        deserialize, serialize = codecs.get(
            method.name, (request.FromString, response.SerializeToString)
        )
        make = _HANDLER_MAKERS[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=deserialize,
            response_serializer=serialize,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


_HANDLER_MAKERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


class PortInUseError(RuntimeError):
    """The service could not bind its port."""


@dataclass
class RunningServer:
    server: grpc.Server
    port: int
    health: health.HealthServicer
    service_names: tuple[str, ...]

    def stop(self, grace_s: float = 5.0) -> None:
        """Report NOT_SERVING, stop taking calls, let in-flight ones finish for `grace_s`."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()


def start_server(
    register: Callable[[grpc.Server], None],
    service_names: Iterable[str],
    *,
    port: int,
    host: str = "[::]",
    max_workers: int = 32,
    credentials: grpc.ServerCredentials | None = None,
    max_concurrent_rpcs: int | None = None,
    registry: CollectorRegistry | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> RunningServer:
    """Build, register and start a server; raise PortInUseError if the port is taken.

    Limits: `max_message_bytes` per message (4 MiB unless the service needs more),
    MAX_CONCURRENT_STREAMS per connection, and (by default)
    4 x max_workers calls in flight; beyond that gRPC answers RESOURCE_EXHAUSTED at once
    instead of queueing without bound.

    A request that is not valid protobuf for its method is answered INVALID_ARGUMENT
    "malformed <type>: <reason>" and counted in `powertrip_malformed_requests_total{method}`
    on `registry` (the service's; None: counted nowhere), for every method registered here,
    health and reflection included (`powertrip.rpc.malformed`).
    """
    options = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
        ("grpc.so_reuseport", 0),
    ]
    malformed = malformed_counter(registry)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers),
        options=options,
        maximum_concurrent_rpcs=max_concurrent_rpcs or 4 * max_workers,
        interceptors=[MalformedRequestInterceptor(malformed)],
    )
    register(server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = tuple(service_names)
    reflection.enable_server_reflection(
        (*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    zero_methods(malformed, (*names, health.SERVICE_NAME))
    address = f"{host}:{port}"
    try:
        bound = (
            server.add_secure_port(address, credentials)
            if credentials
            else server.add_insecure_port(address)
        )
    except RuntimeError as exc:  # grpcio raises RuntimeError when binding fails
        raise PortInUseError(f"cannot bind {address}: {exc}") from exc
    if bound == 0:
        raise PortInUseError(f"cannot bind {address}: port in use or not permitted")
    server.start()
    for name in (*names, ""):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving %s on port %d", ", ".join(names), bound)
    return RunningServer(server, bound, health_servicer, names)


def handle_stop_signals(done: threading.Event) -> threading.Event:
    """SIGTERM/SIGINT set `done` from now on. A service calls this before it starts serving
    (and before it prints its port), so a signal that arrives while it starts up drains it
    like any other instead of killing it mid-start.

    The handler only writes the signal's number to a pipe; a watcher thread logs it and sets
    `done`. Python runs a handler on the main thread between two bytecodes, possibly while
    that thread holds `done`'s own lock (waking up inside `done.wait()`): a handler that
    called `done.set()` there waited for itself forever. A site worker that got SIGTERM
    twice within 4 ms hung so, with its run long over."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def _handle(signum, _frame):
        with contextlib.suppress(OSError):  # a full pipe: the watcher has bytes to read
            os.write(write_fd, bytes([signum]))

    def _watch() -> None:
        while data := os.read(read_fd, 64):
            for signum in data:
                log.info("signal %s: draining", signal.Signals(signum).name)
            done.set()

    threading.Thread(target=_watch, name="stop-signals", daemon=True).start()
    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    return done


def wait_for_termination(
    running: RunningServer, grace_s: float = 5.0, stop_event: threading.Event | None = None
) -> None:
    """Block until SIGTERM/SIGINT (or `stop_event`, whose signals its maker handles with
    `handle_stop_signals`), then shut down gracefully."""
    done = stop_event if stop_event is not None else handle_stop_signals(threading.Event())
    done.wait()
    running.stop(grace_s)
    log.info("stopped")
