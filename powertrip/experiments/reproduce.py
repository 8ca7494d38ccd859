"""`powertrip reproduce`: plan, execute and render the paper's evaluation (§5, Figs. 6-14).

What each figure needs (set-ups, arms, claims, plots) lives in `powertrip.paper`, one module
per figure; `powertrip.experiments.plan` turns figures into runs; this module executes what
is missing and calls the renderer. Runs are keyed by (variant, seed, arm) and live in
OUT/runs/<variant>/seed<s>/<arm>/, so figures that share a set-up share its runs, and a run
whose summary.json says "done" with the same settings is never run again: a killed
reproduce picks up where it stopped.

Three phases, each resumable: (1) every planned run; (2) the static-k sweep's refinement
(midpoints beside the grid's k*, once the grid finished in every seed); (3) arms that need
another set-up's k* ('static-k@uniform*' of the ablation), resolved from its finished sweep.

Each (variant, seed) group runs PowerTrip first; every other arm of the group, in every
phase, is cut off once its simulated time passes `budget_factor` x PowerTrip's time to
target in the group (the best time so far if PowerTrip missed it), so a baseline's time is
then a lower bound and the claims table says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powertrip.config import ConfigError, RunConfig
from powertrip.experiments.plan import (
    ReproduceError,
    arm_config,
    check_variants,
    deferred_runs,
    group_reference,
    is_done,
    parse_figures,
    plan,
    refine_runs,
    variant_config,
)
from powertrip.experiments.suite import (
    WORKLOAD_FIELDS,
    Arm,
    RunSpec,
    Suite,
    Variant,
    expand_arms,
    run_path,
    static_arm,
    sweep_ks,
)
from powertrip.paper import SUITES, VARIANTS

DEFAULT_SEEDS = 3
DEFAULT_BUDGET_FACTOR = 1.5
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "reproduce.yaml"

#: --quick: a tiny set-up for tests and smoke checks (any workload, usually synthetic)
QUICK_OVERRIDES: dict[str, Any] = {
    "num_sites": 10,
    "max_rounds": 6,
    "eval_samples": 200,
    "target_accuracy": 0.35,
    "checkpoint": False,
}


# ---- running ---------------------------------------------------------------------------
@dataclass
class RunLog:
    spec: RunSpec
    status: str  # ran | skipped | failed
    seconds: float = 0.0
    message: str = ""


@dataclass
class Progress:
    """'run i/N' with an ETA from the mean duration of the runs made so far (phases add
    to N as they learn what they need)."""

    total: int = 0
    started: int = 0
    seconds: list[float] = dataclasses.field(default_factory=list)

    def line(self, label: str) -> str:
        self.started += 1
        text = f"run {self.started}/{self.total}: {label}"
        if self.seconds:
            mean = sum(self.seconds) / len(self.seconds)
            text += f" (ETA {_duration(mean * (self.total - self.started + 1))})"
        return text


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def execute(
    runs: Sequence[RunSpec],
    out: Path,
    base: RunConfig,
    *,
    budget_factor: float,
    force_workload: bool = False,
    show_progress: bool = True,
    log: Callable[[str], Any] = print,
    progress: Progress | None = None,
) -> list[RunLog]:
    """Run what is not done yet, group by group (one profiler + policy per group)."""
    from powertrip.experiments.launcher import Deployment
    from powertrip.experiments.runner import ChildExited, RunError, run_once

    progress = progress if progress is not None else Progress()
    logs: list[RunLog] = []
    groups: dict[tuple[str, int], list[RunSpec]] = {}
    for spec in runs:
        groups.setdefault((spec.variant, spec.seed), []).append(spec)
    todo: dict[tuple[str, int], tuple[RunConfig, list[RunSpec]]] = {}
    for (variant_name, seed), specs in groups.items():
        variant = VARIANTS[variant_name]
        config = variant_config(base, variant, seed, force_workload=force_workload)
        missing = [s for s in specs if not is_done(s.path(out), arm_config(config, s.arm, variant))]
        for spec in specs:
            if spec not in missing:
                logs.append(RunLog(spec, "skipped"))
                log(f"skip {variant_name} seed {seed} {spec.arm.name}: already done")
        if missing:
            todo[(variant_name, seed)] = (config, missing)
    progress.total += sum(len(m) for _, m in todo.values())
    for (variant_name, seed), (config, missing) in todo.items():
        variant = VARIANTS[variant_name]
        group_dir = out / "runs" / variant_name / f"seed{seed}"
        group_dir.mkdir(parents=True, exist_ok=True)
        config.write_yaml(group_dir / "base-config.yaml")
        with Deployment(group_dir / "base-config.yaml", group_dir / "logs") as deployment:
            for spec in missing:
                run_config = arm_config(config, spec.arm, variant)
                reference = group_reference(out, variant_name, seed)
                if variant.budget and budget_factor and reference is not None:
                    cap_h = budget_factor * reference / 3600
                    if not run_config.max_sim_hours or cap_h < run_config.max_sim_hours:
                        run_config.max_sim_hours = cap_h
                run_dir = spec.path(out)
                if run_dir.exists():
                    shutil.rmtree(run_dir)  # an unfinished or outdated run starts afresh
                label = f"{variant_name}/s{seed}/{spec.arm.name}"
                log(progress.line(label))
                started = time.monotonic()
                try:
                    run_once(
                        run_config, run_dir, deployment, label=label, show_progress=show_progress
                    )
                except ChildExited:
                    raise  # a process died under the run: stop (exit 3), not the next run
                except RunError as exc:
                    logs.append(RunLog(spec, "failed", time.monotonic() - started, str(exc)))
                    log(f"FAILED {label}: {exc}")
                    continue
                seconds = time.monotonic() - started
                progress.seconds.append(seconds)
                logs.append(RunLog(spec, "ran", seconds))
                log(f"ran {label} in {seconds:.0f} s")
    return logs


# ---- the command -----------------------------------------------------------------------
def base_config(args: Any) -> RunConfig:
    """configs/reproduce.yaml (or --config), with --workload / --quick / --sites applied."""
    path = Path(args.config) if args.config else DEFAULT_CONFIG
    config = RunConfig.from_yaml(path)
    if args.workload:
        config.workload = args.workload
        if args.workload != "femnist":
            for name in WORKLOAD_FIELDS:
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


def _sweep(args: Any, base: RunConfig) -> list[int]:
    if not args.k:
        return sweep_ks(base.num_sites)
    try:
        ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    except ValueError:
        raise ReproduceError(f"--k must be comma-separated integers, got {args.k!r}") from None
    bad = [k for k in ks if not 1 <= k <= base.num_sites]
    if bad or not ks:
        raise ReproduceError(f"--k values must be in 1..{base.num_sites}, got {args.k!r}")
    return ks


def check_sizes(
    base: RunConfig,
    figures: Sequence[str],
    seeds: Sequence[int],
    ks: Sequence[int],
    *,
    force_workload: bool = False,
) -> None:
    """Every set-up's site count against its workload's training samples (one per site),
    before a directory is made or a service started: a ConfigError naming num_sites
    (--sites) rather than a site worker that dies on the partition."""
    from powertrip.experiments.commands import check_sites

    check_sites(base)
    for name in dict.fromkeys(r.variant for r in plan(figures, seeds, base.num_sites, ks)):
        try:
            config = variant_config(base, VARIANTS[name], base.seed, force_workload=force_workload)
        except (ConfigError, ValueError):
            continue  # a set-up this version cannot run: main reports and skips it
        check_sites(config)


def main(args: Any) -> int:
    """Plan, run what is missing in three phases (unless --report-only), then render."""
    figures = parse_figures(args.figure)
    if args.seeds < 1:
        raise ReproduceError(f"--seeds must be >= 1, got {args.seeds}")
    base = base_config(args)
    seeds = list(range(base.seed, base.seed + args.seeds))
    ks = _sweep(args, base)
    factor = DEFAULT_BUDGET_FACTOR if args.budget_factor is None else args.budget_factor
    out = Path(args.out)
    if not args.report_only:
        check_sizes(base, figures, seeds, ks, force_workload=bool(args.workload))
    out.mkdir(parents=True, exist_ok=True)
    meta_file = out / "reproduce.json"
    if args.report_only and meta_file.is_file():
        # re-render with the settings the runs were made with
        meta = json.loads(meta_file.read_text())
        print(f"reproduce: rendering from {meta_file} (seeds {meta['seeds']})")
        return _render(out, figures, meta, args, [])
    runs = plan(figures, seeds, base.num_sites, ks)
    force = bool(args.workload)
    unsupported = check_variants(
        base, list(dict.fromkeys(r.variant for r in runs)), force_workload=force
    )
    for name, why in unsupported.items():
        print(f"reproduce: set-up {name} is not run: {why}", file=sys.stderr)
    runs = [r for r in runs if r.variant not in unsupported]
    from powertrip.workloads import get_workload

    resolved = base.resolved(get_workload(base.workload).defaults)
    meta: dict[str, Any] = {
        "figures": figures,
        "seeds": seeds,
        "sweep_k": ks,
        "budget_factor": factor,
        "quick": bool(args.quick),
        "force_workload": force,
        "base_config": resolved.to_dict(),
        "variants": {v: dataclasses.asdict(VARIANTS[v]) for v in {r.variant for r in runs}},
        "unsupported": unsupported,
        "cores": os.cpu_count(),
    }
    meta_file.write_text(json.dumps(meta, indent=2, default=str))
    logs: list[RunLog] = []
    if not args.report_only:
        print(
            f"reproduce: {len(runs)} runs for figure(s) {', '.join(figures)}, seeds {seeds}, "
            f"static k {ks} (then the midpoints beside k*); output in {out}"
        )
        started = time.monotonic()
        common = {
            "budget_factor": factor,
            "force_workload": force,
            "show_progress": not args.quiet,
            "progress": Progress(),
        }
        logs = execute(runs, out, base, **common)
        if not getattr(args, "no_refine", False):
            refined, meta["refined"] = refine_runs(out, figures, seeds, ks)
            if refined:
                print(f"reproduce: refining the static-k sweep: {meta['refined']}")
                logs += execute(refined, out, base, **common)
        deferred, chosen = deferred_runs(out, figures, seeds, ks)
        deferred = [r for r in deferred if r.variant not in unsupported]
        meta["deferred"] = chosen
        for spec, k in chosen.items():
            print(f"reproduce: {spec} -> " + (f"static-k{k}" if k else "no k* yet (not run)"))
        logs += execute(deferred, out, base, **common)
        meta_file.write_text(json.dumps(meta, indent=2, default=str))
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
    from powertrip.paper.render import render_all

    reports = render_all(out, figures, meta)
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


__all__ = [
    "SUITES",
    "VARIANTS",
    "Arm",
    "ConfigError",
    "Progress",
    "ReproduceError",
    "RunSpec",
    "Suite",
    "Variant",
    "arm_config",
    "check_sizes",
    "check_variants",
    "deferred_runs",
    "execute",
    "expand_arms",
    "group_reference",
    "is_done",
    "main",
    "parse_figures",
    "plan",
    "refine_runs",
    "run_path",
    "static_arm",
    "sweep_ks",
    "variant_config",
]
