"""Held-out seeds: the online policies against a k* they could not have seen (not a figure of
the paper).

The paper's static k* comes from an offline sweep; PowerTrip needs none. Judging PowerTrip
against the k* of the very seeds it runs on hands the static baseline an oracle. Here k* is
chosen on the training seeds `TRAIN_SEEDS` (each set-up's full sweep: uniform for Figs. 8-9,
trace for Fig. 12; 1 GB and 2 GB updates take uniform's, the k an operator tuned once at
1.5 GB, as Fig. 13 does) and the online policies (`powertrip`, `adaptive`) and static k* are run on
`HELDOUT_SEEDS`, never used to choose anything. Each held-out seed's own best k (the oracle,
over a small grid around k*) is reported too.

Comparisons are paired per seed: the relative difference (t_policy - t_static) / t_static of
each held-out seed, its mean and a bootstrap 95 % CI over seeds (10,000 resamples, fixed
seed). No run is cut off near k* (`--budget-factor 0`): a cut-off time is a lower bound,
and is marked '>' wherever it enters.

    powertrip reproduce --figure heldout --only uniform --set seed=5 --seeds 5 \\
        --k 1,2,3,5,7 --no-refine --budget-factor 0 --out results/reproduce

(`--only trace` and a grid around trace's k* for the trace set-up; `--only size-1gb --k
2,3,5` and `--only size-2gb --k 2,3,5` for 1 GB and 2 GB updates; `--only ideal-45 --k
3,5,10` for the ideal set-up, whose training seeds have a sweep of their own, made with
`--arms static --set seed=0`: `KSTAR_GRID`.) `load` keys the data '<set-up>/train' and
'<set-up>/heldout'; a set-up without held-out runs is left out of the claims (not run yet).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite, Variant, run_path, static_arm
from powertrip.app.paper.data import (
    UNIFORM,
    VariantData,
    fill_runs,
    load_done,
    load_variant,
    sample_of,
)
from powertrip.app.paper.fig06_07 import IDEAL_45
from powertrip.app.paper.fig12 import TRACE
from powertrip.app.paper.fig13 import SIZE_1GB, SIZE_2GB
from powertrip.app.paper.gain_noise import resolution_claim
from powertrip.app.paper.paired import paired_bootstrap, relative, verdict
from powertrip.app.report import claims as C
from powertrip.app.report.figures import new_figure, save_figure
from powertrip.app.report.html import Table

#: the seeds whose full sweep chooses k* (Figs. 8-9) and the seeds held out from it
TRAIN_SEEDS = (0, 1, 2, 3, 4)
HELDOUT_SEEDS = (5, 6, 7, 8, 9)
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


@dataclass(frozen=True)
class Option:
    """Beyond the paper, off by default: an option of an online policy judged as an arm of
    its own. Its runs differ in the policy's parameters, so they are a set-up of their
    own, '<set-up>-<suffix>', run on seeds 0-4 (judged there first) and on the held-out
    seeds 5-9."""

    arm: str  # the arm's name in claims and tables
    suffix: str  # the set-up's name after '<set-up>-'
    policy: str
    params: Mapping[str, float]
    setups: tuple[Variant, ...]  # the set-ups it is run on


#: the short name of each of adaptive's options in its set-ups' names
SHORT = dict(shrink_in_fit="infit", block_se="blockse", level_se="levelse", down_probe="downprobe")


def adaptive_option(params: Mapping[str, float], setups: tuple[Variant, ...]) -> Option:
    """adaptive with `params`: arm 'adaptive+<p>+...', set-up suffix 'adaptive-<short>-...'."""
    suffix = "-".join(("adaptive", *(SHORT[p] for p in params)))
    return Option("+".join(("adaptive", *params)), suffix, "adaptive", dict(params), setups)


#: adaptive's options (its docstring): shrink_in_fit=1 (uniform, trace, ideal), block_se=1
#: (judged on uniform's and trace's training seeds, then run on every held-out set-up),
#: level_se=1 (uniform, trace), down_probe=1 with block_se=1 (every held-out set-up but the
#: ideal one, added after it was found not to help; without the plateau arm's floors: its
#: uniform seed 8 held one site long enough for the ceiling floor to bind, test_ceiling.py),
#: and block_se=1 with shrink_in_fit=1 (every set-up: the one pair not yet run on all five)
OPTIONS: tuple[Option, ...] = (
    adaptive_option({"shrink_in_fit": 1.0}, (UNIFORM, TRACE, IDEAL_45)),
    adaptive_option({"block_se": 1.0}, SETUPS),
    adaptive_option({"level_se": 1.0}, (UNIFORM, TRACE)),
    adaptive_option({"block_se": 1.0, "down_probe": 1.0}, (UNIFORM, TRACE, SIZE_1GB, SIZE_2GB)),
    adaptive_option({"block_se": 1.0, "shrink_in_fit": 1.0}, SETUPS),
)


def option_variant(setup: Variant, option: Option) -> Variant:
    params = ", ".join(f"{k}={v:g}" for k, v in option.params.items())
    return Variant(
        f"{setup.name}-{option.suffix}",
        f"{setup.label}; {option.policy} with {params}",
        dict(setup.overrides),
        arm_params={option.policy: dict(option.params)},
    )


#: (set-up of the option's runs, option) for every option and set-up it runs on
OPTION_RUNS: tuple[tuple[Variant, Option], ...] = tuple(
    (option_variant(s, o), o) for o in OPTIONS for s in o.setups
)
OPTION_VARIANTS: tuple[Variant, ...] = tuple(v for v, _ in OPTION_RUNS)

SUITE = Suite(
    "heldout",
    "Held-out seeds: the online policies against k* chosen on other seeds",
    "Not a figure of the paper. The paper compares PowerTrip with the static k* of an "
    "offline sweep; here k* is chosen on seeds 0-4 and every comparison is made on seeds "
    "5-9, with each held-out seed's own best k (the oracle) beside it.",
    tuple(v.name for v in (*SETUPS, *OPTION_VARIANTS)),
    ("powertrip", "adaptive", "sweep"),
    variant_arms={v.name: (o.policy,) for v, o in OPTION_RUNS},
)
VARIANTS = (IDEAL_45, *OPTION_VARIANTS)
TABLE_TITLE = "Times per held-out seed"


def load(out: Path, meta: Mapping[str, Any]) -> dict[str, VariantData]:
    """Per set-up S: 'S/train', S's sweep on TRAIN_SEEDS (its k* is the baseline's k), and
    'S/heldout', the online policies and the static k that finished on the held-out seeds.
    A set-up with no held-out run at all is left out."""
    grid = [int(k) for k in meta.get("sweep_k") or []]
    data: dict[str, VariantData] = {}
    for setup in SETUPS:
        train, heldout = load_setup(out, setup, grid)
        if any(heldout.runs.values()):
            data[f"{setup.name}/train"], data[f"{setup.name}/heldout"] = train, heldout
    return data


def load_setup(out: Path, setup: Variant, grid: Sequence[int]) -> tuple[VariantData, VariantData]:
    """(train, heldout) of one set-up: k* from the training seeds' sweep (its own, or the
    one `KSTAR_FROM` names), the held-out runs."""
    source = KSTAR_FROM.get(setup.name, setup)
    grid = KSTAR_GRID.get(setup.name, grid)
    train = load_variant(
        out, source.name, source.label, [static_arm(k).name for k in grid], TRAIN_SEEDS, grid
    )
    ks = sorted(
        {
            int(p.name.removeprefix("static-k"))
            for seed in HELDOUT_SEEDS
            for p in (out / "runs" / setup.name / f"seed{seed}").glob("static-k*")
            if p.name.removeprefix("static-k").isdigit()
        }
    )
    arms = [*ONLINE, *(static_arm(k).name for k in ks)]
    heldout = VariantData(setup.name, setup.label, arms, all_seeds=list(HELDOUT_SEEDS))
    fill_runs(heldout, out, arms, HELDOUT_SEEDS)
    heldout.sweep = [k for k in ks if len(heldout.runs.get(static_arm(k).name, {})) > 0]
    heldout.seeds = [
        s for s in HELDOUT_SEEDS if train.kstar is not None and _time(heldout, s, train.kstar)
    ]
    heldout.kstar = train.kstar
    for option in (o for o in OPTIONS if setup in o.setups):
        name = option_variant(setup, option).name
        for seed in (*TRAIN_SEEDS, *HELDOUT_SEEDS):
            run = load_done(run_path(out, name, seed, option.policy))
            if run is not None:
                into = heldout if seed in HELDOUT_SEEDS else train
                into.runs.setdefault(option.arm, {})[seed] = run
    return train, heldout


def _option_arms(v: VariantData) -> list[str]:
    """The options with runs in v, in OPTIONS order."""
    return [o.arm for o in OPTIONS if o.arm in v.runs]


def _pairs(d: Mapping[str, VariantData]) -> list[tuple[VariantData, VariantData]]:
    """(train, heldout) per loaded set-up, in SETUPS order."""
    return [
        (d[f"{s.name}/train"], d[f"{s.name}/heldout"]) for s in SETUPS if f"{s.name}/train" in d
    ]


def _time(v: VariantData, seed: int, k_or_arm: int | str) -> C.Sample | None:
    arm = static_arm(k_or_arm).name if isinstance(k_or_arm, int) else k_or_arm
    run = v.runs.get(arm, {}).get(seed)
    return None if run is None else sample_of(run)


def oracle(v: VariantData, seed: int) -> tuple[int, C.Sample] | None:
    """The held-out seed's own fastest static k among those that reached the target."""
    best: tuple[int, C.Sample] | None = None
    for k in v.sweep:
        s = _time(v, seed, k)
        if s is not None and s.reached and (best is None or s.value < best[1].value):
            best = (k, s)
    return best


