"""Real regions and their grids: time against CO2 (not a figure of the paper).

The set-up: Google Cloud's 40 regions as the sites (`population: regions`,
data/regions/regions.csv), the aggregator in europe-west4, each site's energy charged at its
own grid's annual intensity; FEMNIST to 45 % as the base set-up, under the product's
defaults (Nesterov outer step, int8 deltas). Stated before any run, nothing chosen on these
seeds:

* time objective (`regions`): PowerTrip, `adaptive`, `lowcarb` (flwr-lowcarb's rule),
  `centralized-green` (one data centre at the cleanest grid, 25 % power) and static
  k = 2, 4, 8, 16 (`FRACTIONS`; static k* is the fastest of them, an oracle no operator
  has);
* carbon objective (`regions-carbon`, `carbon_slack` 1.10, fixed up front): PowerTrip and
  `adaptive`, their k rule unchanged, their sites re-chosen for less CO2 within the slack;
* seeds 0-4; each (set-up, seed) runs PowerTrip first and cuts the others off at
  `--budget-factor` (1.5) x its time, as every figure does; a cut-off run's hours and kg are
  lower bounds ('>').

It answers: what each policy costs in hours and kg CO2 to the target (the front), whether
the carbon objective beats `lowcarb` on both axes, and what the slack buys (carbon against
time objective, paired by seed).

    powertrip reproduce --figure regions --seeds 5 --plan
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite, Variant, clamp_k, suite_arm_names
from powertrip.app.report import claims as C
from powertrip.app.report.figures import new_figure, save_figure
from reproduction.paper.data import VariantData, load_variant
from reproduction.paper.heldout import fmt_paired
from reproduction.paper.paired import paired

#: static k = 2, 4, 8, 16: `static-k@F` takes F x the base config's sites (100), so these are
#: fractions of 100, not of the 40 regions
FRACTIONS = (0.02, 0.04, 0.08, 0.16)
BASE_SITES = 100
SITES = 40
SLACK = 1.10
_COMMON = {
    "population": "regions",
    "num_sites": SITES,
    "outer_optimizer": "nesterov",
    "delta_encoding": "int8",
}
REGIONS = Variant(
    "regions",
    "Google Cloud's 40 regions (FEMNIST, Nesterov, int8), time objective",
    _COMMON,
)
REGIONS_CARBON = Variant(
    "regions-carbon",
    f"Google Cloud's 40 regions (FEMNIST, Nesterov, int8), carbon objective (slack {SLACK:g})",
    {**_COMMON, "objective": "carbon", "carbon_slack": SLACK},
)
VARIANTS = (REGIONS, REGIONS_CARBON)
ONLINE = ("powertrip", "adaptive")
CARBON_BASELINES = ("lowcarb", "centralized-green")

SUITE = Suite(
    "regions",
    "Real regions: hours and kg CO2 to target",
    "Not a figure of the paper, whose sites are synthetic points with one grid. Here the "
    "sites are Google Cloud's 40 regions with their grids' intensities; PowerTrip and "
    "adaptive under the time and the carbon objective, flwr-lowcarb's rule, centralized "
    "training at the cleanest grid and a static sweep.",
    tuple(v.name for v in VARIANTS),
    ONLINE,
    variant_arms={
        REGIONS.name: (*ONLINE, *CARBON_BASELINES, *(f"static-k@{f}" for f in FRACTIONS)),
    },
)
TABLE_TITLE = "Hours and kg CO2 to target per seed"


def sweep_of(num_sites: int) -> list[int]:
    return sorted({clamp_k(f * num_sites, num_sites) for f in FRACTIONS})


def load(out: Path, meta: Mapping[str, Any]) -> dict[str, VariantData]:
    seeds = list(meta.get("seeds") or [])
    ks = sweep_of(BASE_SITES)
    return {
        v.name: load_variant(
            out, v.name, v.label, suite_arm_names(SUITE, v.name, BASE_SITES, ks), seeds, ks
        )
        for v in VARIANTS
    }


def kg_to_target(run) -> tuple[float, bool]:
    """(kg CO2 to the target, reached); a run that missed it: what it emitted, a bound."""
    at = run.summary.get("carbon_kg_to_target")
    if at is not None:
        return float(at), True
    return float(run.summary.get("carbon_kg") or 0.0), False


def hours_to_target(run) -> tuple[float, bool]:
    if run.time_to_target_s is not None:
        return run.time_to_target_s / 3600, True
    return run.sim_time_s / 3600, False


def _mean_ci(values: list[float]) -> str:
    """The mean, its bootstrap 95 % CI and its Student-t 95 % CI over seeds (at five seeds
    the bootstrap alone is too narrow)."""
    p = paired(values)
    if not math.isfinite(p.mean):
        return "not run"
    if not math.isfinite(p.boot[0]):
        return f"{p.mean:.3f}"
    return f"{p.mean:.3f} [{p.boot[0]:.3f}, {p.boot[1]:.3f}], t [{p.t[0]:.3f}, {p.t[1]:.3f}]"


def _front_row(v: VariantData, arm: str) -> C.ClaimRow:
    runs = [v.runs[arm][s] for s in v.seeds if s in v.runs.get(arm, {})]
    hours = [hours_to_target(r) for r in runs]
    kg = [kg_to_target(r) for r in runs]
    missed = sum(not ok for _, ok in hours)
    bound = f" ({missed} of {len(runs)} cut off: bounds)" if missed else ""
    return C.ClaimRow(
        "regions",
        f"{v.name}: {arm}, hours and kg CO2 to target",
        "the front: time against carbon",
        f"{_mean_ci([h for h, _ in hours])} h; {_mean_ci([k for k, _ in kg])} kg{bound}",
        "n/a",
        len(runs),
    )


def _paired_row(claim: str, expect: str, a: dict, b: dict, seeds: list[int], measure) -> C.ClaimRow:
    """(a - b) / b per seed of `measure` (hours_to_target or kg_to_target)."""
    diffs, marks, used = [], "", []
    for s in seeds:
        if s not in a or s not in b:
            continue
        (x, x_ok), (y, y_ok) = measure(a[s]), measure(b[s])
        if y <= 0:
            continue
        diffs.append((x - y) / y)
        marks += "" if x_ok and y_ok else ">" if not x_ok and y_ok else "<" if x_ok else "?"
        used.append(s)
    p = paired(diffs)
    holds = p.verdict(marks)
    if measure is kg_to_target:  # the verdict's words are for times
        holds = holds.replace("faster", "lower").replace("slower", "higher")
    return C.ClaimRow(
        "regions", claim, expect, fmt_paired(p, marks), holds, len(used),
        why=f"seeds {used}; paired by seed; a cut-off run's value is a bound",
    )  # fmt: skip


def _span(values: list[float], fmt: str) -> str:
    """'4-5' or '5' (one value): the range of `values` in `fmt`."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"


