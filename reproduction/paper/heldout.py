"""Held-out seeds: the online policies against a k* they could not have seen (not a figure of
the paper).

The paper's static k* comes from an offline sweep; PowerTrip needs none. Judging PowerTrip
against the k* of the very seeds it runs on hands the static baseline an oracle. Here k* is
chosen on the training seeds `TRAIN_SEEDS` (each set-up's full sweep: uniform for Figs. 8-9,
trace for Fig. 12; 1 GB and 2 GB updates take uniform's, the k an operator tuned once at
1.5 GB, as Fig. 13 does) and the online policies (`powertrip`, `adaptive`) and static k* are
run on two more groups of seeds:

* `DEV_SEEDS` (5-9), the development seeds: the changes that made `adaptive` what it is were
  found and ranked on them, so they are not held out any more;
* `HELDOUT_SEEDS` (10-14), never used to choose k* or the policies: the numbers the README
  quotes. Figure `outer` chose the product's int8 deltas on them, so rows of the product's
  defaults on these seeds are not held out.

Each seed's own best k (the oracle) is reported too, chosen from `ORACLE_GRID`, one grid per
set-up for its development and held-out seeds alike (a coarser grid on the held-out seeds
would hand them a worse oracle), fixed from the development seeds' runs; a seed that lacks a
k of it is named beside the row.
Comparisons are paired per seed: the relative difference (t_policy - t_static) / t_static of
each seed, its mean, a bootstrap 95 % CI over seeds (10,000 resamples, fixed seed) and a
Student-t 95 % CI; a verdict other than level needs both (reproduction/paper/paired.py). No
run is cut off near k* (`--budget-factor 0`): a cut-off time is a lower bound, and is marked
'>' wherever it enters.

    powertrip reproduce --figure heldout --only uniform --set seed=10 --seeds 5 \\
        --k 1,2,3,5,7 --no-refine --budget-factor 0 --out results/reproduce

(`--only trace --k 2,3,4,5,6,10` for the trace set-up; `--only size-1gb --k 2,3,5` and
`--only size-2gb --k 2,3,5` for 1 GB and 2 GB updates; `--only ideal-45 --k 3,5,10` for the
ideal set-up, whose training seeds have a sweep of their own, made with `--arms static
--set seed=0`: `KSTAR_GRID`.) `load` keys the data '<set-up>/train', '<set-up>/dev' and
'<set-up>/heldout'; a group without runs is left out of the claims (not run yet).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite, Variant, static_arm
from powertrip.app.report import claims as C
from powertrip.app.report.figures import new_figure, save_figure
from powertrip.app.report.html import Table
from reproduction.paper.data import (
    UNIFORM,
    VariantData,
    fill_runs,
    load_variant,
    sample_of,
)
from reproduction.paper.fig06_07 import IDEAL_45
from reproduction.paper.fig12 import TRACE
from reproduction.paper.fig13 import SIZE_1GB, SIZE_2GB
from reproduction.paper.gain_noise import resolution_rows, static_runs
from reproduction.paper.paired import Paired, paired, relative

#: the seeds whose full sweep chooses k* (Figs. 8-9) and the seeds held out from it
TRAIN_SEEDS = (0, 1, 2, 3, 4)
DEV_SEEDS = (5, 6, 7, 8, 9)
HELDOUT_SEEDS = (10, 11, 12, 13, 14)
#: the groups of seeds the online policies are judged on, in the order claims list them
GROUPS: dict[str, tuple[int, ...]] = {"dev": DEV_SEEDS, "heldout": HELDOUT_SEEDS}
GROUP_LABEL = {"dev": "development seeds", "heldout": "held-out seeds"}
ONLINE = ("powertrip", "adaptive")
#: the set-ups held out, each with its own k* (uniform: Figs. 8-9; trace: Fig. 12; ideal:
#: Figs. 6-7's set-up, to the target) or another's (1 GB and 2 GB: Fig. 13's k tuned at
#: 1.5 GB; a sweep per size would cost 12 runs a seed)
SETUPS: tuple[Variant, ...] = (UNIFORM, TRACE, SIZE_1GB, SIZE_2GB, IDEAL_45)
KSTAR_FROM: Mapping[str, Variant] = {SIZE_1GB.name: UNIFORM, SIZE_2GB.name: UNIFORM}
#: a set-up whose training seeds were swept on a grid of its own (not the reproduction's 12
#: k), to save CPU: the ideal set-up's round time is the same for every k, and Fig. 7's runs
#: of the same seeds (the same training up to round 30) reached 45 % slower with 20, 50 and
#: 100 sites than with 10 (0.48, 0.49, 0.48 h against 0.45 h), so its sweep is 3, 5 and 10
KSTAR_GRID: Mapping[str, tuple[int, ...]] = {IDEAL_45.name: (3, 5, 10)}
#: each set-up's oracle grid: the static k every development seed ran, and every held-out
#: seed's oracle is chosen from the same (nothing chosen on the held-out seeds). A set-up
#: without one (the outer study's) takes every static k run on the group's seeds.
ORACLE_GRID: Mapping[str, tuple[int, ...]] = {
    UNIFORM.name: (2, 3, 5),
    TRACE.name: (2, 3, 4, 5, 6, 10),
    SIZE_1GB.name: (2, 3, 5),
    SIZE_2GB.name: (2, 3, 5),
    IDEAL_45.name: (3, 5, 10),
}


SUITE = Suite(
    "heldout",
    "Held-out seeds: the online policies against k* chosen on other seeds",
    "Not a figure of the paper. The paper compares PowerTrip with the static k* of an "
    "offline sweep; here k* is chosen on seeds 0-4 and every comparison is made on other "
    "seeds: 5-9 (development) and 10-14 (held out), with each seed's own best k (the "
    "oracle) beside it.",
    tuple(v.name for v in SETUPS),
    ("powertrip", "adaptive", "sweep"),
)
VARIANTS = (IDEAL_45,)
TABLE_TITLE = "Times per held-out seed"


def load(out: Path, meta: Mapping[str, Any]) -> dict[str, VariantData]:
    """Per set-up S: 'S/train', S's sweep on TRAIN_SEEDS (its k* is the baseline's k), and
    'S/dev' and 'S/heldout', the online policies and the static k that finished on each
    group of seeds. A group with no run at all is left out."""
    grid = [int(k) for k in meta.get("sweep_k") or []]
    data: dict[str, VariantData] = {}
    for setup in SETUPS:
        train, groups = load_setup(out, setup, grid)
        for group, v in groups.items():
            if any(v.runs.values()):
                data[f"{setup.name}/train"], data[f"{setup.name}/{group}"] = train, v
    return data


def load_setup(
    out: Path, setup: Variant, grid: Sequence[int]
) -> tuple[VariantData, dict[str, VariantData]]:
    """(train, {group: its runs}) of one set-up: k* from the training seeds' sweep (its own,
    or the one `KSTAR_FROM` names), and each group's runs."""
    source = KSTAR_FROM.get(setup.name, setup)
    grid = KSTAR_GRID.get(setup.name, grid)
    train = load_variant(
        out, source.name, source.label, [static_arm(k).name for k in grid], TRAIN_SEEDS, grid
    )
    return train, {g: load_group(out, setup, seeds, train) for g, seeds in GROUPS.items()}


