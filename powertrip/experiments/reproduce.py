"""`powertrip reproduce`: the paper's evaluation (§5, Figs. 8-14) as declarative suites.

A suite is a row of the SUITES table: which variants (set-ups: power mode, update size,
workload) and which arms (policies, static k values) it needs. Runs are keyed by
(variant, seed, arm) and live in OUT/runs/<variant>/seed<s>/<arm>/, so suites that share a
set-up share its runs (Fig. 9's uniform-power runs serve Figs. 8, 10 and 13 as well), and a
run whose summary.json says "done" with the same settings is never run again: a killed
reproduce picks up where it stopped.

`static-k*` is not a run of its own: it is the static-k sweep arm whose mean time to target
over the seeds is lowest (paper §5.2: k* is found by the sweep, then used as the baseline).

Each (variant, seed) group runs PowerTrip first; every other arm is cut off once its
simulated time passes `budget_factor` x PowerTrip's time to target in the group (the best
time found so far if PowerTrip missed the target), so a baseline's time is then a lower
bound of at least budget_factor x PowerTrip's and the claims table says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from powertrip.config import ConfigError, RunConfig

#: static-k sweep as fractions of the site count: 10, 20, 40, 70, 100 of 100 sites (k* = 70
#: in the paper is one of them)
SWEEP_FRACTIONS: tuple[float, ...] = (0.1, 0.2, 0.4, 0.7, 1.0)
DEFAULT_SEEDS = 3
DEFAULT_BUDGET_FACTOR = 1.5
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "reproduce.yaml"

#: the paper's Fig. 9 policies (static-k* resolved from the sweep) plus `all`
FIG9_ARMS = (
    "powertrip",
    "sweep",
    "static-k*",
    "centralized-25",
    "centralized-50",
    "highest-power",
    "random",
    "radius",
    "all",
)

#: settings reset to the workload's own defaults when a variant switches workload
_WORKLOAD_FIELDS = ("lr", "batch_size", "local_steps", "tau_s", "eval_samples", "target_accuracy")


@dataclass(frozen=True)
class Variant:
    """A set-up shared by a group of runs: RunConfig overrides on top of the base config."""

    name: str
    label: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    #: False: no cut-off relative to PowerTrip (fixed-round runs, Fig. 11)
    budget: bool = True


@dataclass(frozen=True)
class Suite:
    """One figure of the paper: the variants and arms it needs and what the paper shows."""

    figure: str
    title: str
    paper: str
    variants: tuple[str, ...]
    #: policy names, "sweep" (static k over SWEEP_FRACTIONS), "static-k*", "static-k@F"
    #: (static with k = F x sites)
    arms: tuple[str, ...]


def _workload_variant(name: str) -> Variant:
    return Variant(
        name,
        f"{name} workload (its own lr, batch, target), uniform power, 1.5 GB",
        {"workload": name, **{f: None for f in _WORKLOAD_FIELDS}},
    )


VARIANTS: dict[str, Variant] = {
    "uniform": Variant("uniform", "uniform power U[0.1, 1], 1.5 GB updates"),
    "trace": Variant("trace", "Google PowerData 2019 trace power, 1.5 GB", {"power": "trace"}),
    "size-1gb": Variant("size-1gb", "uniform power, 1 GB updates", {"update_size_gb": 1.0}),
    "size-2gb": Variant("size-2gb", "uniform power, 2 GB updates", {"update_size_gb": 2.0}),
    # Fig. 11 compares accuracy per round, so every run trains the same number of rounds
    "rounds": Variant(
        "rounds",
        "uniform power, a fixed number of rounds (target never stops a run)",
        {"target_accuracy": 1.0, "max_rounds": 15, "max_sim_hours": 0.0},
        budget=False,
    ),
    "speech": _workload_variant("speech"),
    "shakespeare": _workload_variant("shakespeare"),
}

SUITES: dict[str, Suite] = {
    "8": Suite(
        "8",
        "Static-k sweep and k*",
        "Paper Fig. 8: time to 45 % accuracy on EMNIST against the number of static top-k "
        "sites (ranked by the power-to-cost score). The curve is convex; its minimum, "
        "k* = 70 of 100 sites, is marked with a dashed red line.",
        ("uniform",),
        ("sweep",),
    ),
    "9": Suite(
        "9",
        "Policy comparison, uniform power",
        "Paper Fig. 9: time to accuracy per policy on EMNIST with uniform power: PowerTrip "
        "0.65 h, static k* = 70 1.16 h, centralized at 25 % power 1.33 h (at 50 % similar to "
        "PowerTrip), highest power 1.27 h, random 1.49 h, fixed radius 1000 mi (22 sites) 2.9 h.",
        ("uniform",),
        FIG9_ARMS,
    ),
    "10": Suite(
        "10",
        "Sites per round over time: PowerTrip vs static k*",
        "Paper Fig. 10: number of sites selected against elapsed training time. Static k* = 70 "
        "is a horizontal dashed line from the first round; PowerTrip starts with a few "
        "high-power, low-latency sites and adds more as training progresses; the shaded area "
        "between them is the static policy's 'site overhead'.",
        ("uniform",),
        ("powertrip", "sweep", "static-k*"),
    ),
    "11": Suite(
        "11",
        "Accuracy gain of 50 and 100 sites over 10 per round",
        "Paper Fig. 11: accuracy gain of the 50- and 100-site configurations over 10 sites, "
        "per round. In the first 10-20 rounds the gain is small; more sites converge faster "
        "only later.",
        ("rounds",),
        ("static-k@0.1", "static-k@0.5", "static-k@1.0"),
    ),
    "12": Suite(
        "12",
        "Policy comparison, Google power traces",
        "Paper Fig. 12: as Fig. 9 with spare power from Google's power traces. PowerTrip is "
        "still the fastest: 24 % faster than static k* and 27 % faster than centralized at "
        "25 % power; spare power per site typically peaks at 26-51 % of capacity, so every "
        "policy is slower than with uniform power.",
        ("trace",),
        FIG9_ARMS,
    ),
    "13": Suite(
        "13",
        "Update sizes 1 / 1.5 / 2 GB",
        "Paper Fig. 13: time to accuracy per policy for 1, 1.5 and 2 GB updates. PowerTrip is "
        "fastest at every size; its time grows only from 0.94 h (1 GB) to 1.02 h (2 GB), "
        "23.3 % better than static and centralized (both 1.33 h) at 2 GB.",
        ("size-1gb", "uniform", "size-2gb"),
        ("powertrip", "sweep", "static-k*", "centralized-25"),
    ),
    "14": Suite(
        "14",
        "Workloads: Speech Commands and Shakespeare",
        "Paper Fig. 14: PowerTrip against static k* on Google Speech Commands (KWT-1) and "
        "Shakespeare (LSTM): 32 % and 19 % faster respectively.",
        ("speech", "shakespeare"),
        ("powertrip", "sweep", "static-k*"),
    ),
}

#: --quick: a tiny set-up for tests and smoke checks (any workload, usually synthetic)
QUICK_OVERRIDES: dict[str, Any] = {
    "num_sites": 10,
    "max_rounds": 6,
    "eval_samples": 200,
    "target_accuracy": 0.35,
    "checkpoint": False,
}


class ReproduceError(ValueError):
    """Bad reproduce arguments; the message names the option and the allowed values."""


# ---- arms ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arm:
    """One concrete run of a group: a policy with its parameters."""

    name: str
    policy: str
    params: tuple[tuple[str, float], ...] = ()


def sweep_ks(num_sites: int, fractions: Sequence[float] = SWEEP_FRACTIONS) -> list[int]:
    """The static k values of the sweep for this many sites (distinct, increasing)."""
    return sorted({max(1, min(num_sites, round(f * num_sites))) for f in fractions})


def static_arm(k: int) -> Arm:
    return Arm(f"static-k{k}", "static", (("k", float(k)),))


def expand_arms(specs: Sequence[str], num_sites: int, ks: Sequence[int]) -> list[Arm]:
    """Concrete runs for arm specs, PowerTrip first (its time sets the others' cut-off).

    'static-k*' needs no run of its own (it is a sweep arm) but pulls the sweep in."""
    arms: list[Arm] = []
    wanted = list(specs)
    if "static-k*" in wanted and "sweep" not in wanted:
        wanted.append("sweep")
    for spec in wanted:
        if spec == "static-k*":
            continue
        if spec == "sweep":
            arms.extend(static_arm(k) for k in ks)
        elif spec.startswith("static-k@"):
            fraction = float(spec.removeprefix("static-k@"))
            arms.append(static_arm(max(1, min(num_sites, round(fraction * num_sites)))))
        else:
            arms.append(Arm(spec, spec))
    unique = list(dict.fromkeys(arms))
    return sorted(unique, key=lambda a: a.name != "powertrip")


def suite_arm_names(suite: Suite, num_sites: int, ks: Sequence[int]) -> list[str]:
    """Arm names shown in a suite's table ('static-k*' kept as a name)."""
    names = []
    for spec in suite.arms:
        if spec == "sweep":
            names.extend(static_arm(k).name for k in ks)
        elif spec.startswith("static-k@"):
            names.extend(a.name for a in expand_arms([spec], num_sites, ks))
        else:
            names.append(spec)
    return list(dict.fromkeys(names))


# ---- planning --------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSpec:
    variant: str
    seed: int
    arm: Arm

    def path(self, out: Path) -> Path:
        return run_path(out, self.variant, self.seed, self.arm.name)


def run_path(out: Path, variant: str, seed: int, arm: str) -> Path:
    return out / "runs" / variant / f"seed{seed}" / arm


def parse_figures(text: str) -> list[str]:
    """'9', '8,9' or 'all' -> figure keys; unknown figures name the allowed ones."""
    if text.strip() == "all":
        return list(SUITES)
    figures = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in figures if f not in SUITES]
    if unknown or not figures:
        raise ReproduceError(
            f"--figure: {', '.join(unknown) or repr(text)} is not a reproduced figure; "
            f"allowed: {', '.join(SUITES)} or all"
        )
    return figures


