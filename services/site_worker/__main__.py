"""`python -m services.site_worker --aggregator host:port --sites site-000,site-001`"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any

import grpc

from powertrip.core.batched import TRAINERS
from powertrip.core.config import ConfigError
from powertrip.core.envnames import flag_on, getenv
from powertrip.core.kernels import configure_torch
from powertrip.core.training import DEVICES, resolve_device
from powertrip.core.workloads import DataError, UnknownWorkload
from powertrip.rpc.auth import AuthConfigError, add_join_token_flags, resolve_join_token
from powertrip.rpc.metrics import service_registry
from powertrip.rpc.service import (
    ServiceSpec,
    base_parser,
    channel_credentials,
    exit_now,
    serve,
    serve_options,
    setup_process,
)
from powertrip.rpc.sitetokens import load_site_tokens
from powertrip.v1 import site_worker_pb2_grpc
from services.site_worker.config import WorkerConfig
from services.site_worker.energymeter import open_codecarbon
from services.site_worker.link import LinkError, claim_site, setup_link
from services.site_worker.metrics import SiteWorkerMetrics
from services.site_worker.servicer import SERVICE_NAME, SiteWorkerServicer
from services.site_worker.telemetry import start_power_reporting
from services.site_worker.worker import SiteWorker

SPEC = ServiceSpec("site_worker", 50060, "PowerTrip site worker: trains virtual sites")
log = logging.getLogger("site_worker")
#: the prefix of the worker's own variables (powertrip/core/envnames.py)
ENV = "POWERTRIP_SITE_WORKER_"
#: after a stop, how long the work thread may take to finish the site it is training; past
#: it the process exits without it (the aggregator counts the site as failed, as on a crash)
STOP_WAIT_S = 2.0


def parse_sites(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The shared service flags and the site worker's own; each of its own options defaults
    to POWERTRIP_SITE_WORKER_<OPTION> (an old name still works: powertrip/core/envnames.py)."""
    parser = base_parser(SPEC)
    parser.add_argument(
        "--aggregator",
        default=getenv(f"{ENV}AGGREGATOR", "localhost:50051"),
        help=f"aggregator host:port to dial out to (env {ENV}AGGREGATOR)",
    )
    parser.add_argument(
        "--sites",
        # not POWERTRIP_SITES: that is the deployment's total site count (deploy/.env)
        default=getenv(f"{ENV}SITES"),
        help=f"comma-separated site ids to host (env {ENV}SITES); with --shape-link or "
        "--claim-site at most one, which must exist in the run (default: a free one)",
    )
    parser.add_argument(
        "--site-count",
        type=int,
        default=1,
        help="how many sites to ask for when --sites is not given",
    )
    parser.add_argument(
        "--worker-id",
        default=getenv(f"{ENV}WORKER_ID"),
        help=f"stable worker name (env {ENV}WORKER_ID; default: hostname-pid)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--train-threads",
        type=int,
        default=1,
        help="sites trained at once, each in its own thread on its own model replica "
        "(0 = one per CPU core; on a CPU, pair with --threads 1)",
    )
    parser.add_argument(
        "--trainer",
        choices=TRAINERS,
        default="loop",
        help="train virtual sites one after another (loop) or several per call (vmap)",
    )
    parser.add_argument(
        "--site-batch", type=int, default=1, help="sites per forward/backward with --trainer vmap"
    )
    parser.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="NHWC convolutions in the loop trainer",
    )
    parser.add_argument(
        "--fused-sgd",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="let each linear layer apply plain SGD inside its weight-gradient product "
        "(loop trainer, SGD workloads; less memory traffic, same math up to float rounding)",
    )
    parser.add_argument(
        "--data-dir", help="data directory (default: the run's or the repo's data/)"
    )
    add_join_token_flags(parser, "to present to the aggregator")
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default=getenv(f"{ENV}DEVICE", "auto"),
        help="where sites train: auto = CUDA when torch has it and a GPU is visible, else "
        f"CPU (env {ENV}DEVICE)",
    )
    parser.add_argument(
        "--site-tokens",
        default=os.environ.get("POWERTRIP_SITE_TOKENS"),
        help="YAML file of site id -> join token; the tokens of --sites are presented "
        "(env POWERTRIP_SITE_TOKENS)",
    )
    parser.add_argument(
        "--shape-link",
        action="store_true",
        default=flag_on(f"{ENV}SHAPE_LINK"),
        help="claim a site from the profiler and shape this host's link to its profile "
        f"with tc/ before registering; needs NET_ADMIN (env {ENV}SHAPE_LINK=1)",
    )
    parser.add_argument(
        "--claim-site",
        action="store_true",
        default=flag_on(f"{ENV}CLAIM_SITE"),
        help="claim the site (--sites, else a free one) from --profiler before registering, "
        f"without shaping: a remote worker on a real link (env {ENV}CLAIM_SITE=1)",
    )
    parser.add_argument(
        "--profiler",
        default=getenv(f"{ENV}PROFILER", "localhost:50052"),
        help=f"profiler host:port, for --shape-link (env {ENV}PROFILER)",
    )
    parser.add_argument(
        "--link-iface",
        default=getenv(f"{ENV}LINK_IFACE") or None,
        help=f"interface to shape (env {ENV}LINK_IFACE; default: the default route's)",
    )
    parser.add_argument(
        "--report-power",
        action="store_true",
        default=flag_on(f"{ENV}REPORT_POWER"),
        help="report GPU power from NVML to --profiler as the site's telemetry (one site; "
        f"always on with --shape-link; env {ENV}REPORT_POWER=1)",
    )
    parser.add_argument(
        "--codecarbon",
        action="store_true",
        default=flag_on(f"{ENV}CODECARBON"),
        help="measure each task's energy with codecarbon (the [carbon] extra: RAPL, NVML, or "
        "its estimate) and report it with the delta; on the wall clock it replaces the "
        f"modelled GPU watts in the run's accounting (env {ENV}CODECARBON=1)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, with the checks argparse cannot make (exit 2 with usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.site_batch < 1:
        parser.error(f"--site-batch must be >= 1, got {args.site_batch}")
    if args.train_threads < 0:
        parser.error(
            f"--train-threads must be >= 0 (0 = one per CPU core), got {args.train_threads}"
        )
    return args


class StartError(Exception):
    """The worker cannot start as configured: main prints `site_worker: MESSAGE`, exits 2."""


@dataclass
class Prepared:
    """What `run` serves: the worker's configuration, and what `configure` set up for it
    (the shaped link and the power reporter, stopped when the worker stops)."""

    config: WorkerConfig
    link: Any = None
    reporter: Any = None


def configure(args: argparse.Namespace) -> Prepared:
    """The WorkerConfig from the flags: device, tokens, TLS credentials (a bad --tls-* exits
    2), and, with --claim-site / --shape-link, the claimed site and its shaped link.
    StartError says why it cannot start."""
    train_threads = args.train_threads or os.cpu_count() or 1
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise StartError(f"--{exc}") from None
    try:
        join_token = resolve_join_token(args.join_token, args.join_token_file).value
        tokens = load_site_tokens(args.site_tokens) if args.site_tokens else {}
    except (AuthConfigError, ConfigError) as exc:
        raise StartError(str(exc)) from None
    # one set of mutual TLS credentials for every service it dials (a bad --tls-* exits 2)
    credentials = channel_credentials(args)
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    link = None
    if args.shape_link or args.claim_site:
        sites = parse_sites(args.sites)
        if len(sites) > 1:
            flag = "--shape-link shapes" if args.shape_link else "--claim-site claims"
            raise StartError(f"{flag} one site: give at most one --sites")
    if args.claim_site and not args.shape_link:
        try:
            args.sites = claim_site(
                args.profiler, worker_id, sites[0] if sites else "", credentials=credentials
            )
        except LinkError as exc:
            raise StartError(f"claim: {exc}") from None
    if args.shape_link:
        try:
            link = setup_link(
                args.profiler,
                args.aggregator,
                worker_id,
                sites[0] if sites else "",
                args.link_iface,
                credentials=credentials,
            )
        except LinkError as exc:
            raise StartError(f"link: {exc}") from None
        args.aggregator, args.sites = link.aggregator, link.site_id
    sites = parse_sites(args.sites)
    missing = [s for s in sites if tokens and s not in tokens]
    if missing:
        raise StartError(f"--site-tokens has no token for {', '.join(missing)}")
    reporter = None
    if args.shape_link or args.report_power:
        if len(sites) != 1:
            raise StartError("--report-power needs exactly one --sites")
        reporter = start_power_reporting(args.profiler, sites[0], worker_id, credentials)
    meter, meter_source = (reporter.reader, "NVML") if reporter is not None else (None, "")
    if args.codecarbon:
        meter = open_codecarbon()
        meter_source = meter.source if meter is not None else ""
    config = WorkerConfig(
        aggregator=args.aggregator,
        worker_id=worker_id,
        site_ids=sites,
        site_count=args.site_count,
        threads=args.threads,
        train_threads=train_threads,
        trainer=args.trainer,
        site_batch=args.site_batch,
        channels_last=args.channels_last,
        fused_sgd=args.fused_sgd,
        data_dir=args.data_dir,
        join_token=join_token,
        site_tokens={s: tokens[s] for s in sites if s in tokens},
        credentials=credentials,
        device=device,
        power_meter=meter,
        energy_meter=meter_source,
    )
    return Prepared(config, link, reporter)


def run(args: argparse.Namespace, prepared: Prepared) -> int:
    """Serve the worker until its run ends or a signal stops it; the exit code: 0 done, 1
    the worker failed (an aggregator RPC error included), 2 a data or workload error."""
    config, link, reporter = prepared.config, prepared.link, prepared.reporter
    registry = service_registry()
    worker = SiteWorker(config, SiteWorkerMetrics(registry))
    stop = threading.Event()
    outcome: dict = {"code": 0, "error": ""}
    threads: list[threading.Thread] = []

    def work(_running) -> None:
        def body() -> None:
            try:
                outcome["code"] = worker.run()
            except (DataError, UnknownWorkload) as exc:
                print(f"site_worker: {exc}", file=sys.stderr)
                outcome["code"], outcome["error"] = 2, str(exc)
            except grpc.RpcError as exc:
                if worker.stopping:  # our own shutdown cut the call short
                    return
                error = f"aggregator {config.aggregator}: {exc.code().name}: {exc.details()}"
                print(f"site_worker: {error}", file=sys.stderr)
                outcome["code"], outcome["error"] = 1, error
            except Exception as exc:  # noqa: BLE001 - any other failure: say so, exit non-zero
                if worker.stopping:  # a call on the channel stop() closed
                    return
                log.exception("the worker failed")
                outcome["code"], outcome["error"] = 1, f"{type(exc).__name__}: {exc}"
            finally:
                stop.set()

        def stop_on_signal() -> None:
            # SIGTERM/SIGINT set `stop` (powertrip.rpc.server): stop taking and training
            # work now, not after the server's drain
            stop.wait()
            worker.stop()

        thread = threading.Thread(target=body, name="worker", daemon=True)
        threads.append(thread)
        thread.start()
        threading.Thread(target=stop_on_signal, name="stop-worker", daemon=True).start()

    options = serve_options(SPEC, args)  # None: a bad --tls-* flag, named on stderr
    code = 2
    if options is not None:
        code = serve(
            SPEC,
            options,
            lambda server: site_worker_pb2_grpc.add_SiteWorkerServicer_to_server(
                SiteWorkerServicer(worker), server
            ),
            [SERVICE_NAME],
            registry,
            on_started=work,
            stop_event=stop,
        )
    worker.stop()
    if reporter:
        reporter.stop()
    if hasattr(config.power_meter, "close"):  # codecarbon's tracker has a thread to stop
        config.power_meter.close()
    if link:
        link.close()
    for thread in threads:
        thread.join(timeout=STOP_WAIT_S)
    code = code or outcome["code"]
    if outcome["error"]:  # the last line of the log, where a launcher's tail shows it
        log.error("exiting with code %d: %s", code, outcome["error"])
    if any(thread.is_alive() for thread in threads):
        # a site's training is still under way (torch does not stop mid-step): leave without
        # it, as interpreter exit would otherwise wait for the training threads
        log.warning("stopping with a site's training unfinished (abandoned)")
        exit_now(code)
    return code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_process(args.log_level, SPEC.name, args.log_format)
    configure_torch()  # it trains or evaluates: the pinned kernels' convolutions (kernels.py)
    try:
        prepared = configure(args)
    except StartError as exc:
        print(f"site_worker: {exc}", file=sys.stderr)
        return 2
    return run(args, prepared)


if __name__ == "__main__":
    # everything is written and closed when main returns; a normal interpreter exit would
    # then tear down torch's modules (0.35 s on every run's way out) and join every executor
    # thread, a site's training pool mid-step included (an orphaned worker outlived its
    # SIGKILLed CLI by over 10 s on a CI machine)
    exit_now(main())
