"""`python -m services.policy --port 50053` (or `--list-policies`)."""

from __future__ import annotations

import sys

from prometheus_client import CollectorRegistry

from powertrip.service import ServiceSpec, base_parser, serve, setup_logging
from powertrip.v1 import policy_pb2_grpc
from services.policy.config import PolicyConfig
from services.policy.policies import REGISTRY
from services.policy.servicer import SERVICE_NAME, PolicyMetrics, PolicyServicer

SPEC = ServiceSpec("policy", 50053, "PowerTrip policy service: which sites train next round")


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(SPEC)
    parser.add_argument("--list-policies", action="store_true", help="print the policies and exit")
    parser.add_argument(
        "--estimator",
        choices=("paper", "clock"),
        default="paper",
        help="default round-time estimator when a request names none",
    )
    parser.add_argument(
        "--ignore-measured",
        action="store_true",
        help="use configured links even when measured ones are present",
    )
    args = parser.parse_args(argv)
    if args.list_policies:
        width = max(len(n) for n in REGISTRY)
        for name, cls in REGISTRY.items():
            params = ", ".join(f"{k}={v:g}" for k, v in cls.default_params.items())
            print(f"{name:<{width}}  {cls.summary}" + (f"  [{params}]" if params else ""))
        return 0
    setup_logging(args.log_level, SPEC.name)
    registry = CollectorRegistry()
    config = PolicyConfig(
        prefer_measured=not args.ignore_measured, default_estimator=args.estimator
    )
    servicer = PolicyServicer(config, PolicyMetrics(registry))
    return serve(
        SPEC,
        args,
        lambda server: policy_pb2_grpc.add_PolicyServicer_to_server(servicer, server),
        [SERVICE_NAME],
        registry,
    )


if __name__ == "__main__":
    sys.exit(main())