def plan(
    figures: Sequence[str], seeds: Sequence[int], num_sites: int, ks: Sequence[int]
) -> list[RunSpec]:
    """Every run the figures need, deduplicated, grouped by (variant, seed), PowerTrip first."""
    specs: dict[tuple[str, int], list[Arm]] = {}
    for figure in figures:
        suite = SUITES[figure]
        for variant in suite.variants:
            for seed in seeds:
                group = specs.setdefault((variant, seed), [])
                for arm in expand_arms(suite.arms, num_sites, ks):
                    if arm not in group:
                        group.append(arm)
    runs = []
    for (variant, seed), arms in specs.items():
        ordered = sorted(arms, key=lambda a: a.name != "powertrip")
        runs.extend(RunSpec(variant, seed, arm) for arm in ordered)
    return runs


def variant_config(
    base: RunConfig, variant: Variant, seed: int, *, force_workload: bool = False
) -> RunConfig:
    """The base config with the variant's overrides and the seed, workload defaults filled.

    force_workload (`--workload`): every variant keeps the base workload. A variant's round
    limit never exceeds the base's (so --quick stays quick)."""
    from powertrip.workloads import get_workload

    config = dataclasses.replace(base, policy_params={}, seed=seed)
    for key, value in variant.overrides.items():
        if force_workload and (key == "workload" or (key in _WORKLOAD_FIELDS and value is None)):
            continue
        if key == "max_rounds":
            value = min(int(value), base.max_rounds)
        setattr(config, key, value)
    config.validate()
    workload = get_workload(config.workload)
    return config.resolved(workload.defaults)


