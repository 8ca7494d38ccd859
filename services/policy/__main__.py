"""`python -m services.policy --port 50053` (or `--list-policies`).

Exit codes: 0 clean shutdown, 1 a port could not be bound, 2 a bad configuration.
Imports no torch, so the service is up in well under a second.
"""

from __future__ import annotations

import sys
import textwrap

from powertrip.core.policies import REGISTRY
from powertrip.rpc.metrics import service_registry
from powertrip.rpc.server import CONTROL_MESSAGE_BYTES
from powertrip.rpc.service import ServeOptions, ServiceSpec, exit_now, serve, setup_process
from powertrip.rpc.tls import TlsError, load_tls
from powertrip.v1 import policy_pb2_grpc
from services.policy.config import DEFAULT_PORT, PolicyConfig, PolicyConfigError, build_parser
from services.policy.servicer import SERVICE_NAME, PolicyMetrics, PolicyServicer

SPEC = ServiceSpec(
    "policy",
    DEFAULT_PORT,
    "PowerTrip policy service: which sites train next",
    max_message_bytes=CONTROL_MESSAGE_BYTES,  # SelectSites carries every site's profile
)


def list_policies() -> str:
    """Per policy: name and summary, then indented its details, the estimator it is built
    on where it has its own, and each parameter as its policy declares it."""
    width = max(len(n) for n in REGISTRY)
    indent = " " * (width + 2)
    lines = []
    for name, cls in REGISTRY.items():
        lines.append(f"{name:<{width}}  {cls.summary}")
        for line in textwrap.wrap(cls.details, width=96):
            lines.append(indent + line)
        if cls.estimator is not None:
            lines.append(f"{indent}estimator: {cls.estimator}, its own (the run's is not used)")
        for spec in cls.Params.specs():
            lines.extend(
                textwrap.wrap(
                    spec.describe(),
                    width=96,
                    initial_indent=indent + "- ",
                    subsequent_indent=indent + "    ",
                )
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_policies:
        print(list_policies())
        return 0
    try:
        config = PolicyConfig.resolve(args)
    except PolicyConfigError as exc:
        print(f"policy: {exc}", file=sys.stderr)
        return 2
    setup_process(config.log_level, SPEC.name, config.log_format)
    registry = service_registry()
    servicer = PolicyServicer(config, PolicyMetrics(registry))
    # powertrip.rpc.service.serve owns the parts every service shares: the metrics endpoint,
    # port-bind errors (exit 1), the "listening on port N" line launchers read, SIGTERM drain.
    try:
        tls = load_tls(args)
    except TlsError as exc:
        print(f"policy: {exc}", file=sys.stderr)
        return 2
    options = ServeOptions(
        port=config.port,
        host=config.host,
        metrics_port=config.metrics_port,
        grace_s=config.grace_s,
        tls=tls,
    )
    return serve(
        SPEC,
        options,
        lambda server: policy_pb2_grpc.add_PolicyServicer_to_server(servicer, server),
        [SERVICE_NAME],
        registry,
    )


if __name__ == "__main__":
    # main returns once the server has drained: leave then, without interpreter exit's
    # join of every executor thread (one stuck in a handler would hold the process)
    exit_now(main())