def load_group(out: Path, setup: Variant, seeds: Sequence[int], train: VariantData) -> VariantData:
    """One group's runs: the online policies, static k* and the oracle grid (`ORACLE_GRID`'s,
    else every static k run on these seeds); `sweep` is the grid."""
    grid = ORACLE_GRID.get(setup.name)
    if grid is None:
        grid = {
            int(p.name.removeprefix("static-k"))
            for seed in seeds
            for p in (out / "runs" / setup.name / f"seed{seed}").glob("static-k*")
            if p.name.removeprefix("static-k").isdigit()
        }
    ks = sorted({*grid, *([train.kstar] if train.kstar is not None else [])})
    arms = [*ONLINE, *(static_arm(k).name for k in ks)]
    v = VariantData(setup.name, setup.label, arms, all_seeds=list(seeds))
    fill_runs(v, out, arms, seeds)
    v.sweep = sorted(k for k in grid if setup.name in ORACLE_GRID or v.runs.get(static_arm(k).name))
    v.seeds = [s for s in seeds if train.kstar is not None and time_of(v, s, train.kstar)]
    v.kstar = train.kstar
    return v


def missing(v: VariantData, seeds: Sequence[int]) -> str:
    """'seed 13 lacks k 5, 6; ...': the seeds whose oracle misses a k of the grid ('' if none)."""
    out = []
    for seed in seeds:
        lacks = [k for k in v.sweep if time_of(v, seed, k) is None]
        if lacks:
            out.append(f"seed {seed} lacks k {', '.join(map(str, lacks))}")
    return "; ".join(out)


