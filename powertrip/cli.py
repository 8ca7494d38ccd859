"""`powertrip`: run, compare, sweep, report, list policies, serve a service."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from powertrip import policyparams, runfiles
from powertrip.config import PARAM_PREFIX, ConfigError, RunConfig, parse_setting
from powertrip.workloads import REGISTRY

WORKLOADS = ", ".join(sorted(REGISTRY))

SERVICES = ("aggregator", "site_worker", "profiler", "policy")
EXIT_USAGE = 2


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


def _add_time_budget_option(parser: argparse.ArgumentParser) -> None:
    """compare and sweep bound every run by the same time, not a round count, so that
    policies with short rounds are not stopped earlier (in time) than the others."""
    from powertrip.experiments.commands import DEFAULT_TIME_BUDGET_H

    parser.add_argument(
        "--time-budget-h",
        type=float,
        metavar="H",
        help="hours of simulated time every run gets; a run stops before a round that would "
        f"end after it (default {DEFAULT_TIME_BUDGET_H:g}, with no round cap unless "
        "--max-rounds or the config sets one; 0 = no time budget, the round cap ends runs)",
    )


def build_parser() -> argparse.ArgumentParser:
    from powertrip.experiments.commands import DEFAULT_COMPARISON

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
        help="policy parameter, e.g. --param k=20 or --param gain=separable (repeatable)",
    )

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
        help=f"comma-separated policy names (default {','.join(DEFAULT_COMPARISON)})",
    )
    _add_time_budget_option(compare)
    compare.add_argument(
        "--budget-factor",
        type=float,
        default=None,
        help="stop a policy once its simulated time exceeds this multiple of the best "
        "time-to-target so far (default 3; 0 = no cut-off)",
    )

    sweep = sub.add_parser(
        "sweep",
        help="static-k sweep (paper Fig. 8): finds k*",
        description="Static-k sweep (paper Fig. 8): finds k*. Finished runs in --out with the "
        "same settings are reused and interrupted ones resumed, as in compare.",
    )
    _add_run_options(sweep)
    sweep.add_argument("--k", required=True, help="comma-separated k values, e.g. 10,20,30")
    _add_time_budget_option(sweep)

    from powertrip.experiments import reproduce as _reproduce

    reproduce = sub.add_parser(
        "reproduce",
        help="the paper's evaluation (Figs. 8-14) over several seeds, resumable, with "
        "claims tables",
    )
    _reproduce.add_arguments(reproduce)
    _add_set_option(reproduce)

    report = sub.add_parser("report", help="render plots and report.html for a finished directory")
    report.add_argument("dir")

    sub.add_parser("policies", help="list the site-selection policies")

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

    serve = sub.add_parser("serve", help="run one service (same as python -m services.NAME)")
    serve.add_argument("service", choices=SERVICES)
    serve.add_argument("args", nargs=argparse.REMAINDER, help="the service's own flags")
    return parser


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


def load_config(args: argparse.Namespace) -> RunConfig:
    config = RunConfig.from_yaml(args.config) if args.config else RunConfig()
    overrides = {name: getattr(args, name, None) for name in _FLAG_FIELDS}
    budget = getattr(args, "time_budget_h", None)
    if budget is not None:
        if budget < 0:
            raise ConfigError(f"--time-budget-h: must be >= 0 (0 = no time budget), got {budget}")
        given = overrides["max_sim_hours"]
        if given is not None and given != budget:
            raise ConfigError(
                f"--time-budget-h {budget:g} and --max-sim-hours {given:g} disagree; give one"
            )
        overrides["max_sim_hours"] = budget
    config = config.with_overrides(**overrides)
    for item in getattr(args, "param", []) or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--param {item!r}: expected NAME=VALUE")
        try:
            # a number, or the name of a choice (gain=separable)
            config.policy_params[name.strip()] = policyparams.encode(name.strip(), value)
        except ValueError as exc:
            raise ConfigError(f"--param {exc}") from None
    # --set last: YAML < flags < --set, each value through the YAML file's checks
    config = config.with_settings(getattr(args, "settings", None) or [])
    return config.validate()


def version() -> str:
    """The installed distribution's version, else the package's own."""
    try:
        return importlib.metadata.version("powertrip")
    except importlib.metadata.PackageNotFoundError:
        import powertrip

        return getattr(powertrip, "__version__", "unknown")


def explicit_settings(args: argparse.Namespace) -> frozenset[str]:
    """RunConfig fields the user chose, by a flag or a key in the --config YAML, as opposed to
    defaults: compare and sweep replace the default round cap and time budget, never chosen
    ones (configs/demo.yaml's max_rounds, for one)."""
    chosen = {name for name in _FLAG_FIELDS if getattr(args, name, None) is not None}
    if getattr(args, "time_budget_h", None) is not None:
        chosen.add("max_sim_hours")
    for item in getattr(args, "settings", None) or []:
        key = parse_setting(item)[0]
        chosen.add("policy_params" if key.startswith(PARAM_PREFIX) else key)
    if getattr(args, "config", None):
        try:
            data = yaml.safe_load(Path(args.config).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:  # load_config has already read it
            raise ConfigError(f"cannot read config file {args.config}: {exc}") from exc
        if isinstance(data, dict):
            chosen.update(str(key) for key in data)
    return frozenset(chosen)


def _resume_args(args: argparse.Namespace) -> None:
    """`run --resume DIR` takes DIR's run-config.yaml; other run flags would change the run."""
    out = Path(args.resume)
    config = out / runfiles.REQUESTED_CONFIG
    if not config.is_file():
        raise ConfigError(f"--resume {out}: no run-config.yaml there (not a run directory?)")
    ignored = {"resume", "quiet", "command", "param", "out"}
    given = [
        "--set" if k == "settings" else f"--{k.replace('_', '-')}"
        for k, v in vars(args).items()
        if k not in ignored and v not in (None, [], False)
    ]
    if given or args.param or (args.out and Path(args.out) != out):
        raise ConfigError(
            f"--resume takes the configuration from {config}; drop {', '.join(given) or '--out'}"
        )
    args.config, args.out = str(config), str(out)


def _resolve_workload(config: RunConfig) -> RunConfig:
    from powertrip.workloads import get_workload

    workload = get_workload(config.workload)
    workload.check_data(config.data_dir)
    return config.resolved(workload.defaults)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        os.execv(sys.executable, [sys.executable, "-m", f"services.{args.service}", *args.args])
    if args.command == "policies":
        return subprocess.call([sys.executable, "-m", "services.policy", "--list-policies"])
    if args.command == "report":
        from powertrip.report import ReportError, render

        try:
            path = render(Path(args.dir))
        except ReportError as exc:
            print(f"powertrip report: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"report: {path}")
        return 0
    if args.command == "data":
        from powertrip.experiments import datacmd

        return datacmd.main(args)
    if args.command == "reproduce":
        return _reproduce_main(args)
    from powertrip.experiments import commands
    from powertrip.experiments.runner import RunError
    from powertrip.workloads import DataError, UnknownWorkload

    try:
        if getattr(args, "resume", None):
            _resume_args(args)
        config = load_config(args)
        args.explicit_settings = explicit_settings(args)
        config = _resolve_workload(config)
        # every value checked before a directory is made or a service started
        commands.preflight(config, args)
        if args.command == "run":
            return commands.run(config, args)
        if args.command == "compare":
            return commands.compare(config, args)
        if args.command == "sweep":
            return commands.sweep(config, args)
    except (ConfigError, UnknownWorkload, commands.UnknownPolicy) as exc:
        print(f"powertrip: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DataError as exc:
        print(f"powertrip: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RunError as exc:
        print(f"powertrip: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("powertrip: interrupted; services stopped", file=sys.stderr)
        return 130
    return EXIT_USAGE


def _reproduce_main(args: argparse.Namespace) -> int:
    from powertrip.experiments import reproduce
    from powertrip.report import ReportError
    from powertrip.workloads import DataError, UnknownWorkload

    try:
        with tempfile.TemporaryDirectory(prefix="powertrip-reproduce-") as tmp:
            if args.settings:
                args.config = str(_reproduce_config(args, Path(tmp) / "reproduce-config.yaml"))
            return reproduce.main(args)
    except (ConfigError, reproduce.ReproduceError, UnknownWorkload, DataError, ReportError) as exc:
        print(f"powertrip reproduce: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("powertrip reproduce: interrupted; finished runs are kept", file=sys.stderr)
        return 130


def _reproduce_config(args: argparse.Namespace, path: Path) -> Path:
    """`reproduce --set`: the base configuration file with the --set values written into it
    (reproduce reads its base from a file, then applies its own flags). A --set of a setting
    that one of reproduce's flags then replaces is refused rather than silently lost."""
    from powertrip.experiments import reproduce
    from powertrip.experiments.suite import WORKLOAD_FIELDS

    source = Path(args.config) if args.config else reproduce.DEFAULT_CONFIG
    config = RunConfig.from_yaml(source).with_settings(args.settings).validate()
    later = {
        "workload": args.workload and "--workload",
        "num_sites": args.sites and "--sites",
        "workers": args.workers and "--workers",
        "data_dir": args.data_dir and "--data-dir",
    }
    if args.workload and args.workload != "femnist":
        later.update(dict.fromkeys(WORKLOAD_FIELDS, "--workload"))
    if args.quick:
        later.update(dict.fromkeys(reproduce.QUICK_OVERRIDES, "--quick"))
    data = yaml.safe_load(source.read_text()) or {}
    for item in args.settings:
        key = parse_setting(item)[0]
        key = "policy_params" if key.startswith(PARAM_PREFIX) else key
        if later.get(key):
            raise ConfigError(
                f"--set {item}: reproduce's {later[key]} sets {key} after the configuration; "
                f"give {key} one way"
            )
        data[key] = getattr(config, key)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


if __name__ == "__main__":
    sys.exit(main())