def arm_config(config: RunConfig, arm: Arm) -> RunConfig:
    return dataclasses.replace(config, policy=arm.policy, policy_params=dict(arm.params))


# ---- resumability ----------------------------------------------------------------------
#: settings that may differ between a finished run and a re-plan without invalidating it
_VOLATILE = (
    "max_sim_hours",
    "workers",
    "threads_per_worker",
    "train_threads",
    "data_dir",
    "round_deadline_s",
)


def is_done(run_dir: Path, config: RunConfig) -> bool:
    """True when run_dir holds a finished run ('done' summary) with the same settings."""
    summary_file = run_dir / "summary.json"
    config_file = run_dir / "run-config.yaml"
    if not summary_file.is_file() or not config_file.is_file():
        return False
    try:
        summary = json.loads(summary_file.read_text())
        stored = yaml.safe_load(config_file.read_text()) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return False
    if summary.get("status") != "done":
        return False
    wanted = config.to_dict()
    return all(stored.get(k) == v for k, v in wanted.items() if k not in _VOLATILE)


# ---- running ---------------------------------------------------------------------------
@dataclass
class RunLog:
    spec: RunSpec
    status: str  # ran | skipped | failed
    seconds: float = 0.0
    message: str = ""


def execute(
    runs: Sequence[RunSpec],
    out: Path,
    base: RunConfig,
    *,
    budget_factor: float,
    force_workload: bool = False,
    show_progress: bool = True,
    log=print,
) -> list[RunLog]:
    """Run what is not done yet, group by group (one profiler + policy per group)."""
    from powertrip.experiments.launcher import Deployment
    from powertrip.experiments.runner import RunError, run_once

    logs: list[RunLog] = []
    groups: dict[tuple[str, int], list[RunSpec]] = {}
    for spec in runs:
        groups.setdefault((spec.variant, spec.seed), []).append(spec)
    for (variant_name, seed), specs in groups.items():
        variant = VARIANTS[variant_name]
        config = variant_config(base, variant, seed, force_workload=force_workload)
        todo = [s for s in specs if not is_done(s.path(out), arm_config(config, s.arm))]
        best: dict[str, float] = {}
        for spec in specs:
            if spec not in todo:
                logs.append(RunLog(spec, "skipped"))
                log(f"skip {variant_name} seed {seed} {spec.arm.name}: already done")
                _record(best, spec, out)
        if not todo:
            continue
        group_dir = out / "runs" / variant_name / f"seed{seed}"
        group_dir.mkdir(parents=True, exist_ok=True)
        config.write_yaml(group_dir / "base-config.yaml")
        with Deployment(group_dir / "base-config.yaml", group_dir / "logs") as deployment:
            for spec in todo:
                run_config = arm_config(config, spec.arm)
                reference = best.get("powertrip", best.get("any"))
                if variant.budget and budget_factor and reference is not None:
                    cap_h = budget_factor * reference / 3600
                    if not run_config.max_sim_hours or cap_h < run_config.max_sim_hours:
                        run_config.max_sim_hours = cap_h
                run_dir = spec.path(out)
                if run_dir.exists():
                    shutil.rmtree(run_dir)  # an unfinished or outdated run starts afresh
                started = time.monotonic()
                label = f"{variant_name}/s{seed}/{spec.arm.name}"
                try:
                    run_once(
                        run_config, run_dir, deployment, label=label, show_progress=show_progress
                    )
                except RunError as exc:
                    logs.append(RunLog(spec, "failed", time.monotonic() - started, str(exc)))
                    log(f"FAILED {label}: {exc}")
                    continue
                seconds = time.monotonic() - started
                logs.append(RunLog(spec, "ran", seconds))
                log(f"ran {label} in {seconds:.0f} s")
                _record(best, spec, out)
    return logs


