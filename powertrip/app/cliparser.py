"""The `powertrip` command line's parser: subcommands and their flags (cli.py runs them)."""

from __future__ import annotations

import argparse
import importlib.metadata

from powertrip.core.workloads import REGISTRY
from powertrip.rpc.tls import add_tls_flags

WORKLOADS = ", ".join(sorted(REGISTRY))
SERVICES = ("aggregator", "site_worker", "profiler", "policy")


#: what `ls` and `status` print: aligned columns, or JSON for scripts (powertrip.app.operate)
FORMATS = ("table", "json")


def version() -> str:
    """The installed distribution's version, else the package's own."""
    try:
        return importlib.metadata.version("powertrip")
    except importlib.metadata.PackageNotFoundError:
        import powertrip

        return getattr(powertrip, "__version__", "unknown")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="run configuration YAML (flags override it)")
    parser.add_argument("--workload", help=f"one of {WORKLOADS} (default femnist)")
    parser.add_argument("--sites", type=int, dest="num_sites", help="number of sites (default 100)")
    parser.add_argument(
        "--max-rounds",
        type=int,
        help="round limit (default 100; compare and sweep: none, the time budget ends runs)",
    )
    parser.add_argument(
        "--max-sim-hours",
        type=float,
        help="stop after this much simulated time (0 = no limit; compare and sweep: "
        "same as --time-budget-h)",
    )
    parser.add_argument("--target-accuracy", type=float, help="stop at this held-out accuracy")
    parser.add_argument("--update-size-gb", type=float, help="emulated update size M in GB")
    parser.add_argument("--seed", type=int, help="seed for sites, data split and training")
    parser.add_argument("--clock", choices=("simulated", "wall"), help="time source")
    parser.add_argument(
        "--power",
        choices=("uniform", "trace"),
        help="site power: U[0.1, 1] drawn once, or Google PowerData 2019 replay",
    )
    parser.add_argument("--estimator", choices=("paper", "clock"), help="round-time estimator")
    parser.add_argument("--workers", type=int, help="site-worker processes (default 1)")
    parser.add_argument(
        "--train-threads",
        type=int,
        help="sites each worker trains at once, a thread each (default 0: one per CPU core)",
    )
    parser.add_argument(
        "--trainer",
        choices=("loop", "vmap"),
        help="how workers train their sites: one after another (loop, default) or vmap",
    )
    parser.add_argument("--site-batch", type=int, help="sites per vmap call (default 1)")
    parser.add_argument("--data-dir", help="data directory for the workload")
    _add_set_option(parser)
    parser.add_argument("--out", default=None, help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="settings",
        metavar="KEY=VALUE",
        help="any run-configuration setting, read and checked as in the YAML file, e.g. "
        "--set lr=0.01 --set work_model=data-parallel or --set policy_params.k=20 "
        "(repeatable; wins over the YAML and the other flags)",
    )


def _add_ray_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="make the runs as tasks on a Ray cluster, all at once (reproduce: a task per "
        "set-up and seed): 'auto' (the cluster this machine joined with `ray start`), "
        "HOST:PORT or ray://HOST:10001; results land in the same run directories (extra "
        "[ray]; powertrip/app/experiments/raycluster.py)",
    )
    _add_ray_gpus_option(parser, "each run's task (reproduce: each group's)")


def _add_ray_gpus_option(parser: argparse.ArgumentParser, who: str) -> None:
    parser.add_argument(
        "--ray-gpus",
        type=float,
        default=0.0,
        metavar="G",
        help=f"with --ray: GPUs {who} asks Ray for (default 0; fractions share a GPU); Ray "
        "sets CUDA_VISIBLE_DEVICES and the site workers train there (install torch with "
        "CUDA: make setup TORCH=cuda); refused at once if no node has that many",
    )


def _add_objective_option(parser: argparse.ArgumentParser) -> None:
    """compare and report rank a comparison by one objective; the table shows all four."""
    from powertrip.app.report.objectives import OBJECTIVES

    parser.add_argument(
        "--objective",
        choices=tuple(OBJECTIVES),
        default="time",
        help="rank the comparison by time, energy, egress cost or carbon to the target "
        "(default time; the table shows all four)",
    )


