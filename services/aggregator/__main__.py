"""`python -m services.aggregator --port 50051 --config run.yaml --out DIR`

Secure by default: on an address other machines can reach it serves only with a join token
(or per-site tokens) *and* mutual TLS, unless `--insecure` says otherwise
(powertrip.rpc.auth.exposure_problem explains why this rule is the aggregator's alone).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.envnames import flag_on
from powertrip.core.kernels import configure_torch
from powertrip.core.workloads import DataError, UnknownWorkload, get_workload
from powertrip.rpc.auth import (
    AuthConfigError,
    add_insecure_flag,
    add_join_token_flags,
    exposure_problem,
    insecure_allowed,
    is_loopback,
    resolve_join_token,
)
from powertrip.rpc.certificates import RevocationList, certificate_facts
from powertrip.rpc.chunkwire import AGGREGATOR_SERVER_CODECS
from powertrip.rpc.metrics import service_registry
from powertrip.rpc.server import add_servicer
from powertrip.rpc.service import (
    ServeOptions,
    ServiceSpec,
    add_log_context,
    base_parser,
    channel_credentials,
    exit_now,
    serve,
    serve_options,
    setup_process,
)
from powertrip.rpc.sitetokens import load_site_tokens
from services.aggregator.checkpoint_store import CheckpointError
from services.aggregator.config import AggregatorConfig, all_site_ids
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.round_loop import RoundLoop
from services.aggregator.servicer import SERVICE, SERVICE_NAME, AggregatorServicer, run_spec
from services.aggregator.state import AggregatorState
from services.aggregator.tau import run_with_tau

log = logging.getLogger("aggregator")

SPEC = ServiceSpec("aggregator", 50051, "PowerTrip aggregator: global model and round loop")

#: longest wait, after the run, for every worker to have seen `shutdown` (--exit-when-done)
SHUTDOWN_NOTICE_S = 1.5


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(SPEC)
    parser.add_argument("--profiler", default="localhost:50052", help="profiler host:port")
    parser.add_argument("--policy", default="localhost:50053", help="policy host:port")
    parser.add_argument("--out", default="runs/latest", help="run output directory")
    parser.add_argument(
        "--exit-when-done",
        action="store_true",
        help="stop serving once the run has finished (the embedded CLI uses this)",
    )
    parser.add_argument(
        "--register-timeout-s",
        type=float,
        default=300.0,
        help="how long to wait for the sites round 1 needs before the run fails (default 300)",
    )
    parser.add_argument(
        "--min-sites",
        type=int,
        default=os.environ.get("POWERTRIP_AGGREGATOR_MIN_SITES") or "0",
        help="start round 1 once this many sites are hosted (default 0: all of them); the "
        "others join the ranking from the round after their worker registers, as a site "
        "that drops and comes back does (env POWERTRIP_AGGREGATOR_MIN_SITES)",
    )
    add_join_token_flags(parser, "workers must present to register")
    add_insecure_flag(parser)
    parser.add_argument(
        "--site-tokens",
        default=os.environ.get("POWERTRIP_SITE_TOKENS"),
        help="YAML file mapping site id -> join token; a worker may host a site only with "
        "its token (env POWERTRIP_SITE_TOKENS)",
    )
    parser.add_argument(
        "--site-certs",
        action="store_true",
        default=flag_on("POWERTRIP_AGGREGATOR_SITE_CERTS"),
        help="a worker may host a site only if its client certificate names it (CN or "
        "subjectAltName DNS, as `powertrip provision` makes them); needs mutual TLS "
        "(env POWERTRIP_AGGREGATOR_SITE_CERTS=1)",
    )
    parser.add_argument(
        "--revoked",
        default=os.environ.get("POWERTRIP_AGGREGATOR_REVOKED") or None,
        help="revocation list (YAML: sites, certificates; `powertrip revoke` appends to it): "
        "a worker whose certificate or site is on it is refused (PERMISSION_DENIED); reloaded "
        "when the file changes; a missing file revokes nothing (env POWERTRIP_AGGREGATOR_REVOKED)",
    )
    parser.add_argument(
        "--max-threads",
        type=int,
        default=int(os.environ.get("POWERTRIP_AGGREGATOR_THREADS", 128)),
        help="handler threads; each parked long poll holds one, so allow one per worker "
        "plus headroom (env POWERTRIP_AGGREGATOR_THREADS)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the last checkpoint in --out (start fresh if there is none)",
    )
    parser.add_argument(
        "--audit-dir",
        default=os.environ.get("POWERTRIP_AGGREGATOR_AUDIT_DIR") or None,
        help="keep every accepted delta, each round's contributors and the initial model "
        "here, so the model can be recomputed and checked (`python -m services.aggregator."
        "audit DIR`); costs one model's bytes on disk per accepted update "
        "(env POWERTRIP_AGGREGATOR_AUDIT_DIR)",
    )
    args = parser.parse_args(argv)
    setup_process(args.log_level, SPEC.name, args.log_format)
    configure_torch()  # it trains or evaluates: the pinned kernels' convolutions (kernels.py)
    add_log_context(run_id=Path(args.out).name)
    try:
        run = RunConfig.from_yaml(args.config) if args.config else RunConfig()
        run.validate()
        workload = get_workload(run.workload, run.peft)
        run = run.resolved(workload.defaults)
    except (ConfigError, UnknownWorkload) as exc:
        print(f"aggregator: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.min_sites <= run.num_sites:
        print(
            f"aggregator: --min-sites must be in 0..{run.num_sites} (num_sites; 0 means all), "
            f"got {args.min_sites}",
            file=sys.stderr,
        )
        return 2
    # who may join: checked after the settings, before anything slow (data, a checkpoint)
    options = serve_options(SPEC, args)
    access = who_may_join(args, options) if options else None
    if options is None or access is None:
        return 2
    join_token, site_tokens = access
    if args.site_certs and options.tls is None:
        print(
            "aggregator: --site-certs checks each worker's client certificate: it needs "
            "mutual TLS (--tls-cert, --tls-key, --tls-ca)",
            file=sys.stderr,
        )
        return 2
    try:
        revocations = (
            RevocationList(Path(args.revoked), on_error=log.warning) if args.revoked else None
        )
    except ConfigError as exc:
        print(f"aggregator: --revoked: {exc}", file=sys.stderr)
        return 2
    try:  # tau_source measured: tau_s measured now, before round 1 (fixed: unchanged)
        run = run_with_tau(run, Path(args.out), resume=args.resume)
    except DataError as exc:
        print(f"aggregator: {exc}", file=sys.stderr)
        return 2
    config = AggregatorConfig(
        run=run,
        profiler=args.profiler,
        policy=args.policy,
        out_dir=Path(args.out),
        register_timeout_s=args.register_timeout_s,
        min_sites=args.min_sites,
        exit_when_done=args.exit_when_done,
        join_token=join_token,
        resume=args.resume,
        credentials=channel_credentials(args),
        audit_dir=Path(args.audit_dir) if args.audit_dir else None,
    )
    registry = service_registry()
    metrics = AggregatorMetrics(registry, round_deadline_s=run.round_deadline_s)
    metrics.show_run(Path(args.out).name, run.policy, run.workload, run.clock)
    if options.tls is not None:  # its own certificate and the CA's, for the expiry alert
        for name, pem in (("server", options.tls.cert), ("ca", options.tls.ca)):
            expiry = metrics.certificate_expiry.labels(name)
            expiry.set(certificate_facts(pem).expires_at_s)
    state = AggregatorState(all_site_ids(run.num_sites), run.delta_encoding)
    loop = RoundLoop(config, state, metrics)
    try:
        loop.prepare()
    except (DataError, CheckpointError) as exc:
        print(f"aggregator: {exc}", file=sys.stderr)
        return 2
    servicer = AggregatorServicer(
        state, run_spec(config), metrics, join_token=join_token, site_tokens=site_tokens,
        site_certs=args.site_certs, revocations=revocations,
    )  # fmt: skip
    stop = threading.Event()
    loop_started, loop_over = threading.Event(), threading.Event()

    def start_loop(_running) -> None:
        loop_started.set()

        def body() -> None:
            loop.execute()
            loop_over.set()
            if config.exit_when_done:
                # let workers see `shutdown` on their next poll before we drain: a polling
                # worker sees it within milliseconds, so this waits out the notice only for
                # one that is not polling (it was a fixed 1.5 s: 14 s of `make demo`)
                state.queue.wait_workers_told(SHUTDOWN_NOTICE_S)
                stop.set()

        threading.Thread(target=body, name="round-loop", daemon=True).start()

    code = serve(
        SPEC,
        options,
        lambda server: add_servicer(server, SERVICE, servicer, AGGREGATOR_SERVER_CODECS),
        [SERVICE_NAME],
        registry,
        on_started=start_loop,
        stop_event=stop,
        max_workers=max(8, args.max_threads),
    )
    if loop_started.is_set() and not loop_over.is_set():
        abandon_round_loop(code)
    if code == 0 and loop.result.stopped_reason == "failed":
        return 3
    return code


def abandon_round_loop(code: int) -> None:
    """Leave now: a signal stopped the service mid-run. Left alone, the round loop would go
    on into the next round against services that are stopping (retrying each, then
    falling back), and interpreter exit would wait for its RPC threads: an orphaned
    aggregator outlived its SIGKILLed CLI by over 10 s on a CI machine. What it has written
    stands: checkpoints are replaced atomically and state.json is their commit point, so
    `--resume` continues from the last finished round."""
    logging.getLogger(SPEC.name).warning(
        "stopping mid-run: the round in progress is abandoned; --resume continues from the "
        "last checkpoint"
    )
    exit_now(code)


def who_may_join(
    args: argparse.Namespace, options: ServeOptions
) -> tuple[str, dict[str, str] | None] | None:
    """(join token, per-site tokens) from the flags, files and environment; None (the reason
    on stderr, exit 2) for an unreadable token file or an exposed bind without token and TLS.
    Logs where the token came from (never the token) and warns when serving --insecure."""
    try:
        join_token = resolve_join_token(args.join_token, args.join_token_file)
        site_tokens = load_site_tokens(args.site_tokens) if args.site_tokens else None
        insecure = insecure_allowed(args.insecure)
    except (AuthConfigError, ConfigError) as exc:
        print(f"{SPEC.name}: {exc}", file=sys.stderr)
        return None
    has_token, has_tls = bool(join_token.value or site_tokens), options.tls is not None
    problem = exposure_problem(
        SPEC.name, options.host, has_token=has_token, has_tls=has_tls, insecure=insecure
    )
    if problem:
        print(problem, file=sys.stderr)
        return None
    if site_tokens:
        who = "per-site tokens (--site-tokens)"
    else:
        who = f"the join token from {join_token.source}" if join_token.value else "no join token"
    secured = is_loopback(options.host) or (has_token and has_tls)
    logging.getLogger(SPEC.name).log(
        logging.INFO if secured else logging.WARNING,
        "serving on %s with %s, %s%s",
        options.host,
        who,
        "mutual TLS" if has_tls else "no TLS",
        "" if secured else " (--insecure)",
    )
    return join_token.value, site_tokens


if __name__ == "__main__":
    # everything is written and closed when main returns; a normal interpreter exit would
    # then tear down torch's modules (0.35 s on every run's way out) and join every executor
    # thread, a site's training pool mid-step included (an orphaned worker outlived its
    # SIGKILLed CLI by over 10 s on a CI machine)
    exit_now(main())