def _stopped_row(v: VariantData, arm: str) -> C.ClaimRow:
    """Where a carbon baseline's runs ended: its k, rounds and accuracy when cut off."""
    runs = [v.runs[arm][s] for s in v.seeds if s in v.runs.get(arm, {})]
    missed = [r for r in runs if r.time_to_target_s is None]
    ours = f"k {_span([r.summary.get('mean_k', math.nan) for r in runs], '.0f')}"
    if missed:
        ours += (
            f"; {len(missed)} of {len(runs)} cut off before the target after "
            f"{_span([r.summary.get('rounds', 0) for r in missed], 'd')} rounds, at "
            f"{_span([100 * r.summary.get('final_accuracy', 0.0) for r in missed], '.0f')} % "
            "accuracy"
        )
    why = {
        "lowcarb": "its default k (30 % of the sites), not swept: lowcarb at its best k has "
        "not been run yet",
        "centralized-green": "not run to the target: what the greenest option costs in "
        "hours is unknown",
    }.get(arm, "")
    return C.ClaimRow(
        "regions", f"{v.name}: {arm}, where its runs ended", "a baseline run to the target",
        ours, "no" if missed else "yes", len(runs), why=why,
    )  # fmt: skip


def _per_seed_row(time_v: VariantData, carbon_v: VariantData, arm: str) -> C.ClaimRow:
    """Per seed, kg and hours under the carbon objective against the time objective, and on
    how many seeds it changed the run at all."""
    a, b = carbon_v.runs.get(arm, {}), time_v.runs.get(arm, {})
    seeds = sorted(set(a) & set(b))
    cells, acted = [], 0
    for s in seeds:
        (kg_c, _), (kg_t, _) = kg_to_target(a[s]), kg_to_target(b[s])
        (h_c, _), (h_t, _) = hours_to_target(a[s]), hours_to_target(b[s])
        if kg_c == kg_t and h_c == h_t:
            cells.append(f"seed {s}: unchanged")
            continue
        acted += 1
        cells.append(f"seed {s}: kg {kg_c / kg_t - 1:+.0%}, hours {h_c / h_t - 1:+.0%}")
    return C.ClaimRow(
        "regions", f"{arm}: the carbon objective against the time objective, per seed",
        "less CO2 on every seed, within the slack",
        f"changed the run on {acted} of {len(seeds)} seeds; " + "; ".join(cells), "n/a",
        len(seeds), why=f"the slack ({SLACK:g}) bounds each round's predicted time, not the "
        "run's time to target",
    )  # fmt: skip


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    time_v, carbon_v = d[REGIONS.name], d[REGIONS_CARBON.name]
    rows = []
    kstar = f"static-k{time_v.kstar}" if time_v.kstar else None
    for arm in (*ONLINE, *CARBON_BASELINES, *([kstar] if kstar else [])):
        rows.append(_front_row(time_v, arm))
    for arm in ONLINE:
        rows.append(_front_row(carbon_v, arm))
    rows.extend(_stopped_row(time_v, arm) for arm in CARBON_BASELINES)
    rows.extend(_per_seed_row(time_v, carbon_v, arm) for arm in ONLINE)
    seeds = sorted(set(time_v.seeds) & set(carbon_v.seeds))
    for arm in ONLINE:
        a, b = carbon_v.runs.get(arm, {}), time_v.runs.get(arm, {})
        for what, measure in (("kg CO2", kg_to_target), ("hours", hours_to_target)):
            rows.append(_paired_row(
                f"{arm}: carbon objective against time objective, {what} to target",
                f"less CO2 for at most {SLACK - 1:.0%} more time a round",
                a, b, seeds, measure,
            ))  # fmt: skip
        low = time_v.runs.get("lowcarb", {})
        for what, measure in (("kg CO2", kg_to_target), ("hours", hours_to_target)):
            rows.append(_paired_row(
                f"{arm} under the carbon objective against lowcarb, {what} to target",
                "beats flwr-lowcarb's rule on both axes",
                a, low, seeds, measure,
            ))  # fmt: skip
    return rows


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    """Hours against kg CO2 to target: each arm's seeds (dots) and mean (large marker)."""
    points = []
    for v in (d[REGIONS.name], d[REGIONS_CARBON.name]):
        arms = [*ONLINE] if v.name == REGIONS_CARBON.name else [*ONLINE, *CARBON_BASELINES]
        if v.kstar:
            arms.append(f"static-k{v.kstar}")
        for arm in arms:
            runs = [v.runs[arm][s] for s in v.seeds if s in v.runs.get(arm, {})]
            if runs:
                label = f"{arm} ({'carbon' if v.name == REGIONS_CARBON.name else 'time'})"
                points.append((label, [hours_to_target(r)[0] for r in runs],
                               [kg_to_target(r)[0] for r in runs]))  # fmt: skip
    if not points:
        return []
    fig = new_figure(6.5, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    for i, (label, hours, kg) in enumerate(points):
        color = f"C{i % 10}"
        ax.scatter(hours, kg, s=12, color=color, alpha=0.4)
        ax.scatter([np.mean(hours)], [np.mean(kg)], s=70, color=color, label=label,
                   edgecolors="black")  # fmt: skip
    ax.set_xlabel("hours to 45 % (simulated; cut-off runs: bounds)")
    ax.set_ylabel("kg CO2 to 45 %")
    ax.set_title("40 Google Cloud regions: time against carbon (lower left is better)")
    ax.legend(fontsize=7, loc="best")
    return [save_figure(fig, out / "regions_front.png")]