def _add_time_budget_option(parser: argparse.ArgumentParser) -> None:
    """compare and sweep bound every run by the same time, not a round count, so that
    policies with short rounds are not stopped earlier (in time) than the others."""
    from powertrip.app.experiments.commands import DEFAULT_TIME_BUDGET_H

    parser.add_argument(
        "--time-budget-h",
        type=float,
        metavar="H",
        help="hours of simulated time every run gets; a run stops before a round that would "
        f"end after it (default {DEFAULT_TIME_BUDGET_H:g}, with no round cap unless "
        "--max-rounds or the config sets one; 0 = no time budget, the round cap ends runs)",
    )


def build_parser() -> argparse.ArgumentParser:
    from powertrip.app.experiments.preflight import DEFAULT_COMPARISON

    parser = argparse.ArgumentParser(
        prog="powertrip",
        description="PowerTrip: choose which and how many geo-distributed sites train each round",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one experiment (starts all services locally)")
    _add_run_options(run)
    run.add_argument("--policy", help="site-selection policy (see `powertrip policies`)")
    run.add_argument(
        "--resume",
        metavar="DIR",
        help="continue an interrupted run from DIR's last checkpoint (its own configuration)",
    )
    run.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="policy parameter, e.g. --param k=20 or --param probe_cost=0.2 (repeatable)",
    )

    _add_result_format_option(run)
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="start the site-worker processes (--workers) as Ray actors spread over a Ray "
        "cluster's nodes; the aggregator, profiler and policy stay here and the workers dial "
        "the aggregator on this node's cluster address (guarded by a join token made for the "
        "run, no TLS: a trusted network, as Ray's). ADDRESS: 'auto', HOST:PORT or "
        "ray://HOST:10001 (extra [ray]; powertrip/app/experiments/rayworkers.py)",
    )
    _add_ray_gpus_option(run, "each site-worker actor")

    compare = sub.add_parser(
        "compare",
        help="run several policies on identical sites and seed",
        description="Run several policies on identical sites and seed. A policy whose run in "
        "--out already finished with the same settings is reused, an interrupted one resumed "
        "from its checkpoint, and one with other settings run again.",
    )
    _add_run_options(compare)
    compare.add_argument(
        "--policies",
        help="comma-separated policy names, each optionally with its own parameters after "
        "colons, e.g. powertrip,adaptive,static:k=3 (a run directory static-k3) "
        f"(default {','.join(DEFAULT_COMPARISON)})",
    )
    _add_time_budget_option(compare)
    compare.add_argument(
        "--budget-factor",
        type=float,
        default=None,
        help="stop a policy once its simulated time exceeds this multiple of the best "
        "time-to-target so far (default 3; 0 = no cut-off)",
    )
    _add_objective_option(compare)
    _add_result_format_option(compare)
    _add_ray_option(compare)

    sweep = sub.add_parser(
        "sweep",
        help="static-k sweep (paper Fig. 8): finds k*",
        description="Static-k sweep (paper Fig. 8): finds k*. Finished runs in --out with the "
        "same settings are reused and interrupted ones resumed, as in compare.",
    )
    _add_run_options(sweep)
    sweep.add_argument("--k", required=True, help="comma-separated k values, e.g. 10,20,30")
    _add_result_format_option(sweep)
    _add_time_budget_option(sweep)
    _add_ray_option(sweep)

    reproduce = sub.add_parser(
        "reproduce",
        help="the paper's evaluation (Figs. 8-14) over several seeds, resumable, with "
        "claims tables",
    )
    _add_reproduce_options(reproduce)
    _add_set_option(reproduce)
    _add_ray_option(reproduce)

    report = sub.add_parser("report", help="render plots and report.html for a finished directory")
    report.add_argument("dir")
    _add_objective_option(report)

    policies = sub.add_parser("policies", help="list the site-selection policies")
    policies.add_argument("--format", choices=FORMATS, default="table", help="table or json")

    config = sub.add_parser(
        "config",
        help="the resolved run configuration and where each setting came from, or a check",
        description="`show` prints the configuration `powertrip run` would use with the same "
        "flags (workload defaults filled in) and the source of each setting: a file, a "
        "flag, --set, a POWERTRIP_RUN_* variable (with --env) or the default. `validate` "
        "checks it: exit 0 when valid, 2 with the error naming the setting and its source.",
    )
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    for action, what in (("show", "print it"), ("validate", "check it")):
        each = config_sub.add_parser(action, help=f"{what}: same flags as `powertrip run`")
        _add_run_options(each)
        each.add_argument("--policy", help="site-selection policy")
        each.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
        each.add_argument(
            "--env",
            action="store_true",
            help="apply POWERTRIP_RUN_* variables from the environment, as the container "
            "entry point does",
        )
        each.add_argument("--format", choices=("yaml", "json"), default="yaml")

    logs = sub.add_parser(
        "logs",
        help="a run's service logs; -f follows them until the run ends",
        description="Print the logs of a run directory's services (RUN/logs/*.log), each line "
        "prefixed with its process. -f follows new lines until the run's summary appears or "
        "Ctrl-C.",
    )
    logs.add_argument("run", help="the run directory")
    logs.add_argument("-f", "--follow", action="store_true", help="follow new lines")
    logs.add_argument(
        "--service", default="", help="only this process's log (aggregator, policy, ...)"
    )
    logs.add_argument("--tail", type=int, default=20, help="last lines of each log (default 20)")

    audit = sub.add_parser(
        "audit",
        help="recompute a run's model from its audited deltas and check it",
        description="Same as `python -m services.aggregator.audit AUDIT_DIR RUN_DIR`: the "
        "aggregator kept every accepted delta with --audit-dir; this recomputes each round's "
        "FedAvg from them and checks the model the run ended with.",
    )
    audit.add_argument("args", nargs=argparse.REMAINDER, help="the audit's own arguments")

    listing = sub.add_parser(
        "ls",
        help="the runs under a directory: state, policy, rounds, time to target",
        description="List every run directory under DIR (one with a rounds.csv or a "
        "summary.json) with its state (done, failed, or in progress or stopped when it has no "
        "summary yet), policy, workload, clock, rounds, final accuracy, time to target and why "
        "it stopped.",
    )
    listing.add_argument("dir", nargs="?", default="runs", help="where to look (default runs/)")
    listing.add_argument("--format", choices=FORMATS, default="table", help="table or json")

    status = sub.add_parser(
        "status",
        help="a deployed aggregator's run: state, round, k, sites alive, accuracy",
        description="Ask a running aggregator (its GetStatus RPC) where its run stands. Exit "
        "0 with the status, 1 when the aggregator cannot be reached or refuses.",
    )
    status.add_argument("address", help="the aggregator's host:port")
    status.add_argument("--format", choices=FORMATS, default="table", help="table or json")
    status.add_argument(
        "--timeout-s", type=float, default=5.0, help="how long to wait for the answer"
    )
    add_tls_flags(status)

    data = sub.add_parser("data", help="inspect or prepare a workload's data")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    info = data_sub.add_parser("info", help="samples per site and class coverage for N sites")
    info.add_argument("workload", help=f"one of {WORKLOADS}")
    info.add_argument("--sites", type=int, default=100, help="number of sites (default 100)")
    info.add_argument("--seed", type=int, default=0, help="partition seed (default 0)")
    info.add_argument("--data-dir", help="the workload's data (default: the repo's data/)")
    prepare = data_sub.add_parser(
        "prepare", help="build a workload's cached data (e.g. shakespeare)"
    )
    prepare.add_argument("workload", help=f"one of {WORKLOADS}")
    prepare.add_argument("--cache-dir", help="where to write the prepared data")
    pretrain = data_sub.add_parser(
        "pretrain",
        help="pretrain shakespeare-lm's base on the plays no site holds (seeded, CPU minutes)",
    )
    pretrain.add_argument("workload", choices=["shakespeare-lm"])
    pretrain.add_argument("--steps", type=int, default=3000, help="AdamW steps (default 3000)")
    pretrain.add_argument("--batch-size", type=int, default=64)
    pretrain.add_argument("--lr", type=float, default=3e-3)
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument(
        "--out", help="the base's file (default: data/shakespeare-lm/base.safetensors)"
    )

    bundle = sub.add_parser(
        "site-bundle",
        help="a remote site's bundle: its certificate and key, the CA, the join token, an env "
        "file and the docker run line",
        description="Write one remote site worker's bundle into --out: a certificate and key "
        "signed by the deployment's CA (openssl), ca.crt, join-token, site.env and "
        "docker-run.sh. Copy the directory to the GPU machine and run `sh docker-run.sh`.",
    )
    bundle.add_argument(
        "--secrets",
        required=True,
        help="the deployment's ca.crt, ca.key and join-token (deploy/secrets: "
        "JOIN_TOKEN=1 deploy/tls/make-certs.sh writes them); ca.key stays there",
    )
    bundle.add_argument("--out", required=True, help="a new directory for the bundle")
    bundle.add_argument(
        "--aggregator", required=True, help="host:port of the aggregator, as the VM reaches it"
    )
    bundle.add_argument(
        "--profiler",
        required=True,
        help="host:port of the profiler, as the VM reaches it (the worker claims its site there)",
    )
    bundle.add_argument(
        "--site", default="", help="the site to host (must exist in the run; default: a free one)"
    )
    bundle.add_argument(
        "--name",
        default="",
        help="worker id, certificate name and container name (default SITE-remote)",
    )
    bundle.add_argument(
        "--site-tokens",
        default="",
        metavar="FILE",
        help="the aggregator's site-tokens.yaml (from `powertrip provision`): the bundle "
        "carries --site's own token, e.g. to rotate that site's certificate",
    )
    bundle.add_argument(
        "--image", default="powertrip-trainer:cuda", help="the trainer image on the VM"
    )
    bundle.add_argument(
        "--gpus",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--gpus all and POWERTRIP_SITE_WORKER_DEVICE=cuda (--no-gpus: CPU, device auto)",
    )
    bundle.add_argument("--threads", type=int, default=8, help="torch threads on the VM")
    bundle.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another setting for site.env, e.g. POWERTRIP_LOG_FORMAT=json (repeatable)",
    )

    provision = sub.add_parser(
        "provision",
        help="every site's bundle at once, each with its own certificate and join token",
        description="Read a sites file (deployment, aggregator, profiler, sites: see "
        "powertrip/app/provision.py) and write OUT/<site>/ bundles, each with a certificate "
        "naming its site and its own join token, and OUT/aggregator/site-tokens.yaml for the "
        "aggregator's --site-tokens (with --site-certs it also checks the certificates).",
    )
    provision.add_argument("sites_file", help="the sites file (YAML)")
    provision.add_argument(
        "--secrets",
        required=True,
        help="the deployment's ca.crt, ca.key and join-token (JOIN_TOKEN=1 "
        "deploy/tls/make-certs.sh DIR writes them)",
    )
    provision.add_argument("--out", required=True, help="a new directory for the bundles")

    revoke = sub.add_parser(
        "revoke",
        help="add a site or a certificate to the aggregator's revocation list (--revoked)",
        description="Append to the revocation list (made if missing) that the aggregator's "
        "--revoked names; it reloads the file within a second, and refuses every call of a "
        "revoked site or certificate with PERMISSION_DENIED (powertrip_auth_failures_total"
        '{kind="revoked"}). Rotating a site\'s certificate: make it a new bundle '
        "(`powertrip site-bundle --site S --site-tokens FILE`), start it, then revoke the old "
        'certificate with --cert (deploy/README.md, "Revoking and rotating").',
    )
    revoke.add_argument("revocation_list", help="the aggregator's --revoked file (YAML)")
    revoke.add_argument(
        "--site", action="append", default=[], help="revoke every certificate of this site"
    )
    revoke.add_argument(
        "--cert",
        action="append",
        default=[],
        metavar="FILE",
        help="revoke this one certificate (PEM), e.g. the one a rotation replaced",
    )

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for the shell, generated from this CLI's "
        "own parser (shtab), e.g. `powertrip completion bash > "
        "~/.local/share/bash-completion/completions/powertrip`.",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))

    serve = sub.add_parser("serve", help="run one service (same as python -m services.NAME)")
    serve.add_argument("service", choices=SERVICES)
    serve.add_argument("args", nargs=argparse.REMAINDER, help="the service's own flags")
    return parser