def comparison(v: VariantData, arm: str, against: str) -> tuple[list[float], str, list[int]]:
    """Per held-out seed (t_arm - t_ref) / t_ref with ref the static k* ('kstar') or the
    seed's own oracle ('oracle'); the bound marks; the seeds used."""
    diffs, marks, seeds = [], "", []
    for seed in v.seeds:
        a = _time(v, seed, arm)
        if against == "kstar":
            b = _time(v, seed, v.kstar) if v.kstar is not None else None
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


def _fmt(mean: float, low: float, high: float, marks: str) -> str:
    if not math.isfinite(mean):
        return "not run"
    prefix = ">" if ">" in marks and "<" not in marks else ""
    ci = f" [{low:+.0%}, {high:+.0%}]" if math.isfinite(low) else ""
    return f"{prefix}{mean:+.1%}{ci}"


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    rows = []
    for train, v in _pairs(d):
        k = train.kstar
        for arm in (*ONLINE, *_option_arms(v)):
            for against, label in (
                ("kstar", f"static k* = {k} (chosen on seeds 0-4)"),
                ("oracle", "each held-out seed's own best static k"),
            ):
                diffs, marks, seeds = comparison(v, arm, against)
                mean, low, high = paired_bootstrap(diffs)
                rows.append(
                    C.ClaimRow(
                        "heldout",
                        f"{v.name}: {arm} against {label}, held-out seeds",
                        "PowerTrip beats static k* (paper §5.3)"
                        if arm == "powertrip" and against == "kstar"
                        else "goal: within 5 % or faster",
                        _fmt(mean, low, high, marks)
                        + (" (time to target vs the static run)" if diffs else ""),
                        verdict(mean, low, high, marks),
                        len(seeds),
                        why=f"held-out seeds {seeds}; k* from train seeds {train.seeds}"
                        + (f" of {train.name}" if train.name != v.name else "")
                        + ("; '>' a run cut off before the target: a lower bound" if marks else ""),
                    )
                )
        if v.name == IDEAL_45.name and train.kstar is not None:
            rows.append(_resolution(train, v, train.kstar))
    return rows


