"""The flags several `powertrip` commands share: a run's settings (run, compare, sweep and
config take the same ones, so `config show` shows what `run` would use), --set, --ray, the
time budget, the objective and the output format. One definition each, so the commands
never drift apart in a flag's name, default or help."""

from __future__ import annotations

import argparse
import sys

from powertrip.core.settings import row_map
from powertrip.core.workloads import REGISTRY

WORKLOADS = ", ".join(sorted(REGISTRY))

#: what `ls`, `status` and `policies` print: aligned columns, or JSON for scripts
#: (powertrip.app.operate); run, compare and sweep print their results either way too
FORMATS = ("table", "json")

#: RunConfig fields that have a command-line flag of the same name (dest)
FLAG_FIELDS = (
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


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """A run's settings as flags (FLAG_FIELDS and --config, --set, --out, --quiet)."""
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
    parser.add_argument("--clock", choices=row_map()["clock"].choices, help="time source")
    parser.add_argument(
        "--power",
        choices=row_map()["power"].choices,
        help="site power: U[0.1, 1] drawn once, or Google PowerData 2019 replay",
    )
    parser.add_argument(
        "--estimator", choices=row_map()["estimator"].choices, help="round-time estimator"
    )
    parser.add_argument("--workers", type=int, help="site-worker processes (default 1)")
    parser.add_argument(
        "--train-threads",
        type=int,
        help="sites each worker trains at once, a thread each (default 0: one per CPU core)",
    )
    parser.add_argument(
        "--trainer",
        choices=row_map()["trainer"].choices,
        help="how workers train their sites: one after another (loop, default) or vmap",
    )
    parser.add_argument("--site-batch", type=int, help="sites per vmap call (default 1)")
    parser.add_argument("--data-dir", help="data directory for the workload")
    add_set_option(parser)
    parser.add_argument("--out", default=None, help="output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="settings",
        metavar="KEY=VALUE",
        help="any run-configuration setting, read and checked as in the YAML file, e.g. "
        "--set lr=0.01 --set work_model=data-parallel or --set policy_params.k=20 "
        "(repeatable; wins over the YAML and the other flags); the settings: "
        f"{', '.join(row_map())}; `powertrip config settings` says what each does",
    )


def add_ray_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="make the runs as tasks on a Ray cluster, all at once (reproduce: a task per "
        "set-up and seed): 'auto' (the cluster this machine joined with `ray start`), "
        "HOST:PORT or ray://HOST:10001; results land in the same run directories (extra "
        "[ray]; powertrip/app/experiments/raycluster.py)",
    )
    add_ray_gpus_option(parser, "each run's task (reproduce: each group's)")


def add_ray_gpus_option(parser: argparse.ArgumentParser, who: str) -> None:
    parser.add_argument(
        "--ray-gpus",
        type=float,
        default=0.0,
        metavar="G",
        help=f"with --ray: GPUs {who} asks Ray for (default 0; fractions share a GPU); Ray "
        "sets CUDA_VISIBLE_DEVICES and the site workers train there (install torch with "
        "CUDA: make setup TORCH=cuda); refused at once if no node has that many",
    )


def add_rank_by_option(parser: argparse.ArgumentParser) -> None:
    """compare and report rank a comparison by one measure; the table shows all four. Named
    apart from the run setting `objective` (what each round optimises: --set objective=...);
    `--objective`, its former name, still works and says so."""
    from powertrip.app.report.objectives import RANKINGS

    parser.add_argument(
        "--rank-by",
        choices=tuple(RANKINGS),
        default="time",
        help="rank the comparison by time, energy, egress cost or carbon to the target "
        "(default time; the table shows all four)",
    )
    parser.add_argument(
        "--objective", choices=tuple(RANKINGS), dest="rank_by_former", help=argparse.SUPPRESS
    )


def settle_rank_by(args: argparse.Namespace) -> None:
    """Fold the former `--objective` into `args.rank_by`, with a note that it is now
    `--rank-by` (the run setting `objective` is another thing)."""
    former = getattr(args, "rank_by_former", None)
    if former:
        print(
            "powertrip: --objective (the ranking) is now --rank-by; the run setting objective "
            "(time or carbon) is --set objective=...",
            file=sys.stderr,
        )
        args.rank_by = former


def add_time_budget_option(parser: argparse.ArgumentParser) -> None:
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


def add_result_format_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default) or json: one JSON document on stdout at the end, with every "
        "run's summary and directory; progress and messages then go to stderr",
    )
