"""The `powertrip` command line's parser: the subcommands, with the flags of the ones that
make runs (run, compare, sweep, reproduce) and read them (report, policies, config); cli.py
runs them. Flags several commands share are in cliflags.py, the operator commands' parsers
in clioperatorparser.py."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from types import ModuleType

from powertrip.app.cliflags import (
    FORMATS,
    add_rank_by_option,
    add_ray_gpus_option,
    add_ray_option,
    add_result_format_option,
    add_run_options,
    add_time_budget_option,
)
from powertrip.app.clioperatorparser import add_operator_commands


def version() -> str:
    """The installed distribution's version, else the package's own."""
    try:
        return importlib.metadata.version("powertrip")
    except importlib.metadata.PackageNotFoundError:
        import powertrip

        return getattr(powertrip, "__version__", "unknown")


#: the paper's reproduction's command line (`reproduce`), in a package beside the library that
#: imports the library: found by this name, so the library itself imports none of it
REPRODUCTION_CLI = "reproduction.cli"


def reproduction_cli() -> ModuleType | None:
    """reproduction/cli.py where the reproduction is there (a clone, the wheel), else None and
    no `reproduce` command (an image that carries only the library and the services)."""
    try:
        return importlib.import_module(REPRODUCTION_CLI)
    except ModuleNotFoundError as exc:
        if exc.name not in (REPRODUCTION_CLI, REPRODUCTION_CLI.partition(".")[0]):
            raise  # the reproduction is there but something it needs is not: say so
        return None


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand, in the order `powertrip --help` lists them."""
    from powertrip.app.experiments.preflight import DEFAULT_COMPARISON

    parser = argparse.ArgumentParser(
        prog="powertrip",
        description="PowerTrip: choose which and how many geo-distributed sites train each round",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one experiment (starts all services locally)")
    add_run_options(run)
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

    add_result_format_option(run)
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="start the site-worker processes (--workers) as Ray actors spread over a Ray "
        "cluster's nodes; the aggregator, profiler and policy stay here and the workers dial "
        "the aggregator on this node's cluster address (guarded by a join token made for the "
        "run, no TLS: a trusted network, as Ray's). ADDRESS: 'auto', HOST:PORT or "
        "ray://HOST:10001 (extra [ray]; powertrip/app/experiments/rayworkers.py)",
    )
    add_ray_gpus_option(run, "each site-worker actor")

    compare = sub.add_parser(
        "compare",
        help="run several policies on identical sites and seed",
        description="Run several policies on identical sites and seed. A policy whose run in "
        "--out already finished with the same settings is reused, an interrupted one resumed "
        "from its checkpoint, and one with other settings run again.",
    )
    add_run_options(compare)
    compare.add_argument(
        "--policies",
        help="comma-separated policy names, each optionally with its own parameters after "
        "colons, e.g. powertrip,adaptive,static:k=3 (a run directory static-k3) "
        f"(default {','.join(DEFAULT_COMPARISON)})",
    )
    add_time_budget_option(compare)
    compare.add_argument(
        "--budget-factor",
        type=float,
        default=None,
        help="stop a policy once its simulated time exceeds this multiple of the best "
        "time-to-target so far (default 3; 0 = no cut-off)",
    )
    add_rank_by_option(compare)
    add_result_format_option(compare)
    add_ray_option(compare)

    sweep = sub.add_parser(
        "sweep",
        help="static-k sweep (paper Fig. 8): finds k*",
        description="Static-k sweep (paper Fig. 8): finds k*. Finished runs in --out with the "
        "same settings are reused and interrupted ones resumed, as in compare.",
    )
    add_run_options(sweep)
    sweep.add_argument("--k", required=True, help="comma-separated k values, e.g. 10,20,30")
    add_result_format_option(sweep)
    add_time_budget_option(sweep)
    add_ray_option(sweep)

    reproduction = reproduction_cli()
    if reproduction is not None:
        reproduction.add_command(sub)

    report = sub.add_parser("report", help="render plots and report.html for a finished directory")
    report.add_argument("dir")
    add_rank_by_option(report)

    policies = sub.add_parser("policies", help="list the site-selection policies")
    policies.add_argument("--format", choices=FORMATS, default="table", help="table or json")

    kernels = sub.add_parser(
        "kernels",
        help="which CPU kernel family this machine computes, and whether each kernel holds "
        "its bits at 1, 2 and 16 threads",
        description="Runs each numeric kernel a run relies on (GEMMs, convolutions, "
        "cross-entropy, SGD steps, numpy's sums, the int8 encoder) on fixed inputs and "
        "compares its bits across thread counts and with the recorded families "
        "(powertrip/core/kernel_families.json). Exit 0 when the check passes, 1 naming the "
        "kernel that differs.",
    )
    kernels.add_argument(
        "--record",
        action="store_true",
        help="add this machine's family to kernel_families.json (after a new CPU type passed "
        "the rest of the tests)",
    )
    kernels.add_argument("--format", choices=FORMATS, default="table", help="table or json")

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
        add_run_options(each)
        each.add_argument("--policy", help="site-selection policy")
        each.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
        each.add_argument(
            "--env",
            action="store_true",
            help="apply POWERTRIP_RUN_* variables from the environment, as the container "
            "entry point does",
        )
        each.add_argument("--format", choices=("yaml", "json"), default="yaml")
    listing = config_sub.add_parser(
        "settings",
        help="every setting: its type, default, allowed values and what it does",
        description="The settings table (powertrip/core/settings.py), the one place each "
        "setting is declared; docs/cli.md renders the same table.",
    )
    listing.add_argument("--format", choices=("text", "markdown"), default="text")

    add_operator_commands(sub)
    return parser