def _groups(d: Mapping[str, VariantData]) -> list[tuple[VariantData, str, VariantData]]:
    """(train, group, its runs) per loaded set-up and group, in SETUPS and GROUPS order."""
    return [
        (d[f"{s.name}/train"], g, d[f"{s.name}/{g}"])
        for s in SETUPS
        for g in GROUPS
        if f"{s.name}/{g}" in d
    ]


def time_of(v: VariantData, seed: int, k_or_arm: int | str) -> C.Sample | None:
    arm = static_arm(k_or_arm).name if isinstance(k_or_arm, int) else k_or_arm
    run = v.runs.get(arm, {}).get(seed)
    return None if run is None else sample_of(run)


def oracle(v: VariantData, seed: int) -> tuple[int, C.Sample] | None:
    """The held-out seed's own fastest static k among those that reached the target."""
    best: tuple[int, C.Sample] | None = None
    for k in v.sweep:
        s = time_of(v, seed, k)
        if s is not None and s.reached and (best is None or s.value < best[1].value):
            best = (k, s)
    return best


def comparison(v: VariantData, arm: str, against: str) -> tuple[list[float], str, list[int]]:
    """Per held-out seed (t_arm - t_ref) / t_ref with ref the static k* ('kstar') or the
    seed's own oracle ('oracle'); the bound marks; the seeds used."""
    diffs, marks, seeds = [], "", []
    for seed in v.seeds:
        a = time_of(v, seed, arm)
        if against == "kstar":
            b = time_of(v, seed, v.kstar) if v.kstar is not None else None
        else:
            found = oracle(v, seed)
            b = found[1] if found else None
        if a is None or b is None:
            continue
        value, mark = relative(a, b)
        diffs.append(value)
        marks += mark
        seeds.append(seed)
    return diffs, marks, seeds


def fmt_paired(p: Paired, marks: str) -> str:
    """'+6.6% [-5%, +21%], t [-7%, +20%]': the mean, its bootstrap CI, its t-interval."""
    if not math.isfinite(p.mean):
        return "not run"
    prefix = ">" if ">" in marks and "<" not in marks else ""
    ci = ""
    if math.isfinite(p.boot[0]):
        ci = f" [{p.boot[0]:+.0%}, {p.boot[1]:+.0%}], t [{p.t[0]:+.0%}, {p.t[1]:+.0%}]"
    return f"{prefix}{p.mean:+.1%}{ci}"


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    rows = []
    for train, group, v in _groups(d):
        k = train.kstar
        for arm in ONLINE:
            for against, label in (
                ("kstar", f"static k* = {k} (chosen on seeds 0-4)"),
                ("oracle", "each seed's own best static k"),
            ):
                diffs, marks, seeds = comparison(v, arm, against)
                p = paired(diffs)
                rows.append(
                    C.ClaimRow(
                        "heldout",
                        f"{v.name}: {arm} against {label}, {GROUP_LABEL[group]}",
                        "PowerTrip beats static k* (paper §5.3)"
                        if arm == "powertrip" and against == "kstar"
                        else "goal: within 5 % or faster",
                        fmt_paired(p, marks)
                        + (" (time to target vs the static run)" if diffs else ""),
                        p.verdict(marks),
                        len(seeds),
                        why=f"seeds {seeds}; k* from train seeds {train.seeds}"
                        + (f" of {train.name}" if train.name != v.name else "")
                        + (_oracle_note(v, seeds) if against == "oracle" else "")
                        + ("; '>' a run cut off before the target: a lower bound" if marks else ""),
                    )
                )
    ideal = [(t, v) for t, _, v in _groups(d) if v.name == IDEAL_45.name]
    if ideal and ideal[0][0].kstar is not None:
        rows.extend(_resolution([ideal[0][0], *(v for _, v in ideal)], ideal[0][0].kstar))
    return rows


def _oracle_note(v: VariantData, seeds: Sequence[int]) -> str:
    """'; oracle grid [2, 3, 5]' and the seeds that lack a k of it."""
    lacking = missing(v, seeds)
    return f"; oracle grid {v.sweep}" + (f" ({lacking})" if lacking else "")


