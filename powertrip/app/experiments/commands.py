"""The `run`, `compare` and `sweep` commands on the embedded deployment."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from powertrip.app.experiments.launcher import Deployment
from powertrip.app.experiments.runner import UNBOUNDED_ROUNDS, RunOutcome, policy_names, run_once
from powertrip.core import runfiles
from powertrip.core.clocks import clock_kind
from powertrip.core.config import ConfigError, RunConfig, experiment_differences
from powertrip.core.policies.base import param_number

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


# ---- checks before anything is created or started ---------------------------------------
@dataclass(frozen=True)
class PolicySpec:
    """One entry of `compare --policies`: a policy name, optionally with its own parameters
    after a colon (`static:k=3`, `adaptive:probe_cost=0.2:fit_rounds=16`), so one comparison
    can hold a policy twice with different parameters. The text is the row's label."""

    text: str
    policy: str
    params: dict[str, float]

    @property
    def dirname(self) -> str:
        """The run directory: the name alone, or `static-k3` for `static:k=3`."""
        parts = [self.policy, *(f"{k}{v:g}" for k, v in self.params.items())]
        return "-".join(parts)


def parse_policy_spec(text: str) -> PolicySpec:
    name, *pairs = text.split(":")
    params: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UnknownPolicy(
                f"--policies: {text!r}: a parameter is written NAME=VALUE after a colon, "
                f"e.g. static:k=3"
            )
        try:
            params[key.strip()] = param_number(key.strip(), value)
        except ValueError as exc:
            raise UnknownPolicy(f"--policies: {text!r}: {exc}") from None
    return PolicySpec(text, name.strip(), params)


def compare_policies(args: argparse.Namespace) -> list[PolicySpec]:
    """The policies `compare` runs, in order (--policies or the paper's set)."""
    text = args.policies if args.policies is not None else ",".join(DEFAULT_COMPARISON)
    policies = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not policies:
        raise UnknownPolicy(f"--policies: no policy named in {text!r}; see `powertrip policies`")
    return [parse_policy_spec(p) for p in policies]


def sweep_ks(args: argparse.Namespace, config: RunConfig) -> list[int]:
    """`sweep --k` as integers, each a possible site count."""
    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        raise UnknownPolicy(f"--k must be comma-separated integers, got {args.k!r}") from None
    bad = [k for k in ks if not 1 <= k <= config.num_sites]
    if bad or not ks:
        raise UnknownPolicy(
            f"--k values must be in 1..{config.num_sites} (the site count), got {bad or args.k!r}"
        )
    return ks


def check_policy_names(names: Collection[str], params: Collection[str] = ()) -> None:
    """Every policy exists and takes every parameter given, by the policy catalogue
    that the policy service serves (powertrip.core.policies), read before it starts."""
    from powertrip.core.policies import REGISTRY, SERVICE_PARAMS

    unknown = [name for name in names if name not in REGISTRY]
    if unknown:
        raise UnknownPolicy(
            f"unknown policy {', '.join(unknown)}; valid policies: {', '.join(REGISTRY)}"
        )
    for name in names:
        allowed = {*REGISTRY[name].default_params, *SERVICE_PARAMS}
        extra = sorted(set(params) - allowed)
        if extra:
            raise UnknownPolicy(
                f"policy {name!r}: unknown parameter(s) {', '.join(extra)}; allowed: "
                f"{', '.join(sorted(allowed))}"
            )


def check_sites(config: RunConfig) -> None:
    """A partition needs a training sample per site: the check the site workers make when
    they split the data, made from the workload's metadata before anything starts."""
    from powertrip.app.experiments.datacmd import training_samples
    from powertrip.core.workloads import get_workload

    available = training_samples(get_workload(config.workload), config.data_dir)
    if available is not None and config.num_sites > available:
        raise ConfigError(
            f"num_sites (--sites): {config.num_sites} is larger than the {available} training "
            f"samples of workload {config.workload}; at most {available} (one sample per site)"
        )


