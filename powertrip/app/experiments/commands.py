"""The `run`, `compare` and `sweep` commands on the embedded deployment: each run's
bound, the runs made one after another (or on Ray: rayruns.py), a line per finished run and
the report. What they run is checked first (preflight.py); what --out already holds is
reused or resumed (reuse.py)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Collection
from pathlib import Path

from powertrip.app.experiments.launcher import Deployment
from powertrip.app.experiments.preflight import (
    PolicySpec,
    UnknownPolicy,
    compare_policies,
    sweep_ks,
)
from powertrip.app.experiments.rayruns import ray_placement, runs_on_ray
from powertrip.app.experiments.reuse import PlannedRun, ReusingRunner
from powertrip.app.experiments.runner import UNBOUNDED_ROUNDS, RunOutcome, policy_names, run_once
from powertrip.core import runfiles
from powertrip.core.clocks import clock_kind
from powertrip.core.config import RunConfig

#: compare cuts a policy off at this multiple of the best time to target before it
#: (--budget-factor; 0 = no cut-off)
DEFAULT_BUDGET_FACTOR = 3.0
#: Hours of simulated time each run of `compare` and `sweep` gets when neither a flag nor the
#: config sets max_sim_hours. Comparing at equal time, not equal rounds, is what keeps
#: policies with short rounds from being stopped early: at FEMNIST's defaults
#: PowerTrip's 100 rounds took 2.2 h where random needed ~9 h to the same accuracy.
DEFAULT_TIME_BUDGET_H = 3.0


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
    kind = clock_kind(config.clock).adjective
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
    """The settings the CLI saw given by a flag or the --config YAML (cliconfig.py)."""
    return frozenset(getattr(args, "explicit_settings", ()))


def _print_summary(outcome: RunOutcome, label: str = "", args=None) -> None:
    """One line per finished run; with `--format json` also kept for the JSON result
    (args.results, which the CLI prints at the end)."""
    results = getattr(args, "results", None)
    if results is not None:
        results.append({"label": label or outcome.summary.get("policy", ""),
                        "out_dir": str(outcome.out_dir), "summary": outcome.summary})  # fmt: skip
    s = outcome.summary
    ttt = s.get("time_to_target_s")
    reached = f"{ttt / 3600:.3f} h" if ttt is not None else "not reached"
    target = (
        f"perplexity {s['target_perplexity']:g}"
        if s.get("target_perplexity")
        else f"{s['target_accuracy']:.0%}"
    )
    print(
        f"{label or s['policy']}: time to {target} = {reached}; "
        f"{s['rounds']} rounds, "
        f"final accuracy {s['final_accuracy']:.4f}, mean k {s['mean_k']:.1f} -> {outcome.out_dir}"
    )


def _shown(args: argparse.Namespace) -> Callable[[RunOutcome, str], None]:
    """_print_summary for the runs made on Ray (rayruns.runs_on_ray), as they finish."""
    return lambda outcome, label: _print_summary(outcome, label, args)


def _render(path: Path, objective: str = "time") -> None:
    from powertrip.app.report import render

    report = render(path, objective)
    print(f"report: {report}")


def run(config: RunConfig, args: argparse.Namespace) -> int:
    out = _out_dir(args, f"runs/{config.policy}-{config.workload}-{time.strftime('%Y%m%d-%H%M%S')}")
    args.out = str(out)  # where an interrupted run can be resumed from (cliexit.resume_hint)
    out.mkdir(parents=True, exist_ok=True)
    resume = bool(getattr(args, "resume", None))
    config.write_yaml(out / runfiles.REQUESTED_CONFIG)
    with contextlib.ExitStack() as stack:
        placement = ray_placement(args, config, stack)
        deployment = stack.enter_context(
            Deployment(out / runfiles.REQUESTED_CONFIG, out / runfiles.LOGS_DIR)
        )
        _check_policies(deployment, [config.policy])
        outcome = run_once(
            config,
            out,
            deployment,
            show_progress=not args.quiet,
            resume=resume,
            placement=placement,
        )
    if placement is not None:
        nodes = sorted({node["node_id"] for node in placement.nodes})
        print(
            f"site workers: {len(placement.nodes)} Ray actor(s) on {len(nodes)} node(s) "
            f"({', '.join(n[:12] for n in nodes)}); their logs: {out / runfiles.LOGS_DIR}"
        )
    _print_summary(outcome, args=args)
    _render(out)
    return 0


def compare(config: RunConfig, args: argparse.Namespace) -> int:
    """Each policy on the same sites and seed. A policy whose run in --out already finished
    with the same settings (the same budget cut-off included, which follows from the runs
    before it) is reused, an interrupted one resumed from its checkpoint, and one with other
    settings run again: an interrupted `make demo` continues where it stopped."""
    from powertrip.app.report import format_table, load_run, write_comparison

    policies = compare_policies(args)
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
    args.out = str(out)
    out.mkdir(parents=True, exist_ok=True)
    config.write_yaml(out / "base-config.yaml")

    def planned(spec: PolicySpec, best: float | None) -> PlannedRun:
        params = {**config.policy_params, **spec.params}
        run_config = dataclasses.replace(config, policy=spec.policy, policy_params=params)
        if factor and best is not None:
            cap_h = factor * best / 3600
            if not run_config.max_sim_hours or cap_h < run_config.max_sim_hours:
                run_config.max_sim_hours = cap_h
        label = spec.text if spec.params else ""
        return PlannedRun(f"policy {spec.text}", run_config, out / spec.dirname, label)

    if getattr(args, "ray", None):
        # the first policy alone, then every other at once, each cut off at factor x the
        # first's time (one after another, a later run may lower the cut-off for the next)
        runs_on_ray(out, args, [planned(policies[0], None)], _shown(args))
        first = json.loads((out / policies[0].dirname / runfiles.SUMMARY).read_text())
        best = first.get("time_to_target_s")
        runs_on_ray(out, args, [planned(spec, best) for spec in policies[1:]], _shown(args))
    else:
        best: float | None = None
        with contextlib.ExitStack() as stack:
            runner = ReusingRunner(out, args, stack)
            for spec in policies:
                run = planned(spec, best)
                outcome = runner.run(run.name, run.config, run.run_dir, label=run.label)
                _print_summary(outcome, spec.text, args)
                if outcome.time_to_target_s is not None:
                    best = (
                        outcome.time_to_target_s
                        if best is None
                        else min(best, outcome.time_to_target_s)
                    )
    runs = [load_run(out / p.dirname, label=p.text if p.params else "") for p in policies]
    objective = getattr(args, "rank_by", None) or "time"
    write_comparison(out, runs, objective)
    print()
    print(format_table(runs, objective))
    print(f"{bound}; {cutoff}" if cutoff else bound)
    _render(out, objective)
    return 0


def sweep(config: RunConfig, args: argparse.Namespace) -> int:
    """static-k for each --k on the same sites and seed; finished runs in --out are reused
    and interrupted ones resumed, as in compare."""
    ks = sweep_ks(args, config)
    config, bound = time_bound(config, _explicit(args))
    print(bound)
    out = _out_dir(args, f"runs/sweep-{config.workload}-{time.strftime('%Y%m%d-%H%M%S')}")
    args.out = str(out)
    out.mkdir(parents=True, exist_ok=True)
    config.write_yaml(out / "base-config.yaml")
    runs = []
    for k in ks:
        params = {**config.policy_params, "k": float(k)}
        run_config = dataclasses.replace(config, policy="static", policy_params=params)
        runs.append(PlannedRun(f"static k={k}", run_config, out / f"k{k}", f"static k={k}"))
    if getattr(args, "ray", None):
        runs_on_ray(out, args, runs, _shown(args))
    else:
        with contextlib.ExitStack() as stack:
            runner = ReusingRunner(out, args, stack)
            for planned in runs:
                outcome = runner.run(
                    planned.name, planned.config, planned.run_dir, label=planned.label
                )
                _print_summary(outcome, planned.label, args)
    _render(out)
    return 0