def _resolution(train: VariantData, v: VariantData, k: int) -> C.ClaimRow:
    """Whether a run's gains can place k where a site costs no time: k* against the next
    k of the grid, over every seed's static runs and every adaptive run's fits."""
    above = min((x for x in (*train.sweep, *v.sweep) if x > k), default=k)
    both = (train, v)
    static = {
        x: [r for d in both for r in d.runs.get(static_arm(x).name, {}).values()]
        for x in (k, above)
    }
    online = [
        r for d in both for a in ("adaptive", *_option_arms(d)) for r in d.runs.get(a, {}).values()
    ]
    return resolution_claim(static, online, k, above)


def table(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[Table]:
    tables = []
    for train, v in _pairs(d):
        arms = (*ONLINE, *_option_arms(v))
        tables.append(_times_table(v, arms, v.all_seeds, "held-out seed", with_oracle=True))
        tables[-1].caption = (
            f"{v.label}: k* = {train.kstar} chosen on seeds {train.seeds} over the grid "
            f"{train.sweep}"
            + (f" of {train.name}" if train.name != v.name else "")
            + f"; held-out grid {v.sweep}; '>' a run cut off before the target"
        )
        options = _option_arms(train)
        if options:  # the options judged on the seeds k* was chosen on
            train_arms = [a for a in ONLINE if a in train.runs] + options
            tables.append(_times_table(train, train_arms, train.seeds, "training seed"))
            tables[-1].caption = (
                f"{v.label}, training seeds: {', '.join(options)} beside adaptive and the "
                "static k* these seeds chose (for static, an oracle here)"
            )
    return tables


def _times_table(
    v: VariantData, arms: Sequence[str], seeds: Sequence[int], label: str, with_oracle=False
) -> Table:
    rows = []
    for seed in seeds:
        cells = [str(seed)]
        for arm in (*arms, v.kstar):
            s = _time(v, seed, arm) if arm is not None else None
            cells.append(C.fmt_time([s]) if s is not None else "-")
        if with_oracle:
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
        *(["oracle k: time (h)"] if with_oracle else []),
        *(f"{a} mean k" for a in arms),
    ]
    return Table(headers, rows)


