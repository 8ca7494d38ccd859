"""Requests that are not valid protobuf: answered INVALID_ARGUMENT, counted, never leaked.

grpcio's own handling of a request that fails to deserialise is broken (grpcio 1.85, the
synchronous server): it answers INTERNAL "Exception deserializing request!", then, when
the client's half-close arrives, tries to send a second status (UNIMPLEMENTED "requires
exactly one request message"). C-core refuses that batch (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS)
after cygrpc has taken a reference on its tag, so the tag, the call and its HTTP/2 stream
are never freed: about 19 KiB leaked per malformed request, and with
`grpc.max_concurrent_streams` set, the connection refuses every new stream (RST_STREAM
REFUSED_STREAM, read as UNAVAILABLE) once that many have leaked. A streamed request is
worse still: the handler sees the stream end early, as if the client had finished.

`MalformedRequestInterceptor` keeps every deserialisation failure out of grpcio's path.
Each method's `request_deserializer` is wrapped so it never raises: bytes that do not parse
become a `Malformed` value, and the method's behaviour, wrapped too, answers it with
INVALID_ARGUMENT "malformed <message type>: <reason>" before the servicer sees anything
(for a request stream: at the first bad message, whatever the servicer then does) and
counts it in `powertrip_malformed_requests_total{method}`.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger(__name__)

METRIC = "powertrip_malformed_requests"  # exposed as powertrip_malformed_requests_total
_MAX_CACHED = 1024  # wrapped handlers kept, one per method

_counters: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def malformed_counter(registry: CollectorRegistry | None) -> Counter:
    """The counter on `registry` (one per registry, however many servers share it); with
    None, a counter registered nowhere."""
    if registry is None:
        return _new_counter(None)
    counter = _counters.get(registry)
    if counter is None:
        counter = _counters[registry] = _new_counter(registry)
    return counter


def _new_counter(registry: CollectorRegistry | None) -> Counter:
    return Counter(
        METRIC,
        "Requests whose message is not valid protobuf for the method (answered "
        "INVALID_ARGUMENT), by full gRPC method name",
        ["method"],
        registry=registry,
    )


def zero_methods(counter: Counter, service_names: Iterable[str]) -> None:
    """A zero series for every method of the named services (those in the default descriptor
    pool), so the first malformed request is an increase a rule can see."""
    pool = descriptor_pool.Default()
    for name in service_names:
        try:
            service = pool.FindServiceByName(name)
        except KeyError:
            continue
        for method in service.methods:
            counter.labels(f"/{service.full_name}/{method.name}")


class Malformed:
    """What a wrapped request deserializer returns for bytes that do not parse."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


class MalformedRequestError(grpc.RpcError):
    """Raised from a request stream at its first malformed message. An `RpcError`, like the
    one grpcio raises when a stream breaks, so servicers that clean up after a broken stream
    do so here too; the call's status stays INVALID_ARGUMENT whatever they do next."""


def _message_type(deserializer: Callable[[bytes], Any], method: str) -> str:
    """Full name of the request type: from `X.FromString`, else from the method's descriptor."""
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    name = getattr(descriptor, "full_name", None)
    if isinstance(name, str):
        return name
    try:  # "/pkg.Service/Method" -> pkg.Service.Method
        found = descriptor_pool.Default().FindMethodByName(method.lstrip("/").replace("/", "."))
        return found.input_type.full_name
    except (KeyError, AttributeError):
        return "request"


def _safe_deserializer(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # noqa: BLE001 - any failure to decode is the caller's
            text = str(exc)
            # upb's DecodeError only repeats the type name, which the details already give
            if not text or text.startswith("Error parsing message"):
                text = "not valid protobuf"
            return Malformed(f"{text} ({len(data)} bytes)")

    return deserialize


class _Method:
    """One method's malformed-request handling: its details text and counter child."""

    def __init__(self, method: str, message_type: str, counter: Counter):
        self.method = method
        self.message_type = message_type
        self.counter = counter.labels(method)

    def details(self, bad: Malformed) -> str:
        return f"malformed {self.message_type}: {bad.reason}"

    def reject(self, bad: Malformed, context: grpc.ServicerContext) -> None:
        """Count the request and abort the call with INVALID_ARGUMENT (raises)."""
        self.counter.inc()
        log.debug("%s: %s", self.method, self.details(bad))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.details(bad))