def _resolution(data: Sequence[VariantData], k: int) -> list[C.ClaimRow]:
    """Whether a run's progress can place k where a site costs no time: k* against the next
    k of the grid, paired by seed over every seed's static runs (gain_noise.py)."""
    above = min((x for d in data for x in d.sweep if x > k), default=k)
    arms = {x: static_arm(x).name for x in (k, above)}
    return resolution_rows(static_runs([d.runs for d in data], arms), k, above)


def table(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[Table]:
    tables = []
    for train, group, v in _groups(d):
        tables.append(_times_table(v, ONLINE, v.all_seeds, GROUP_LABEL[group][:-1]))
        tables[-1].caption = (
            f"{v.label}, {GROUP_LABEL[group]}: k* = {train.kstar} chosen on seeds "
            f"{train.seeds} over the grid {train.sweep}"
            + (f" of {train.name}" if train.name != v.name else "")
            + f"; the oracle's grid {v.sweep}; '>' a run cut off before the target"
        )
    return tables


def _times_table(v: VariantData, arms: Sequence[str], seeds: Sequence[int], label: str) -> Table:
    rows = []
    for seed in seeds:
        cells = [str(seed)]
        for arm in (*arms, v.kstar):
            s = time_of(v, seed, arm) if arm is not None else None
            cells.append(C.fmt_time([s]) if s is not None else "-")
        found = oracle(v, seed)
        cells.append(f"k = {found[0]}: {C.fmt_time([found[1]])}" if found else "-")
        for arm in arms:
            run = v.runs.get(arm, {}).get(seed)
            cells.append(f"{run.summary.get('mean_k', math.nan):.1f}" if run else "-")
        rows.append(cells)
    headers = [
        label,
        *(f"{a} (h)" for a in arms),
        f"static k* = {v.kstar} (h)",
        "oracle k: time (h)",
        *(f"{a} mean k" for a in arms),
    ]
    return Table(headers, rows)


def _hours(sample: C.Sample | None) -> float:
    return sample.value / 3600 if sample is not None else np.nan


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    setups = [s for s in SETUPS if any(f"{s.name}/{g}" in d for g in GROUPS)]
    if not setups:
        return []
    fig = new_figure(7.5, 3.6 * len(setups))
    styles = {"powertrip": ("tab:red", "o"), "adaptive": ("tab:green", "s")}
    for row, setup in enumerate(setups, start=1):
        ax = fig.add_subplot(len(setups), 1, row)
        groups = [d[f"{setup.name}/{g}"] for g in GROUPS if f"{setup.name}/{g}" in d]
        v = _merged(groups)
        seeds = list(v.all_seeds)
        for arm, (color, marker) in styles.items():
            ys = [_hours(time_of(v, s, arm)) for s in seeds]
            ax.plot(seeds, ys, marker=marker, color=color, linestyle="", label=arm)
        if v.kstar is not None:
            ys = [_hours(time_of(v, s, v.kstar)) for s in seeds]
            label = f"static k* = {v.kstar} (seeds 0-4)"
            ax.plot(
                seeds, ys, marker="_", markersize=18, color="tab:blue", linestyle="", label=label
            )
        ys = [_hours(found[1]) if (found := oracle(v, s)) else np.nan for s in seeds]
        ax.plot(seeds, ys, marker="x", color="black", linestyle="", label="oracle (own best k)")
        if len(groups) > 1:  # development seeds left of the line, held-out right
            ax.axvline(max(groups[0].all_seeds) + 0.5, color="grey", linewidth=0.8)
        ax.set(xlabel="seed (5-9 development, 10-14 held out)", xticks=seeds)
        ax.set_ylabel("time to target (sim. h)")
        ax.set_title(v.label)
        ax.legend(fontsize=8)
    return [save_figure(fig, out / "heldout_times.png")]


def _merged(groups: Sequence[VariantData]) -> VariantData:
    """One set-up's groups as one VariantData (their seeds side by side), for the plot."""
    first = groups[0]
    v = VariantData(first.name, first.label, list(first.arms), kstar=first.kstar)
    for g in groups:
        v.all_seeds = [*v.all_seeds, *g.all_seeds]
        v.sweep = sorted({*v.sweep, *g.sweep})
        for arm, runs in g.runs.items():
            v.runs.setdefault(arm, {}).update(runs)
    return v