def _record(best: dict[str, float], spec: RunSpec, out: Path) -> None:
    """Note a finished run's time to target: PowerTrip's sets the cut-off of the others (every
    claim compares against PowerTrip, so each stays decidable); without it, the best one."""
    try:
        ttt = json.loads((spec.path(out) / "summary.json").read_text()).get("time_to_target_s")
    except (OSError, ValueError):
        return
    if ttt is None:
        return
    if spec.arm.name == "powertrip":
        best["powertrip"] = float(ttt)
    best["any"] = min(best.get("any", math.inf), float(ttt))


# ---- the command -----------------------------------------------------------------------
def base_config(args: Any) -> RunConfig:
    """configs/reproduce.yaml (or --config), with --workload / --quick / --sites applied."""
    path = Path(args.config) if args.config else DEFAULT_CONFIG
    config = RunConfig.from_yaml(path)
    if args.workload:
        config.workload = args.workload
        if args.workload != "femnist":
            for name in _WORKLOAD_FIELDS:
                setattr(config, name, None)
    if args.quick:
        for key, value in QUICK_OVERRIDES.items():
            setattr(config, key, value)
    if args.sites:
        config.num_sites = args.sites
    if args.workers:
        config.workers = args.workers
    if args.data_dir:
        config.data_dir = args.data_dir
    return config.validate()


