"""`powertrip reproduce`: the paper's evaluation (reproduction/reproduce.py) as a command of
the `powertrip` command line: its options, its exit codes and messages, and `reproduce --set`
written into the base configuration file that reproduce reads. The library's parser finds
this module by name (powertrip/app/cliparser.py) and calls `add_command` and
`reproduce_command`; it imports nothing of the reproduction."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from powertrip.app.cliexit import (
    EXIT_CHILD,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    interrupted,
    resume_hint,
)
from powertrip.app.cliflags import add_ray_option, add_set_option
from powertrip.core.config import PARAM_PREFIX, ConfigError, RunConfig, parse_setting


def add_command(sub: argparse._SubParsersAction) -> None:
    """`powertrip reproduce` and its options, among the library's subcommands."""
    reproduce = sub.add_parser(
        "reproduce",
        help="the paper's evaluation (Figs. 8-14) over several seeds, resumable, with "
        "claims tables",
    )
    add_reproduce_options(reproduce)
    add_set_option(reproduce)
    add_ray_option(reproduce)


def reproduce_command(args: argparse.Namespace) -> int:
    """`powertrip reproduce`, its errors as one line and an exit code (cliexit.py)."""
    from powertrip.app.experiments.launcher import LaunchError, stop_services_on_signals
    from powertrip.app.experiments.runner import ChildExited, RunError
    from powertrip.app.report import ReportError
    from powertrip.core.workloads import DataError, UnknownWorkload
    from reproduction import reproduce

    with stop_services_on_signals():
        try:
            with tempfile.TemporaryDirectory(prefix="powertrip-reproduce-") as tmp:
                if args.settings:
                    args.config = str(reproduce_config(args, Path(tmp) / "reproduce-config.yaml"))
                return reproduce.main(args)
        except (
            ConfigError,
            reproduce.ReproduceError,
            UnknownWorkload,
            DataError,
            ReportError,
        ) as exc:
            print(f"powertrip reproduce: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except (ChildExited, LaunchError) as exc:
            print(f"powertrip reproduce: {exc}", file=sys.stderr)
            return EXIT_CHILD
        except RunError as exc:  # --ray: a group's task failed twice
            print(f"powertrip reproduce: {exc}", file=sys.stderr)
            return EXIT_RUN_FAILED
        except KeyboardInterrupt as exc:
            return interrupted("powertrip reproduce", exc, resume_hint(args))


def reproduce_config(args: argparse.Namespace, path: Path) -> Path:
    """`reproduce --set`: the base configuration file with the --set values written into it
    (reproduce reads its base from a file, then applies its own flags). A --set of a setting
    that one of reproduce's flags then replaces is refused rather than silently lost."""
    from powertrip.app.experiments.suite import WORKLOAD_FIELDS
    from reproduction import reproduce

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


def add_reproduce_options(parser: argparse.ArgumentParser) -> None:
    """The `reproduce` subcommand's options."""
    from reproduction.paper import FIGURES
    from reproduction.reproduce import (
        DEFAULT_BUDGET_FACTOR,
        DEFAULT_CONFIG,
        DEFAULT_SEEDS,
    )

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
