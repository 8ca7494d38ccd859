"""The `run`, `compare` and `sweep` commands on the embedded deployment."""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Collection
from pathlib import Path

from powertrip.config import RunConfig
from powertrip.experiments.launcher import Deployment
from powertrip.experiments.runner import UNBOUNDED_ROUNDS, RunOutcome, policy_names, run_once

#: The paper's comparison (§5.3, Fig. 9), PowerTrip first so its time sets the budget.
DEFAULT_COMPARISON = (
    "powertrip",
    "static",
    "centralized-25",
    "centralized-50",
    "highest-power",
    "lowest-latency",
    "random",
    "radius",
    "all",
)
DEFAULT_BUDGET_FACTOR = 3.0
#: Hours of simulated time each run of `compare` and `sweep` gets when neither a flag nor the
#: config sets max_sim_hours. Comparing at equal time, not equal rounds, is what keeps
#: policies with short rounds from being stopped early (issue #15): at FEMNIST's defaults
#: PowerTrip's 100 rounds took 2.2 h where random needed ~9 h to the same accuracy.
DEFAULT_TIME_BUDGET_H = 3.0


class UnknownPolicy(ValueError):
    pass


def _out_dir(args: argparse.Namespace, default: str) -> Path:
    return Path(args.out or default)


def _check_policies(deployment: Deployment, wanted: list[str]) -> None:
    valid = policy_names(deployment)
    unknown = [p for p in wanted if p not in valid]
    if unknown:
        raise UnknownPolicy(
            f"unknown policy {', '.join(unknown)}; valid policies: {', '.join(valid)}"
        )


def time_bound(config: RunConfig, explicit: Collection[str]) -> tuple[RunConfig, str]:
    """The config every run of a compare or sweep starts from, bound by time, and a line that
    says which bound applies. A budget (max_sim_hours) the user did not set becomes
    DEFAULT_TIME_BUDGET_H; a round cap they did not set is lifted, so the budget ends every
    run; a budget of 0 they did set means no budget, the round cap as before."""
    config = dataclasses.replace(config, policy_params=dict(config.policy_params))
    kind = "simulated" if config.clock == "simulated" else "wall-clock"
    if "max_sim_hours" in explicit:
        source = "as set"
    else:
        config.max_sim_hours = DEFAULT_TIME_BUDGET_H
        source = "the default; --time-budget-h to change"
    if config.max_sim_hours <= 0:
        return config, (
            f"bound: {config.max_rounds} rounds per run and no time budget; policies with "
            "short rounds stop earlier in time, so compare them by acc@T"
        )
    budget = f"{config.max_sim_hours:g} h of {kind} time per run ({source})"
    if "max_rounds" in explicit:
        return config, (
            f"bound: {budget} or {config.max_rounds} rounds (max_rounds as set), whichever "
            "comes first"
        )
    config.max_rounds = UNBOUNDED_ROUNDS
    return config, f"bound: {budget}; no round cap"


def _explicit(args: argparse.Namespace) -> frozenset[str]:
    """The settings the CLI saw given by a flag or the --config YAML (cli.explicit_settings)."""
    return frozenset(getattr(args, "explicit_settings", ()))


def _print_summary(outcome: RunOutcome) -> None:
    s = outcome.summary
    ttt = s.get("time_to_target_s")
    reached = f"{ttt / 3600:.3f} h" if ttt is not None else "not reached"
    print(
        f"{s['policy']}: time to {s['target_accuracy']:.0%} = {reached}; {s['rounds']} rounds, "
        f"final accuracy {s['final_accuracy']:.4f}, mean k {s['mean_k']:.1f} -> {outcome.out_dir}"
    )


def _render(path: Path) -> None:
    from powertrip.report import render

    report = render(path)
    print(f"report: {report}")


def run(config: RunConfig, args: argparse.Namespace) -> int:
    out = _out_dir(args, f"runs/{config.policy}-{config.workload}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    resume = bool(getattr(args, "resume", None))
    config.write_yaml(out / "run-config.yaml")
    with Deployment(out / "run-config.yaml", out / "logs") as deployment:
        _check_policies(deployment, [config.policy])
        outcome = run_once(config, out, deployment, show_progress=not args.quiet, resume=resume)
    _print_summary(outcome)
    _render(out)
    return 0


def compare(config: RunConfig, args: argparse.Namespace) -> int:
    from powertrip.report import format_table, load_run, write_comparison

    policies = [
        p.strip() for p in (args.policies or ",".join(DEFAULT_COMPARISON)).split(",") if p.strip()
    ]
    factor = DEFAULT_BUDGET_FACTOR if args.budget_factor is None else args.budget_factor
    config, bound = time_bound(config, _explicit(args))
    print(bound)
    cutoff = (
        f"runs are also cut off at {factor:g}x the best time-to-target found before them"
        if factor
        else ""
    )
    if cutoff:
        print(f"({cutoff})")
    out = _out_dir(args, f"runs/compare-{config.workload}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    config.write_yaml(out / "base-config.yaml")
    best: float | None = None
    with Deployment(out / "base-config.yaml", out / "logs") as deployment:
        _check_policies(deployment, policies)
        for policy in policies:
            run_config = dataclasses.replace(
                config, policy=policy, policy_params=dict(config.policy_params)
            )
            if factor and best is not None:
                cap_h = factor * best / 3600
                if not run_config.max_sim_hours or cap_h < run_config.max_sim_hours:
                    run_config.max_sim_hours = cap_h
            outcome = run_once(run_config, out / policy, deployment, show_progress=not args.quiet)
            _print_summary(outcome)
            if outcome.time_to_target_s is not None:
                best = (
                    outcome.time_to_target_s
                    if best is None
                    else min(best, outcome.time_to_target_s)
                )
    runs = [load_run(out / p) for p in policies]
    write_comparison(out, runs)
    print()
    print(format_table(runs))
    print(f"{bound}; {cutoff}" if cutoff else bound)
    _render(out)
    return 0


def sweep(config: RunConfig, args: argparse.Namespace) -> int:
    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        raise UnknownPolicy(f"--k must be comma-separated integers, got {args.k!r}") from None
    bad = [k for k in ks if not 1 <= k <= config.num_sites]
    if bad:
        raise UnknownPolicy(
            f"--k values must be in 1..{config.num_sites} (the site count), got {bad}"
        )
    config, bound = time_bound(config, _explicit(args))
    print(bound)
    out = _out_dir(args, f"runs/sweep-{config.workload}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    config.write_yaml(out / "base-config.yaml")
    with Deployment(out / "base-config.yaml", out / "logs") as deployment:
        for k in ks:
            params = {**config.policy_params, "k": float(k)}
            run_config = dataclasses.replace(config, policy="static", policy_params=params)
            outcome = run_once(
                run_config,
                out / f"k{k}",
                deployment,
                label=f"static k={k}",
                show_progress=not args.quiet,
            )
            _print_summary(outcome)
    _render(out)
    return 0
