"""The common shape of a service's `__main__`: flags, logging, metrics, serve, drain.

Each service supplies its servicer factory; this module owns the parts that would
otherwise be copied four times (port-bind errors, the metrics endpoint, signals).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc
from prometheus_client import CollectorRegistry, start_http_server

from powertrip.core.kernels import KernelsError, pin_cpu_kernels
from powertrip.rpc.heap import keep_buffers_on_heap
from powertrip.rpc.server import (
    MAX_MESSAGE_BYTES,
    PortInUseError,
    RunningServer,
    handle_stop_signals,
    start_server,
    wait_for_termination,
)
from powertrip.rpc.tls import TlsError, TlsFiles, add_tls_flags, load_tls


@dataclass
class ServiceSpec:
    name: str  # "aggregator", "policy", ...
    default_port: int
    description: str
    max_message_bytes: int = MAX_MESSAGE_BYTES  # the largest message its server takes


class HelpFormatter(argparse.HelpFormatter):
    """Help in the CLI's style: an option's default as "(default X)" after its help, left
    out where it says nothing (None, False, empty) or the help already gives it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = (action.help or "").replace("(default: %(default)s)", "(default %(default)s)")
        default = action.default
        silent = (
            default is None
            or default is False
            or default == ""
            or default == []
            or (default is argparse.SUPPRESS)
        )
        if silent or "default" in text or not action.option_strings:
            return text
        return f"{text} (default %(default)s)"


def base_parser(spec: ServiceSpec) -> argparse.ArgumentParser:
    env = f"POWERTRIP_{spec.name.upper()}"
    parser = argparse.ArgumentParser(
        prog=f"python -m services.{spec.name}",
        description=spec.description,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get(f"{env}_PORT", spec.default_port)),
        help=f"gRPC port (env {env}_PORT; 0 = any free port)",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get(f"{env}_HOST", "[::]"),
        help=f"bind address (env {env}_HOST)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get(f"{env}_METRICS_PORT", 0)),
        help=f"Prometheus metrics port (env {env}_METRICS_PORT; 0 = off)",
    )
    parser.add_argument(
        "--config",
        default=os.environ.get("POWERTRIP_CONFIG"),
        help="run configuration YAML (env POWERTRIP_CONFIG)",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("POWERTRIP_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (env POWERTRIP_LOG_LEVEL)",
    )
    add_log_format_flag(parser, default=default_log_format())
    parser.add_argument("--grace-s", type=float, default=5.0, help="drain time on SIGTERM")
    add_tls_flags(parser)
    return parser


@dataclass(frozen=True)
class ServeOptions:
    """Where and how a service serves: what `serve` needs, typed, whichever way a service
    takes its settings (the shared flags, or the policy service's own configuration)."""

    port: int
    host: str = "[::]"
    metrics_port: int = 0  # 0 = no metrics endpoint
    grace_s: float = 5.0  # drain time on SIGTERM
    tls: TlsFiles | None = None  # mutual TLS; None = plaintext

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeOptions:
        """From `base_parser`'s flags; TlsError names a bad --tls-* flag."""
        return cls(
            port=args.port,
            host=args.host,
            metrics_port=args.metrics_port,
            grace_s=args.grace_s,
            tls=load_tls(args),
        )


def serve_options(spec: ServiceSpec, args: argparse.Namespace) -> ServeOptions | None:
    """ServeOptions from base_parser's flags; None (the flag named on stderr) when a --tls-*
    flag is bad, so the service's main returns exit code 2."""
    try:
        return ServeOptions.from_args(args)
    except TlsError as exc:
        print(f"{spec.name}: {exc}", file=sys.stderr)
        return None


def channel_credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """Client credentials for a service dialling out (None: plaintext; bad flags exit 2)."""
    try:
        tls = load_tls(args)
    except TlsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return tls.channel_credentials() if tls else None


LOG_FORMATS = ("text", "json")
LOG_FORMAT_ENV = "POWERTRIP_LOG_FORMAT"


def default_log_format(env: dict[str, str] | None = None) -> str:
    """POWERTRIP_LOG_FORMAT when set (checked by the flag's choices), else "text"."""
    env = os.environ if env is None else env
    return env.get(LOG_FORMAT_ENV, "").strip().lower() or "text"


def add_log_format_flag(parser: argparse.ArgumentParser, default: str | None) -> None:
    """--log-format {text,json}; the policy service passes default=None (its own layering
    resolves the environment)."""
    parser.add_argument(
        "--log-format",
        dest="log_format",
        choices=LOG_FORMATS,
        default=default,
        help=f"text, or json: one JSON object per line (env {LOG_FORMAT_ENV})",
    )


#: context a JSON log line carries when the record has it: the run (every line of a service
#: that knows its run, `add_log_context`), and the round, site and task of lines about one
#: (`log.info(..., extra={"round": r, "site": s})`)
LOG_CONTEXT_FIELDS = ("run_id", "round", "site", "task")


class _LogContext(logging.Filter):
    """Stamps fixed fields (the run id) on every record that does not carry its own."""

    def __init__(self, fields: dict[str, object]):
        super().__init__()
        self.fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self.fields.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def add_log_context(**fields: object) -> None:
    """Fields every log line of this process carries from now on (JSON format), e.g. the
    run id once the aggregator knows its run; unknown names are refused."""
    unknown = sorted(set(fields) - set(LOG_CONTEXT_FIELDS))
    if unknown:
        raise ValueError(f"unknown log context {unknown}; allowed: {LOG_CONTEXT_FIELDS}")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_LogContext(dict(fields)))


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601 with milliseconds), level, service,
    logger, message, the context fields the record carries (run_id, round, site, task), and
    exc_info (the formatted traceback) when the record has one, so a log shipper can index
    and filter by run, round or site without parsing text."""

    def __init__(self, service: str):
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC)
        entry = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in LOG_CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None and value != "":
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def log_handler(name: str, log_format: str = "text") -> logging.Handler:
    """A stderr handler in `log_format` ("text" or "json") for service `name`."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter(name))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {name} %(levelname)s %(message)s"))
    return handler