class _CheckedStream:
    """A request iterator that stops the call at the first malformed message."""

    def __init__(self, requests: Iterator[Any], context: grpc.ServicerContext, method: _Method):
        self._requests = requests
        self._context = context
        self._method = method
        self.bad: Malformed | None = None

    def __iter__(self) -> _CheckedStream:
        return self

    def __next__(self) -> Any:
        if self.bad is not None:
            raise self._error()
        request = next(self._requests)
        if isinstance(request, Malformed):
            self.bad = request
            self._method.counter.inc()
            log.debug("%s: %s", self._method.method, self._method.details(request))
            self._context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
            self._context.set_details(self._method.details(request))
            raise self._error()
        return request

    next = __next__  # grpcio's request iterators offer both spellings

    def _error(self) -> MalformedRequestError:
        return MalformedRequestError(self._method.details(self.bad))  # type: ignore[arg-type]

    def abort_if_bad(self) -> None:
        """After the servicer returned or raised: a malformed stream ends INVALID_ARGUMENT."""
        if self.bad is not None:
            self._context.abort(grpc.StatusCode.INVALID_ARGUMENT, self._method.details(self.bad))


def _copy_flags(wrapper: Callable, behavior: Callable) -> Callable:
    # grpcio reads `experimental_non_blocking` off the behaviour (health's Watch sets it)
    if getattr(behavior, "experimental_non_blocking", False):
        wrapper.experimental_non_blocking = True  # type: ignore[attr-defined]
    return wrapper


def _unary_request(behavior: Callable, method: _Method) -> Callable:
    def handle(request, context, *rest):
        if isinstance(request, Malformed):
            method.reject(request, context)
        return behavior(request, context, *rest)

    return _copy_flags(handle, behavior)


def _stream_request(behavior: Callable, method: _Method, streams_out: bool) -> Callable:
    def handle(requests, context, *rest):
        checked = _CheckedStream(requests, context, method)
        try:
            result = behavior(checked, context, *rest)
        except Exception:
            checked.abort_if_bad()
            raise
        checked.abort_if_bad()
        if streams_out and result is not None:
            return _checked_responses(result, checked)
        return result

    return _copy_flags(handle, behavior)


def _checked_responses(responses: Iterator[Any], checked: _CheckedStream) -> Iterator[Any]:
    try:
        for response in responses:
            checked.abort_if_bad()
            yield response
    except Exception:
        checked.abort_if_bad()
        raise
    checked.abort_if_bad()


def wrap_handler(
    handler: grpc.RpcMethodHandler, method: str, counter: Counter
) -> grpc.RpcMethodHandler:
    """`handler` with a deserializer that cannot fail and behaviour that answers malformed
    requests INVALID_ARGUMENT (unchanged when it has no request deserializer)."""
    deserializer = handler.request_deserializer
    if deserializer is None:
        return handler
    info = _Method(method, _message_type(deserializer, method), counter)
    changes: dict[str, Any] = {"request_deserializer": _safe_deserializer(deserializer)}
    if handler.unary_unary is not None:
        changes["unary_unary"] = _unary_request(handler.unary_unary, info)
    elif handler.unary_stream is not None:
        changes["unary_stream"] = _unary_request(handler.unary_stream, info)
    elif handler.stream_unary is not None:
        changes["stream_unary"] = _stream_request(handler.stream_unary, info, streams_out=False)
    elif handler.stream_stream is not None:
        changes["stream_stream"] = _stream_request(handler.stream_stream, info, streams_out=True)
    else:
        return handler
    replace = getattr(handler, "_replace", None)
    if replace is not None:  # grpc's own RpcMethodHandler is a namedtuple
        return replace(**changes)
    return _Handler(handler, changes)


class _Handler(grpc.RpcMethodHandler):
    """A handler that is not grpcio's namedtuple: its fields, some replaced."""

    def __init__(self, handler: grpc.RpcMethodHandler, changes: dict[str, Any]):
        for field in (
            "request_streaming", "response_streaming", "request_deserializer",
            "response_serializer", "unary_unary", "unary_stream", "stream_unary",
            "stream_stream",
        ):  # fmt: skip
            setattr(self, field, changes.get(field, getattr(handler, field, None)))


class MalformedRequestInterceptor(grpc.ServerInterceptor):
    """Wrap every method's handler (`wrap_handler`), once per handler object."""

    def __init__(self, counter: Counter):
        self._counter = counter
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = wrap_handler(handler, method, self._counter)
        if len(self._wrapped) < _MAX_CACHED:  # a handler that takes any method name
            self._wrapped[method] = (handler, wrapped)
        return wrapped