def _hours(sample: C.Sample | None) -> float:
    return sample.value / 3600 if sample is not None else np.nan


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    pairs = _pairs(d)
    if not pairs:
        return []
    fig = new_figure(7.5, 3.6 * len(pairs))
    styles = {"powertrip": ("tab:red", "o"), "adaptive": ("tab:green", "s")}
    for row, (_, v) in enumerate(pairs, start=1):
        ax = fig.add_subplot(len(pairs), 1, row)
        seeds = list(v.all_seeds)
        for arm, (color, marker) in styles.items():
            ys = [_hours(_time(v, s, arm)) for s in seeds]
            ax.plot(seeds, ys, marker=marker, color=color, linestyle="", label=arm)
        if v.kstar is not None:
            ys = [_hours(_time(v, s, v.kstar)) for s in seeds]
            label = f"static k* = {v.kstar} (seeds 0-4)"
            ax.plot(
                seeds, ys, marker="_", markersize=18, color="tab:blue", linestyle="", label=label
            )
        ys = [_hours(found[1]) if (found := oracle(v, s)) else np.nan for s in seeds]
        ax.plot(seeds, ys, marker="x", color="black", linestyle="", label="oracle (own best k)")
        ax.set(xlabel="held-out seed", xticks=seeds)
        ax.set_ylabel("time to target (sim. h)")
        ax.set_title(f"Held-out seeds, {v.label}")
        ax.legend(fontsize=8)
    return [save_figure(fig, out / "heldout_times.png")]