def preflight(config: RunConfig, args: argparse.Namespace) -> None:
    """Check what the command will run before it makes a directory or starts a service:
    policies and their parameters, --k, --budget-factor, the site count against the data,
    and that --out can be a directory. Raises UnknownPolicy or ConfigError."""
    command = args.command
    params = list(config.policy_params)
    if command == "run":
        check_policy_names([config.policy], params)
    elif command == "compare":
        for spec in compare_policies(args):
            check_policy_names([spec.policy], [*params, *spec.params])
        if args.budget_factor is not None and args.budget_factor < 0:
            raise ConfigError(
                f"--budget-factor: must be >= 0 (0 = no cut-off), got {args.budget_factor:g}"
            )
    elif command == "sweep":
        sweep_ks(args, config)
        check_policy_names(["static"], [*params, "k"])
    check_sites(config)
    out = getattr(args, "out", None)
    if out and Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    if out and command in ("compare", "sweep"):
        names = (
            [spec.dirname for spec in compare_policies(args)]
            if command == "compare"
            else [f"k{k}" for k in sweep_ks(args, config)]
        )
        for name in names:
            check_run_dir(Path(out) / name)


def check_run_dir(run_dir: Path) -> None:
    """compare and sweep reuse, resume or replace the runs in their --out; a directory
    there that is not a run (no run-config.yaml) is never replaced."""
    if run_dir.exists() and not (run_dir / runfiles.REQUESTED_CONFIG).is_file():
        if not run_dir.is_dir() or any(run_dir.iterdir()):
            raise ConfigError(
                f"--out: {run_dir} exists and is not a run directory (no run-config.yaml); "
                "choose another --out"
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
    """The settings the CLI saw given by a flag or the --config YAML (cli.explicit_settings)."""
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


def _render(path: Path, objective: str = "time") -> None:
    from powertrip.app.report import render

    report = render(path, objective)
    print(f"report: {report}")


def run(config: RunConfig, args: argparse.Namespace) -> int:
    out = _out_dir(args, f"runs/{config.policy}-{config.workload}-{time.strftime('%Y%m%d-%H%M%S')}")
    args.out = str(out)  # where an interrupted run can be resumed from (cli._resume_hint)
    out.mkdir(parents=True, exist_ok=True)
    resume = bool(getattr(args, "resume", None))
    config.write_yaml(out / runfiles.REQUESTED_CONFIG)
    with contextlib.ExitStack() as stack:
        placement = _ray_placement(args, config, stack)
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


def _ray_placement(args: argparse.Namespace, config: RunConfig, stack: contextlib.ExitStack):
    """`run --ray ADDRESS`: the site workers as Ray actors (rayworkers), the cluster joined
    for as long as `stack` lasts; None without --ray."""
    if not getattr(args, "ray", None):
        return None
    from powertrip.app.experiments import raycluster, rayworkers

    gpus = _ray_gpus(args)
    ray = stack.enter_context(raycluster.connected(args.ray, gpus))
    placement = rayworkers.RayWorkers(
        ray, cpus_per_worker=config.train_threads, gpus_per_worker=gpus
    )
    stack.callback(placement.close)
    return placement


def previous_run(run_dir: Path, config: RunConfig) -> tuple[str, dict | str | None]:
    """What `run_dir` holds for a run of `config`, judged as reproduce judges its runs
    (powertrip.app.experiments.plan.is_done: a "done" summary and the same settings):
    ("none", None) nothing; ("done", summary) a finished run with the same settings, to
    reuse; ("unfinished", None) the same settings, stopped before its summary, with a
    checkpoint to resume from; ("other", why) anything else, to run again."""
    config_file = run_dir / runfiles.REQUESTED_CONFIG
    summary_file = run_dir / runfiles.SUMMARY
    if not config_file.is_file():
        return "none", None  # nothing run there (check_run_dir refuses a foreign directory)
    try:
        stored = yaml.safe_load(config_file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return "other", "an unreadable run-config.yaml"
    if not isinstance(stored, dict):
        return "other", "an unreadable run-config.yaml"
    # only execution settings may differ (powertrip.core.config.EXECUTION_SETTINGS); max_sim_hours
    # must match here: it is a policy's time budget, part of its result
    differ = experiment_differences(stored, config.to_dict())
    if differ:
        return "other", f"a run with other settings ({', '.join(differ)})"
    try:
        summary = json.loads(summary_file.read_text())
    except (OSError, ValueError):
        summary = None
    if isinstance(summary, dict):
        if summary.get("status") == "done" and summary.get("stopped_reason") not in (
            None,
            "",
            "failed",
        ):
            return "done", summary
        return "other", f"a failed run ({summary.get('message') or summary.get('status')})"
    if (run_dir / runfiles.CHECKPOINT_DIR).is_dir():
        return "unfinished", None
    return "other", "an unfinished run without a checkpoint"


class _Runner:
    """Runs a command's runs on one deployment, started only when a run is not reused."""

    def __init__(self, out: Path, args: argparse.Namespace, stack: contextlib.ExitStack):
        self.out, self.args, self.stack = out, args, stack
        self.deployment: Deployment | None = None

    def run(self, name: str, config: RunConfig, run_dir: Path, *, label: str = "") -> RunOutcome:
        state, found = previous_run(run_dir, config)
        if state == "done" and isinstance(found, dict):
            print(f"{name}: already finished in {run_dir}, reused")
            return RunOutcome(run_dir, found)
        if state == "other":
            check_run_dir(run_dir)  # only ever a run directory is replaced
            print(f"{name}: {run_dir} holds {found}; running it again")
            shutil.rmtree(run_dir)
        elif state == "unfinished":
            print(f"{name}: resuming the unfinished run in {run_dir}")
        if self.deployment is None:
            self.deployment = self.stack.enter_context(
                Deployment(self.out / "base-config.yaml", self.out / "logs")
            )
        return run_once(
            config,
            run_dir,
            self.deployment,
            label=label,
            show_progress=not self.args.quiet,
            resume=state == "unfinished",
        )


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
        _on_ray(out, args, [planned(policies[0], None)])
        first = json.loads((out / policies[0].dirname / runfiles.SUMMARY).read_text())
        best = first.get("time_to_target_s")
        _on_ray(out, args, [planned(spec, best) for spec in policies[1:]])
    else:
        best: float | None = None
        with contextlib.ExitStack() as stack:
            runner = _Runner(out, args, stack)
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
    objective = getattr(args, "objective", None) or "time"
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
        _on_ray(out, args, runs)
    else:
        with contextlib.ExitStack() as stack:
            runner = _Runner(out, args, stack)
            for planned in runs:
                outcome = runner.run(
                    planned.name, planned.config, planned.run_dir, label=planned.label
                )
                _print_summary(outcome, planned.label, args)
    _render(out)
    return 0


@dataclass
class PlannedRun:
    name: str
    config: RunConfig
    run_dir: Path
    label: str = ""


def _on_ray(out: Path, args: argparse.Namespace, runs: Sequence[PlannedRun]) -> None:
    """Make `runs` as tasks on the Ray cluster at args.ray, all at once (raycluster.py);
    finished runs are reused as locally, and any other (unfinished or with other
    settings) is made again from its start: its checkpoint stayed on the node that made it."""
    from powertrip.app.experiments import raycluster

    base_yaml = (out / "base-config.yaml").read_text()
    jobs = []
    for planned in runs:
        state, found = previous_run(planned.run_dir, planned.config)
        if state == "done" and isinstance(found, dict):
            print(f"{planned.name}: already finished in {planned.run_dir}, reused")
            _print_summary(RunOutcome(planned.run_dir, found), planned.label, args)
            continue
        if state != "none":
            check_run_dir(planned.run_dir)
            why = found if isinstance(found, str) else "an unfinished run"
            print(f"{planned.name}: {planned.run_dir} holds {why}; making it again on the cluster")
            shutil.rmtree(planned.run_dir)
        request = raycluster.RunRequest(
            planned.name, raycluster.config_text(planned.config), base_yaml, planned.label
        )
        jobs.append(raycluster.Submitted(request, planned.run_dir, planned.config))
    if not jobs:
        return
    gpus = _ray_gpus(args)
    with raycluster.connected(args.ray, gpus) as ray:
        print(f"{len(jobs)} run(s) submitted to the Ray cluster at {args.ray}")
        raycluster.run_all(
            ray,
            jobs,
            lambda job, summary: _print_summary(
                RunOutcome(job.run_dir, summary), job.request.label, args
            ),
            gpus,
        )


def _ray_gpus(args: argparse.Namespace) -> float:
    return float(getattr(args, "ray_gpus", 0.0) or 0.0)