def main(args: Any) -> int:
    """Plan, run what is missing (unless --report-only), then render every suite."""
    figures = parse_figures(args.figure)
    if args.seeds < 1:
        raise ReproduceError(f"--seeds must be >= 1, got {args.seeds}")
    base = base_config(args)
    seeds = list(range(base.seed, base.seed + args.seeds))
    if args.k:
        try:
            ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
        except ValueError:
            raise ReproduceError(f"--k must be comma-separated integers, got {args.k!r}") from None
        bad = [k for k in ks if not 1 <= k <= base.num_sites]
        if bad or not ks:
            raise ReproduceError(f"--k values must be in 1..{base.num_sites}, got {args.k!r}")
    else:
        ks = sweep_ks(base.num_sites)
    factor = DEFAULT_BUDGET_FACTOR if args.budget_factor is None else args.budget_factor
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta_file = out / "reproduce.json"
    if args.report_only and meta_file.is_file():
        # re-render with the settings the runs were made with
        meta = json.loads(meta_file.read_text())
        print(f"reproduce: rendering from {meta_file} (seeds {meta['seeds']})")
        return _render(out, figures, meta, args, [])
    runs = plan(figures, seeds, base.num_sites, ks)
    from powertrip.workloads import get_workload

    resolved = base.resolved(get_workload(base.workload).defaults)
    meta = {
        "figures": figures,
        "seeds": seeds,
        "sweep_k": ks,
        "budget_factor": factor,
        "quick": bool(args.quick),
        "force_workload": bool(args.workload),
        "base_config": resolved.to_dict(),
        "variants": {v: dataclasses.asdict(VARIANTS[v]) for v in {r.variant for r in runs}},
        "cores": os.cpu_count(),
    }
    meta_file.write_text(json.dumps(meta, indent=2, default=str))
    logs: list[RunLog] = []
    if not args.report_only:
        print(
            f"reproduce: {len(runs)} runs for figure(s) {', '.join(figures)}, "
            f"seeds {seeds}, static k {ks}; output in {out}"
        )
        started = time.monotonic()
        logs = execute(
            runs,
            out,
            base,
            budget_factor=factor,
            force_workload=bool(args.workload),
            show_progress=not args.quiet,
        )
        ran = [r for r in logs if r.status == "ran"]
        print(
            f"reproduce: ran {len(ran)}, skipped {sum(r.status == 'skipped' for r in logs)}, "
            f"failed {sum(r.status == 'failed' for r in logs)} "
            f"in {time.monotonic() - started:.0f} s"
        )
    return _render(out, figures, meta, args, logs)


def _render(
    out: Path, figures: Sequence[str], meta: Mapping[str, Any], args: Any, logs: list[RunLog]
) -> int:
    from powertrip.report.suites import render_suites

    reports = render_suites(out, figures, meta)
    for figure, path in reports.items():
        print(f"figure {figure}: {path}")
    summary = out / "claims.md"
    if summary.exists():
        print(f"summary: {summary}")
    if args.summary:
        target = Path(args.summary)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(summary, target)
        print(f"summary copied to {target}")
    failed = [r for r in logs if r.status == "failed"]
    for r in failed:
        print(
            f"failed: {r.spec.variant} seed {r.spec.seed} {r.spec.arm.name}: {r.message}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def add_arguments(parser: Any) -> None:
    """The `reproduce` subcommand's options (kept here so cli.py stays a thin router)."""
    import argparse

    parser.add_argument(
        "--figure", default="all", help=f"which figure(s): {', '.join(SUITES)}, a comma list or all"
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
    parser.add_argument("--k", help="static-k sweep values (default: 10/20/40/70/100 %% of sites)")
    parser.add_argument(
        "--budget-factor",
        type=float,
        default=None,
        help=f"cut a baseline off at this multiple of PowerTrip's time to target in its set-up "
        f"(default {DEFAULT_BUDGET_FACTOR}; 0 = never)",
    )
    parser.add_argument("--workers", type=int, help="site-worker processes per run")
    parser.add_argument("--data-dir", help="data directory for the workload")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="render reports from finished runs only (with the seeds and settings recorded in "
        "OUT/reproduce.json)",
    )
    parser.add_argument("--summary", help="also copy the summary table (claims.md) here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)


__all__ = [
    "SUITES",
    "VARIANTS",
    "Arm",
    "ConfigError",
    "ReproduceError",
    "RunSpec",
    "Suite",
    "Variant",
    "execute",
    "expand_arms",
    "is_done",
    "main",
    "parse_figures",
    "plan",
    "sweep_ks",
]
