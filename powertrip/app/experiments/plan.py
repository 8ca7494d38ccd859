"""What a suite run makes (`powertrip reproduce`): suites to runs, set-up configs, what is done.

Three phases, each resumable: `plan` (every run the figures name), `refine_runs` (the
midpoints beside the static-k sweep grid's k*, once the grid finished in every seed) and
`deferred_runs` (arms that need another set-up's k*, such as the ablation's
'static-k@uniform*'). `group_reference` is the time every arm of a (variant, seed) group is
cut off against. The suites come in as a `Registry` (suite.py): the planner names none itself.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from powertrip.app.experiments.suite import (
    WORKLOAD_FIELDS,
    Arm,
    Registry,
    RunSpec,
    Variant,
    deferred_source,
    expand_arms,
    static_arm,
    variant_ks,
)
from powertrip.core import runfiles
from powertrip.core.config import ConfigError, RunConfig, experiment_differences


class ReproduceError(ValueError):
    """Bad reproduce arguments; the message names the option and the allowed values."""


# ---- planning --------------------------------------------------------------------------
def parse_figures(registry: Registry, text: str) -> list[str]:
    """'9', '8,9', '6' (= '7' = '6-7') or 'all' -> canonical figure keys, deduplicated."""
    if text.strip() == "all":
        return list(registry.suites)
    figures = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in figures if f not in registry.keys and f not in registry.suites]
    if unknown or not figures:
        raise ReproduceError(
            f"--figure: {', '.join(unknown) or repr(text)} is not a reproduced figure; "
            f"allowed: {', '.join(registry.keys)} or all"
        )
    return list(dict.fromkeys(registry.canonical(f) for f in figures))


def plan(
    registry: Registry,
    figures: Sequence[str],
    seeds: Sequence[int],
    num_sites: int,
    ks: Sequence[int],
) -> list[RunSpec]:
    """Every run the figures need now, deduplicated, grouped by (variant, seed), PowerTrip
    first. 'static-k@V*' arms are left to deferred_runs()."""
    specs: dict[tuple[str, int], list[Arm]] = {}
    for figure in figures:
        suite = registry.suites[registry.canonical(figure)]
        for variant in suite.variants:
            grid = variant_ks(registry.variants[variant], ks, num_sites)
            for seed in seeds:
                group = specs.setdefault((variant, seed), [])
                for arm in expand_arms(suite.arms_of(variant), num_sites, grid, variant):
                    if arm not in group:
                        group.append(arm)
    runs = []
    for (variant, seed), arms in specs.items():
        ordered = sorted(arms, key=lambda a: a.name != "powertrip")
        runs.extend(RunSpec(variant, seed, arm) for arm in ordered)
    return runs


def swept_variants(registry: Registry, figures: Sequence[str]) -> list[str]:
    """Set-ups whose static-k sweep some figure runs (they get the refinement step)."""
    found = []
    for figure in figures:
        suite = registry.suites[registry.canonical(figure)]
        for variant in suite.variants:
            specs = suite.arms_of(variant)
            sweeps = "sweep" in specs or "static-k*" in specs
            if sweeps or any(deferred_source(s) == variant for s in specs):
                found.append(variant)
    return list(dict.fromkeys(found))


def refine_runs(
    registry: Registry,
    out: Path,
    figures: Sequence[str],
    seeds: Sequence[int],
    ks: Sequence[int],
    num_sites: int,
) -> tuple[list[RunSpec], dict[str, list[int]]]:
    """Phase 2: the midpoints beside each swept set-up's grid k*, for every seed (none
    until the grid finished in every seed)."""
    runs, found = [], {}
    for variant in swept_variants(registry, figures):
        grid = variant_ks(registry.variants[variant], ks, num_sites)
        extra = registry.refinement(out, variant, seeds, grid)
        if extra:
            found[variant] = extra
            runs.extend(RunSpec(variant, s, static_arm(k)) for s in seeds for k in extra)
    return _grouped(runs), found


def deferred_runs(
    registry: Registry,
    out: Path,
    figures: Sequence[str],
    seeds: Sequence[int],
    ks: Sequence[int],
    num_sites: int,
) -> tuple[list[RunSpec], dict[str, int | None]]:
    """Phase 3: 'static-k@V*' arms as static k = V's k* (grid and refinement); an arm
    whose V has no k* yet is reported and left for a later invocation."""
    runs, resolved = [], {}
    for figure in figures:
        suite = registry.suites[registry.canonical(figure)]
        for variant in suite.variants:
            for spec in suite.arms_of(variant):
                source = deferred_source(spec)
                if not source or source == variant:
                    continue
                if spec not in resolved:
                    grid = variant_ks(registry.variants[source], ks, num_sites)
                    resolved[spec] = registry.kstar(out, source, seeds, grid)
                k = resolved[spec]
                if k is not None:
                    runs.extend(RunSpec(variant, s, static_arm(k)) for s in seeds)
    return _grouped(list(dict.fromkeys(runs))), resolved


def _grouped(runs: Sequence[RunSpec]) -> list[RunSpec]:
    """Runs ordered group by group (one deployment per group), order within kept."""
    groups: dict[tuple[str, int], list[RunSpec]] = {}
    for spec in runs:
        groups.setdefault((spec.variant, spec.seed), []).append(spec)
    return [spec for group in groups.values() for spec in group]


def variant_config(
    base: RunConfig, variant: Variant, seed: int, *, force_workload: bool = False
) -> RunConfig:
    """The base config with the variant's overrides and the seed, workload defaults filled.

    force_workload (`--workload`): every variant keeps the base workload. A variant's round
    limit never exceeds the base's (so --quick stays quick). An override this RunConfig
    does not know is a ConfigError (the set-up is reported as not supported)."""
    from powertrip.core.workloads import get_workload

    config = dataclasses.replace(base, policy_params={}, seed=seed)
    known = set(RunConfig.field_names())
    for key, value in variant.overrides.items():
        if key not in known:
            raise ConfigError(f"set-up {variant.name}: {key} is not a setting of this version")
        if force_workload and (key == "workload" or (key in WORKLOAD_FIELDS and value is None)):
            continue
        if key == "max_rounds":
            value = min(int(value), base.max_rounds)
        setattr(config, key, value)
    config.validate()
    workload = get_workload(config.workload, config.peft)
    return config.resolved(workload.defaults)


def arm_config(config: RunConfig, arm: Arm, variant: Variant | None = None) -> RunConfig:
    """The group's config for one arm: its policy, its parameters and the set-up's extra
    parameters for that policy (e.g. a set-up that runs `adaptive` with other parameters)."""
    params = dict(arm.params)
    if variant is not None:
        params.update(variant.arm_params.get(arm.policy, {}))
    return dataclasses.replace(config, policy=arm.policy, policy_params=params)


def check_variants(
    base: RunConfig,
    names: Sequence[str],
    *,
    variants: Mapping[str, Variant],
    force_workload: bool = False,
) -> dict[str, str]:
    """Set-ups this version cannot run (an unknown or invalid setting), with the reason."""
    bad = {}
    for name in names:
        try:
            variant_config(base, variants[name], base.seed, force_workload=force_workload)
        except (ConfigError, ValueError) as exc:
            bad[name] = str(exc)
    return bad


# ---- resumability ----------------------------------------------------------------------


#: the arm every other arm of a group is measured (and cut off) against; never cut itself
REFERENCE_ARM = "powertrip"


def arm_cap_h(arm: str, reference_s: float | None, budget_factor: float) -> float | None:
    """The simulated-time cap of an arm: budget_factor x the group's reference time, except
    for the reference arm, which must run to its own target (a cap from the best baseline
    would turn PowerTrip's time into a lower bound, and every claim against it with it)."""
    if arm == REFERENCE_ARM or not budget_factor or reference_s is None:
        return None
    return budget_factor * reference_s / 3600


def is_done(run_dir: Path, config: RunConfig) -> bool:
    """True when run_dir holds a finished run ('done' summary) with the same settings. A
    reference run that a time budget stopped is not done when none applies to it now."""
    summary_file = run_dir / runfiles.SUMMARY
    config_file = run_dir / runfiles.REQUESTED_CONFIG
    if not summary_file.is_file() or not config_file.is_file():
        return False
    try:
        summary = json.loads(summary_file.read_text())
        stored = yaml.safe_load(config_file.read_text()) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return False
    if summary.get("status") != "done":
        return False
    if (
        run_dir.name == REFERENCE_ARM
        and summary.get("stopped_reason") == "time_budget"
        and not config.max_sim_hours
    ):
        return False
    wanted = config.to_dict()
    # max_sim_hours: a finished run stays valid under a longer cap (it stopped on its own)
    return not experiment_differences(stored, wanted, also=("max_sim_hours",))


def group_reference(out: Path, variant: str, seed: int) -> float | None:
    """The time every arm of a (variant, seed) group is measured against: PowerTrip's time
    to target there, else the best time of any finished run of the group (every claim
    compares against PowerTrip, so each stays decidable)."""
    group = out / "runs" / variant / f"seed{seed}"
    best: float | None = None
    if not group.is_dir():
        return None
    for run_dir in sorted(p for p in group.iterdir() if p.is_dir()):
        try:
            summary = json.loads((run_dir / runfiles.SUMMARY).read_text())
        except (OSError, ValueError):
            continue
        ttt = summary.get("time_to_target_s")
        if summary.get("status") != "done" or ttt is None:
            continue
        if run_dir.name == "powertrip":
            return float(ttt)
        best = float(ttt) if best is None else min(best, float(ttt))
    return best
