"""`powertrip reproduce`: plan, execute and render the paper's evaluation (§5, Figs. 5-14).

What each figure needs (set-ups, arms, claims, plots) lives in `reproduction.paper`, one
module per figure; the library's planner (`powertrip.app.experiments.plan`) turns figures into
runs, handed the paper's registry (`paper.PAPER`); this module executes what is missing and
calls the renderer. Runs are keyed by (variant, seed, arm) and live in
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from powertrip.app.experiments.execution import Progress, RunLog, execute
from powertrip.app.experiments.plan import (
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
from powertrip.app.experiments.suite import (
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
from powertrip.core.config import ConfigError, RunConfig
from reproduction.paper import PAPER, SUITES, VARIANTS

DEFAULT_SEEDS = 3
DEFAULT_BUDGET_FACTOR = 1.5
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "reproduce.yaml"

#: --quick: a tiny set-up for tests and smoke checks (any workload, usually synthetic)
QUICK_OVERRIDES: dict[str, Any] = {
    "num_sites": 10,
    "max_rounds": 6,
    "eval_samples": 200,
    "target_accuracy": 0.35,
    "checkpoint": False,
}


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
    from powertrip.app.experiments.preflight import check_sites

    check_sites(base)
    for name in dict.fromkeys(r.variant for r in plan(PAPER, figures, seeds, base.num_sites, ks)):
        try:
            config = variant_config(base, VARIANTS[name], base.seed, force_workload=force_workload)
        except (ConfigError, ValueError):
            continue  # a set-up this version cannot run: main reports and skips it
        check_sites(config)


def _specs_of(figures: Sequence[str], only: set[str] | None) -> set[str]:
    """The arm specs of the set-ups a command runs (all of its figures' without --only):
    a narrower command records only the k* it resolved for them, not another set-up's k*
    from fewer seeds."""
    return {
        spec
        for figure in figures
        for variant in SUITES[figure].variants
        if only is None or variant in only
        for spec in SUITES[figure].arms_of(variant)
    }


def _named(text: str | None, planned: Sequence[str]) -> tuple[set[str] | None, list[str]]:
    """A comma-separated choice (--only, --arms): (the names, None when none were given;
    those of them that `planned` lacks)."""
    if not text:
        return None, []
    wanted = {v.strip() for v in text.split(",") if v.strip()}
    return wanted, sorted(wanted - set(planned))


def _only(args: Any, runs: Sequence[RunSpec]) -> set[str] | None:
    """--only: the set-ups to run (None: all the figures need); a name no planned run has
    is refused with the ones it could be."""
    planned = list(dict.fromkeys(r.variant for r in runs))
    wanted, unknown = _named(getattr(args, "only", None), planned)
    if unknown:
        raise ReproduceError(
            f"--only: {', '.join(unknown)} is not a set-up of these figures; they have "
            f"{', '.join(planned) or 'none'}"
        )
    return wanted


def _arms(args: Any, runs: Sequence[RunSpec]) -> set[str] | None:
    """--arms: the policies whose arms to run (None: every arm); a policy no planned run
    has is refused with the ones it could be."""
    planned = sorted({r.arm.policy for r in runs})
    wanted, unknown = _named(getattr(args, "arms", None), planned)
    if unknown:
        raise ReproduceError(
            f"--arms: no planned run uses {', '.join(unknown)}; these set-ups' runs use "
            f"{', '.join(planned) or 'none'}"
        )
    return wanted


def _chosen(
    runs: Sequence[RunSpec], only: set[str] | None, policies: set[str] | None
) -> list[RunSpec]:
    """The runs of the set-ups --only names and the policies --arms names (None: all)."""
    return [
        r
        for r in runs
        if (only is None or r.variant in only) and (policies is None or r.arm.policy in policies)
    ]


def main(args: Any) -> int:
    """Plan, run what is missing in three phases (unless --report-only), then render."""
    figures = parse_figures(PAPER, args.figure)
    if args.seeds < 1:
        raise ReproduceError(f"--seeds must be >= 1, got {args.seeds}")
    runs_only = bool(getattr(args, "runs_only", False))
    jobs = int(getattr(args, "jobs", 1))
    if jobs < 1:
        raise ReproduceError(f"--jobs must be >= 1, got {jobs}")
    ray = getattr(args, "ray", None)
    if ray and jobs > 1:
        raise ReproduceError("--ray and --jobs: choose one (--ray runs every group at once)")
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
    runs = plan(PAPER, figures, seeds, base.num_sites, ks)
    only = _only(args, runs)
    policies = _arms(args, _chosen(runs, only, None))
    runs = _chosen(runs, only, policies)
    force = bool(args.workload)
    unsupported = check_variants(
        base, list(dict.fromkeys(r.variant for r in runs)), variants=VARIANTS, force_workload=force
    )
    for name, why in unsupported.items():
        print(f"reproduce: set-up {name} is not run: {why}", file=sys.stderr)
    runs = [r for r in runs if r.variant not in unsupported]
    if getattr(args, "plan", False):
        from powertrip.app.experiments.cost import estimate, plan_lines

        costs, fit = estimate(
            runs, out, base, variants=VARIANTS, force_workload=bool(args.workload)
        )
        cores = base.train_threads or os.cpu_count() or 1
        print("\n".join(plan_lines(costs, fit, min(cores, os.cpu_count() or 1))))
        print("plan: the refinement's midpoints and the deferred static-k* arms are planned "
              "once the sweep they depend on has finished, and are not counted")  # fmt: skip
        return 0
    from powertrip.core.workloads import get_workload

    resolved = base.resolved(get_workload(base.workload, base.peft).defaults)
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
    if meta_file.is_file():  # a narrower command keeps what a wider one recorded
        meta = merged_record(json.loads(meta_file.read_text()), meta)
    if not runs_only:  # a helper leaves the record to the command that started it
        meta_file.write_text(json.dumps(meta, indent=2, default=str))
    logs: list[RunLog] = []
    if not args.report_only:
        static_k = sorted(
            {int(v) for r in runs if r.arm.policy == "static" for n, v in r.arm.params if n == "k"}
        )
        midpoints = " (then the midpoints beside k*)" if set(ks) <= set(static_k) else ""
        print(
            f"reproduce: {len(runs)} runs for figure(s) {', '.join(figures)}, seeds {seeds}, "
            f"static k {static_k}{midpoints}; output in {out}"
            + (f"; {jobs} processes" if jobs > 1 else "")
        )
        started = time.monotonic()
        common = {
            "variants": VARIANTS,
            "budget_factor": factor,
            "force_workload": force,
            "show_progress": not args.quiet,
            "progress": Progress(),
            "ray": ray,
            "ray_gpus": float(getattr(args, "ray_gpus", 0.0) or 0.0),
        }
        from powertrip.app.experiments.jobs import start_helpers, wait_helpers

        helpers = start_helpers(getattr(args, "argv", []), jobs - 1, out) if jobs > 1 else []
        for helper in helpers:
            print(f"reproduce: {helper.name} started, its log: {helper.log_path}")
        logs = execute(runs, out, base, **common)
        helper_failures = wait_helpers(helpers)
        for failure in helper_failures:
            print(f"reproduce: {failure}", file=sys.stderr)
        if runs_only:
            return _ran_summary(logs, started) or int(bool(helper_failures))
        held = [r.spec for r in logs if r.status == "busy"]
        if held and helpers:  # what the helpers held is done now, or left for us to run
            logs = [r for r in logs if r.status != "busy"]
            logs += execute(held, out, base, **{**common, "log": _quiet_skips})
        busy = [r for r in logs if r.status == "busy"]
        if busy:
            print(
                f"reproduce: {len(busy)} run(s) left to another reproduce that holds their "
                "group; the refinement, the deferred arms and the reports need them: run the "
                "same command again once it has finished",
                file=sys.stderr,
            )
        if not getattr(args, "no_refine", False):
            refined, found = refine_runs(PAPER, out, figures, seeds, ks, base.num_sites)
            refined = _chosen(refined, only, policies)
            found = {v: ks for v, ks in found.items() if only is None or v in only}
            meta["refined"] = {**meta.get("refined", {}), **found}  # kept: merged_record
            if refined:
                print(f"reproduce: refining the static-k sweep: {found}")
                logs += execute(refined, out, base, **common)
        deferred, chosen = deferred_runs(PAPER, out, figures, seeds, ks, base.num_sites)
        deferred = _chosen(deferred, only, policies)
        deferred = [r for r in deferred if r.variant not in unsupported]
        own_specs = _specs_of(figures, only)
        chosen = {spec: k for spec, k in chosen.items() if spec in own_specs}
        meta["deferred"] = {**meta.get("deferred", {}), **chosen}
        for spec, k in chosen.items():
            print(f"reproduce: {spec} -> " + (f"static-k{k}" if k else "no k* yet (not run)"))
        logs += execute(deferred, out, base, **common)
        meta_file.write_text(json.dumps(meta, indent=2, default=str))
        _ran_summary(logs, started)
        if helper_failures:
            return 1
    return _render(out, figures, meta, args, logs)


def merged_record(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """OUT/reproduce.json after another command on the same OUT: the union of both
    commands' figures, seeds, set-ups, refinements and resolved k*, so `--figure 8` after
    `--figure all` does not leave `--report-only` without the other figures' set-ups, and
    `--k 70,100` (a few sweep points run by another process) does not shrink the grid the
    reports read. The newer command's base config and options win (runs record their own
    config)."""
    merged = {**old, **new}
    order = list(SUITES)
    figures = set(old.get("figures") or ()) | set(new.get("figures") or ())
    merged["figures"] = sorted(figures, key=lambda f: order.index(f) if f in order else len(order))
    for key in ("seeds", "sweep_k"):
        if key in old or key in new:
            merged[key] = sorted(set(old.get(key) or ()) | set(new.get(key) or ()))
    for key in ("variants", "unsupported", "refined", "deferred"):
        if key in old or key in new:
            merged[key] = {**(old.get(key) or {}), **(new.get(key) or {})}
    return merged


def _quiet_skips(line: str) -> None:
    """Progress lines, without one 'skip ...: already done' per run a helper made."""
    if not line.startswith("skip "):
        print(line)


def _ran_summary(logs: Sequence[RunLog], started: float) -> int:
    """Print 'ran N, skipped N, ...'; 1 if a run failed, else 0."""
    counts = {s: sum(r.status == s for r in logs) for s in ("ran", "skipped", "busy", "failed")}
    busy = f"left to another process {counts['busy']}, " if counts["busy"] else ""
    print(
        f"reproduce: ran {counts['ran']}, skipped {counts['skipped']}, {busy}"
        f"failed {counts['failed']} in {time.monotonic() - started:.0f} s"
    )
    return 1 if counts["failed"] else 0


def _render(
    out: Path, figures: Sequence[str], meta: Mapping[str, Any], args: Any, logs: list[RunLog]
) -> int:
    from powertrip.app.experiments.sitetables import share_all
    from reproduction.paper.render import render_all

    saved = share_all(out / "runs")
    if saved:
        print(f"reproduce: each seed folder's site table kept once ({saved / 1e6:.1f} MB saved)")
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
        shutil.copyfile(out / "INDEX.md", target.parent / "INDEX.md")
        print(f"summary copied to {target}, with INDEX.md beside it")
    failed = [r for r in logs if r.status == "failed"]
    for r in failed:
        print(
            f"failed: {r.spec.variant} seed {r.spec.seed} {r.spec.arm.name}: {r.message}",
            file=sys.stderr,
        )
    return 1 if failed else 0


__all__ = [
    "PAPER",
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