def setup_process(level: str, name: str, log_format: str | None = None) -> None:
    """Logging in one format for every service (`log_format` "text", or "json" for one JSON
    object per line; None = POWERTRIP_LOG_FORMAT or text), and the process set-up they all
    share: large message buffers kept on the heap (`powertrip.rpc.heap`), and the CPU kernels
    pinned (`powertrip.core.kernels`) before the service trains or evaluates. A format other
    than text or json, or a bad POWERTRIP_CPU_KERNELS (from the environment: flags are
    checked by argparse), exits 2, named."""
    log_format = log_format or default_log_format()
    if log_format not in LOG_FORMATS:
        print(
            f"{name}: log format {log_format!r} ({LOG_FORMAT_ENV}) is not one of "
            f"{', '.join(LOG_FORMATS)}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    try:
        pin_cpu_kernels()
    except KernelsError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    keep_buffers_on_heap()
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), logging.INFO),
        handlers=[log_handler(name, log_format)],
    )


def exit_now(code: int) -> None:
    """Leave the process at once, its logs and streams flushed, without waiting for its
    threads: for a service stopped while work it cannot interrupt is under way (a site's
    training mid-step, an aggregator's round loop mid-round), which interpreter exit
    would otherwise wait for."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(
    spec: ServiceSpec,
    options: ServeOptions,
    register: Callable[[grpc.Server], None],
    service_names: list[str],
    registry: CollectorRegistry,
    *,
    on_started: Callable[[RunningServer], None] | None = None,
    stop_event=None,
    max_workers: int = 32,
) -> int:
    """Start metrics and the gRPC server, block until a signal, drain; return an exit code."""
    log = logging.getLogger(spec.name)
    # signals first: one that arrives while the server starts still drains it
    stop_event = handle_stop_signals(stop_event or threading.Event())
    if options.metrics_port:
        try:
            start_http_server(options.metrics_port, registry=registry)
        except OSError as exc:
            print(
                f"{spec.name}: cannot bind metrics port {options.metrics_port}: {exc}",
                file=sys.stderr,
            )
            return 1
    tls = options.tls
    try:
        running = start_server(
            register,
            service_names,
            port=options.port,
            host=options.host,
            credentials=tls.server_credentials() if tls else None,
            max_workers=max_workers,
            registry=registry,
            max_message_bytes=spec.max_message_bytes,
        )
    except PortInUseError as exc:
        print(f"{spec.name}: {exc}", file=sys.stderr)
        return 1
    # Machine-readable line so launchers that asked for port 0 learn the real one.
    print(f"{spec.name} listening on port {running.port}", flush=True)
    if on_started:
        on_started(running)
    wait_for_termination(running, grace_s=options.grace_s, stop_event=stop_event)
    log.info("exited cleanly")
    return 0
