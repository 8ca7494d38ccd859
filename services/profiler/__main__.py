"""`python -m services.profiler --port 50052 --config run.yaml`"""

from __future__ import annotations

import sys

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.envnames import getenv
from powertrip.core.power import TraceError
from powertrip.rpc.metrics import service_registry
from powertrip.rpc.server import CONTROL_MESSAGE_BYTES
from powertrip.rpc.service import (
    ServiceSpec,
    base_parser,
    exit_now,
    serve,
    serve_options,
    setup_process,
)
from powertrip.v1 import profiler_pb2_grpc
from services.profiler.config import ProfilerConfig
from services.profiler.profile_book import ProfileBook
from services.profiler.servicer import SERVICE_NAME, ProfilerMetrics, ProfilerServicer

SPEC = ServiceSpec(
    "profiler",
    50052,
    "PowerTrip profiler: site power and links",
    max_message_bytes=CONTROL_MESSAGE_BYTES,  # GetProfiles answers with every site's profile
)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(SPEC)
    parser.add_argument("--sites", type=int, help="number of sites (overrides the config)")
    parser.add_argument("--seed", type=int, help="population seed (overrides the config)")
    parser.add_argument(
        "--distance-distribution",
        help="site distances: calibrated (22 %% within 1,000 miles, paper Fig. 9) or uniform "
        "(overrides the config's distance_distribution)",
    )
    parser.add_argument(
        "--link-model",
        help="bandwidth against distance: inverse (B_ref x 100 mi / D, paper §5.1) or fig5 "
        "(flat within 1,000 miles, then 1/D; paper Fig. 5) (overrides the config's link_model)",
    )
    parser.add_argument(
        "--min-power", type=float, help="lowest power fraction drawn (overrides the config)"
    )
    parser.add_argument(
        "--max-power", type=float, help="highest power fraction drawn (overrides the config)"
    )
    parser.add_argument(
        "--latency-scale",
        type=float,
        default=float(getenv("POWERTRIP_PROFILER_LINK_LATENCY_SCALE", 1.0)),
        help="emulated latency = profile x this (env POWERTRIP_PROFILER_LINK_LATENCY_SCALE)",
    )
    parser.add_argument(
        "--bandwidth-scale",
        type=float,
        default=float(getenv("POWERTRIP_PROFILER_LINK_BANDWIDTH_SCALE", 1.0)),
        help="emulated bandwidth = profile x this (env POWERTRIP_PROFILER_LINK_BANDWIDTH_SCALE)",
    )
    parser.add_argument(
        "--probe-interval-s",
        type=float,
        default=float(getenv("POWERTRIP_PROFILER_PROBE_INTERVAL_S", 0)),
        help="re-probe each measured site's link this often; 0 = only when a worker asks "
        "(env POWERTRIP_PROFILER_PROBE_INTERVAL_S)",
    )
    args = parser.parse_args(argv)
    setup_process(args.log_level, SPEC.name, args.log_format)
    try:
        run = RunConfig.from_yaml(args.config) if args.config else RunConfig()
        run = run.with_overrides(
            num_sites=args.sites,
            seed=args.seed,
            distance_distribution=args.distance_distribution,
            link_model=args.link_model,
            min_power=args.min_power,
            max_power=args.max_power,
        ).validate()
        book = ProfileBook(
            ProfilerConfig.from_run_config(run, args.latency_scale, args.bandwidth_scale)
        )
    except (ConfigError, TraceError, ValueError) as exc:
        print(f"profiler: {exc}", file=sys.stderr)
        return 2
    registry = service_registry()
    servicer = ProfilerServicer(book, ProfilerMetrics(registry), args.probe_interval_s)
    options = serve_options(SPEC, args)
    if options is None:
        return 2
    return serve(
        SPEC,
        options,
        lambda server: profiler_pb2_grpc.add_ProfilerServicer_to_server(servicer, server),
        [SERVICE_NAME],
        registry,
    )


if __name__ == "__main__":
    # main returns once the server has drained: leave then, without interpreter exit's
    # join of every executor thread (one stuck in a handler would hold the process)
    exit_now(main())