def _add_result_format_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default) or json: one JSON document on stdout at the end, with every "
        "run's summary and directory; progress and messages then go to stderr",
    )


#: RunConfig fields that have a command-line flag of the same name (dest)
_FLAG_FIELDS = (
    "workload",
    "num_sites",
    "max_rounds",
    "max_sim_hours",
    "target_accuracy",
    "update_size_gb",
    "seed",
    "clock",
    "power",
    "estimator",
    "workers",
    "train_threads",
    "trainer",
    "site_batch",
    "data_dir",
    "policy",
)


def _add_reproduce_options(parser: argparse.ArgumentParser) -> None:
    """The `reproduce` subcommand's options."""
    from powertrip.app.experiments.reproduce import (
        DEFAULT_BUDGET_FACTOR,
        DEFAULT_CONFIG,
        DEFAULT_SEEDS,
    )
    from powertrip.app.paper import FIGURES

    parser.add_argument(
        "--figure",
        default="all",
        help=f"which figure(s): {', '.join(FIGURES)}, a comma list or all (6 and 7 share runs)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=DEFAULT_SEEDS,
        help=f"seeds per run, from the config's seed on (default {DEFAULT_SEEDS})",
    )
    parser.add_argument("--out", default="runs/reproduce", help="output directory")
    parser.add_argument(
        "--config", help=f"base run configuration (default {DEFAULT_CONFIG.name} in configs/)"
    )
    parser.add_argument("--workload", help="run every figure on this workload instead")
    parser.add_argument("--sites", type=int, help="number of sites (default: the config's)")
    parser.add_argument(
        "--k",
        help="static-k sweep grid (default: 1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100 %% of "
        "the sites)",
    )
    parser.add_argument(
        "--no-refine",
        action="store_true",
        help="skip the refinement step (the midpoints beside the sweep grid's k*)",
    )
    parser.add_argument(
        "--budget-factor",
        type=float,
        default=None,
        help=f"cut every arm off at this multiple of PowerTrip's time to target in its "
        f"set-up and seed (default {DEFAULT_BUDGET_FACTOR}; 0 = never)",
    )
    parser.add_argument("--workers", type=int, help="site-worker processes per run")
    parser.add_argument("--data-dir", help="data directory for the workload")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="render reports from finished runs only (with the seeds and settings recorded in "
        "OUT/reproduce.json)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="run up to this many set-up/seed groups at once, in helper processes beside "
        "this one (default 1; each group is locked, so processes never share one)",
    )
    parser.add_argument(
        "--runs-only",
        action="store_true",
        help="make the planned runs and stop: no refinement, no deferred arms, no reports "
        "(what --jobs helpers do; for another process beside a running reproduce)",
    )
    parser.add_argument(
        "--only",
        metavar="SETUPS",
        help="run only these set-ups of the figures (comma-separated, e.g. two-directions); the "
        "reports still read every finished run",
    )
    parser.add_argument(
        "--arms",
        metavar="POLICIES",
        help="run only the arms of these policies (comma-separated, e.g. static: a set-up's "
        "sweep on more seeds without its online arms); the reports still read every "
        "finished run",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the runs still to make and their estimated wall time and CPU hours "
        "(fitted on the finished runs in --out), then stop: nothing is run",
    )
    parser.add_argument("--summary", help="also copy the summary table (claims.md) here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
