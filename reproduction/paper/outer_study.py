"""DiLoCo's outer step and int8 deltas under PowerTrip's selection (not a figure of the
paper).

Geo-distributed training today builds on DiLoCo: the averaged delta is a pseudo-gradient
for an outer SGD step with Nesterov momentum (`outer_optimizer: nesterov`), and INTELLECT-1
sends its deltas as int8 (`delta_encoding: int8`). The first raises what a round buys (the
gain side of Eq. 5), the second cuts M (Eq. 3's cost side). The paper's method, FedAvg with
fp32 deltas, is the reference; its runs are the uniform and trace set-ups' own.

Two phases, both stated before any run:

* **Choosing the outer step** on the training seeds 0-4 only: static k* of each set-up (its
  FedAvg sweep's on those seeds: uniform 3, trace 4; the loader checks it) under each point
  of `GRID`, paired by seed with the FedAvg run at the same k. The point with the lowest
  mean time to target is `chosen` from the runs, per set-up; the product's default
  (`powertrip/core/outer.py`) must be it (a test recomputes it); 40 runs, their cost from
  `--plan`.
* **Held-out seeds 10-14**, the outer step not chosen on them: under the product's step, and
  under it with int8 deltas, PowerTrip, `adaptive` and the static grid of the set-up's
  held-out runs (uniform 2, 3, 5; trace 2, 3, 4, 10), against the FedAvg runs of the same
  seeds (figure `heldout`). Each row pairs by seed: does time to target fall, where is each
  seed's own best k (does k* move), and does PowerTrip's gap to static k* change. int8
  against fp32 was judged on these seeds only, so for the encoding they are not held out.

    powertrip reproduce --figure outer --only uniform-nesterov-lr0.7-m0.9 --set seed=0 \\
        --seeds 5 --k 3 --no-refine --budget-factor 0 --out results/reproduce

**A tuned FedAvg**: FedAvg's own step (lr 1, no momentum) was never tuned, while
Nesterov's was chosen from a grid of four. FedAvgM (Hsu et al., 2019; `outer_optimizer:
fedavgm`, server momentum) gets a grid as large, `FEDAVGM_GRID`, on the same training seeds
0-4 at the same static k*, fixed before any of its runs; the point with the lowest mean time
to target is FedAvg's strongest reading, the reference the Nesterov step must beat. Its runs
(the set-ups `FEDAVGM_VARIANTS`, 20 a set-up, ~1 CPU hour each by `--plan`) are not made
yet:

    powertrip reproduce --figure outer --set seed=0 --seeds 5 --k 4 --no-refine \\
        --only trace-fedavgm-lr0.7-m0.5,trace-fedavgm-lr0.7-m0.9,trace-fedavgm-lr1-m0.5,\\
    trace-fedavgm-lr1-m0.9 --budget-factor 0 --out results/reproduce

(one comma list, no spaces; `--k 3` and the uniform-fedavgm-* set-ups for uniform).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite, Variant, static_arm
from powertrip.app.report import claims as C
from powertrip.app.report.figures import new_figure, save_figure
from powertrip.core.deltacodec import WIRE_SHARE
from powertrip.core.outer import OUTER_LR, OUTER_MOMENTUM
from reproduction.paper import heldout
from reproduction.paper.data import VariantData, load_variant
from reproduction.paper.outer_grid import (
    BASES,
    FEDAVGM_VARIANTS,
    GRID,
    GRID_VARIANTS,
    GRIDS,
    OPTIMIZER_LABEL,
    chosen,
    edges,
    effective_step,
    grid_means,
    nesterov,
    paired_by_seed,
)
from reproduction.paper.paired import paired

#: the product's outer step (`outer_lr`, `outer_momentum`), under which the held-out runs
#: were made; `chosen` from the grid's runs must equal it
PRODUCT: tuple[float, float] = (OUTER_LR, OUTER_MOMENTUM)
#: the points the grid lacks while its winner sits at its edge, and the baseline it lacks: not
#: run yet, said beside the chosen point
NOT_RUN = "the grid's extension (lr 1.0 and 1.4, momentum 0.95) has not been run yet"


#: set-up -> (the product's step, the product's step with int8 deltas), for the held-out seeds
HELDOUT_VARIANTS: dict[str, tuple[Variant, Variant]] = {
    b.name: (nesterov(b, *PRODUCT), nesterov(b, *PRODUCT, int8=True)) for b in BASES
}
#: the grid's set-ups, then the held-out ones not among them (the int8 ones)
VARIANTS: tuple[Variant, ...] = tuple(
    {
        v.name: v
        for v in (
            *(v for vs in GRID_VARIANTS.values() for v in vs),
            *(v for vs in HELDOUT_VARIANTS.values() for v in vs),
            *(v for vs in FEDAVGM_VARIANTS.values() for v in vs),
        )
    }.values()
)

SUITE = Suite(
    "outer",
    "DiLoCo's outer step and int8 deltas",
    "Not a figure of the paper, which trains with FedAvg and full-precision updates. "
    "DiLoCo's Nesterov outer step (OpenDiLoCo: lr 0.7, momentum 0.9) raises what a round "
    "buys; int8 deltas (INTELLECT-1) send a quarter of the bytes.",
    tuple(v.name for v in VARIANTS),
    ("powertrip", "adaptive", "sweep"),
    variant_arms={
        **{v.name: ("sweep",) for vs in GRID_VARIANTS.values() for v in vs},
        **{v.name: ("sweep",) for vs in FEDAVGM_VARIANTS.values() for v in vs},
        **{
            v.name: ("powertrip", "adaptive", "sweep")
            for vs in HELDOUT_VARIANTS.values()
            for v in vs
        },
    },
)
TABLE_TITLE = "Times per seed"


def load(out: Path, meta: Mapping[str, Any]) -> dict[str, VariantData]:
    """Per set-up S: 'S/train' (FedAvg's sweep on seeds 0-4, its k*), 'S/heldout' (FedAvg
    on seeds 10-14); per grid point G (Nesterov's or FedAvgM's): 'G/train' (static k* on
    seeds 0-4); per held-out variant H: 'H/heldout'. Set-ups and points without runs are left
    out."""
    grid = [int(k) for k in meta.get("sweep_k") or []]
    data: dict[str, VariantData] = {}
    for base in BASES:
        train, groups = heldout.load_setup(out, base, grid)
        if train.kstar is None:
            continue
        data[f"{base.name}/train"] = train
        data[f"{base.name}/heldout"] = groups["heldout"]
        arm = static_arm(train.kstar).name
        for v in (*GRID_VARIANTS[base.name], *FEDAVGM_VARIANTS[base.name]):
            got = load_variant(out, v.name, v.label, [arm], heldout.TRAIN_SEEDS, [])
            if any(got.runs.values()):
                data[f"{v.name}/train"] = got
        for v in HELDOUT_VARIANTS.get(base.name, ()):
            got = heldout.load_group(out, v, heldout.HELDOUT_SEEDS, train)
            if any(got.runs.values()):
                data[f"{v.name}/heldout"] = got
    return data


def _row(claim: str, expect: str, diffs: list[float], marks: str, seeds: list[int], why: str):
    p = paired(diffs)
    return C.ClaimRow(
        "outer",
        claim,
        expect,
        heldout.fmt_paired(p, marks),
        p.verdict(marks),
        len(seeds),
        why=f"seeds {seeds}; {why}",
    )


def _chosen_row(d: Mapping[str, VariantData], base: str, kstar: int) -> C.ClaimRow:
    point, means = chosen(d, base), grid_means(d, base)
    expect = (
        f"the product's default: lr {PRODUCT[0]:g}, momentum {PRODUCT[1]:g} "
        "(powertrip/core/outer.py)"
    )
    claim = (
        f"{base}: the outer step chosen on the training seeds (lowest mean time to target at "
        f"static k* = {kstar})"
    )
    if point is None:
        return C.ClaimRow("outer", claim, expect, "not run", "n/a", 0)
    at = edges(point)
    shape = "corner" if len(at) == 2 else "edge"
    where = (
        f"; at the grid's {shape} ({' and '.join(at)}): the best may lie outside the grid"
        if at
        else "; inside the grid"
    )
    return C.ClaimRow(
        "outer",
        claim,
        expect,
        f"lr {point[0]:g}, momentum {point[1]:g} ({means[point]:+.1%} against FedAvg){where}",
        "yes" if point == PRODUCT else "no",
        len(heldout.TRAIN_SEEDS),
        why=f"effective step lr / (1 - momentum) {effective_step(*point):g} against FedAvg's 1; "
        + NOT_RUN + "; " + _fedavgm_status(d, base),
    )  # fmt: skip


def _fedavgm_status(d: Mapping[str, VariantData], base: str) -> str:
    """What the tuned FedAvg baseline (FedAvgM's grid) says so far, for the chosen row."""
    point = chosen(d, base, "fedavgm")
    if point is None:
        return (
            "FedAvg with a tuned server lr and momentum (FedAvgM, a grid as large: the rows "
            "below) has not been run yet"
        )
    mean = grid_means(d, base, "fedavgm")[point]
    return f"FedAvgM's best point lr {point[0]:g}, momentum {point[1]:g} ({mean:+.1%})"


def _grid_rows(
    d: Mapping[str, VariantData], base: str, train: VariantData, optimizer: str
) -> list[C.ClaimRow]:
    """One row per point of `optimizer`'s grid: the point against FedAvg at static k*,
    paired by training seed."""
    arm = static_arm(train.kstar).name
    grid, variants = GRIDS[optimizer]
    expect = {
        "nesterov": "chooses the outer step (lowest mean)",
        "fedavgm": "tunes FedAvg (lowest mean: FedAvg's strongest reading)",
    }[optimizer]
    rows = []
    for (lr, mu), v in zip(grid, variants[base], strict=True):
        got = d.get(f"{v.name}/train")
        diffs, marks, seeds = paired_by_seed(got, arm, train, arm) if got else ([], "", [])
        rows.append(_row(
            f"{base}: {OPTIMIZER_LABEL[optimizer]} (lr {lr:g}, momentum {mu:g}) against FedAvg "
            f"at static k* = {train.kstar}, training seeds",
            expect, diffs, marks, seeds,
            f"time to target, paired by seed; effective step {effective_step(lr, mu):g}",
        ))  # fmt: skip
    return rows


def _against_tuned_fedavg(d: Mapping[str, VariantData], base: str, kstar: int) -> C.ClaimRow:
    """The chosen Nesterov point against the chosen FedAvgM point at static k*, paired by
    training seed: the outer step against FedAvg's strongest reading (both chosen on these
    seeds, by the same rule, from grids as large)."""
    arm = static_arm(kstar).name
    points = {o: chosen(d, base, o) for o in GRIDS}
    runs = {
        o: d.get(f"{GRIDS[o][1][base][GRIDS[o][0].index(pt)].name}/train")
        for o, pt in points.items()
        if pt is not None
    }
    claim = (
        f"{base}: the chosen Nesterov step against the chosen FedAvgM step (a tuned FedAvg) at "
        f"static k* = {kstar}, training seeds"
    )
    expect = "time to target falls (the outer step beats FedAvg's strongest reading)"
    if len(runs) < len(GRIDS):
        return C.ClaimRow("outer", claim, expect, "not run", "n/a", 0)
    diffs, marks, seeds = paired_by_seed(runs["nesterov"], arm, runs["fedavgm"], arm)
    return _row(
        claim, expect, diffs, marks, seeds,
        f"Nesterov lr {points['nesterov'][0]:g}, momentum {points['nesterov'][1]:g}; FedAvgM "
        f"lr {points['fedavgm'][0]:g}, momentum {points['fedavgm'][1]:g}; both chosen on these "
        "seeds",
    )  # fmt: skip


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    rows = []
    for base in BASES:
        train = d.get(f"{base.name}/train")
        if train is None:
            continue
        rows.extend(_grid_rows(d, base.name, train, "nesterov"))
        rows.append(_chosen_row(d, base.name, train.kstar))
        rows.extend(_grid_rows(d, base.name, train, "fedavgm"))
        rows.append(_against_tuned_fedavg(d, base.name, train.kstar))
        rows.extend(_heldout_rows(d, base, train))
    return rows


def _heldout_rows(d: Mapping[str, VariantData], base: Variant, train: VariantData) -> list:
    rows = []
    fedavg = d.get(f"{base.name}/heldout")
    k = train.kstar
    for v in HELDOUT_VARIANTS.get(base.name, ()):
        got = d.get(f"{v.name}/heldout")
        if fedavg is None or got is None:
            continue
        arm = static_arm(k).name
        what = v.name.removeprefix(base.name + "-")
        rows.append(_row(
            f"{base.name}: {what} against FedAvg, static k* = {k}, held-out seeds",
            "time to target falls", *paired_by_seed(got, arm, fedavg, arm),
            "FedAvg runs of figure heldout",
        ))  # fmt: skip
        for policy in heldout.ONLINE:
            rows.append(_row(
                f"{base.name}: {what}, {policy} against static k* = {k}, held-out seeds",
                "the gap to static k* under FedAvg (figure heldout's row)",
                *paired_by_seed(got, policy, got, arm), "both under the same outer step",
            ))  # fmt: skip
        best = [heldout.oracle(got, s) for s in got.seeds]
        ks = [b[0] for b in best if b is not None]
        rows.append(
            C.ClaimRow(
                "outer",
                f"{base.name}: {what}, each held-out seed's own best static k",
                f"k* = {k} under FedAvg",
                ", ".join(str(x) for x in ks) or "not run",
                "n/a",
                len(ks),
                why=f"grid {got.sweep}; M on the wire "
                f"{1.5 * WIRE_SHARE[v.overrides.get('delta_encoding', 'fp32')]:g} GB a site "
                "and round",
            )
        )
    rows.extend(_int8_rows(d, base, k))
    return rows


def _int8_rows(d: Mapping[str, VariantData], base: Variant, k: int) -> list:
    """int8 deltas against fp32 under the same chosen outer step, per arm: the rows that
    chose the product's `delta_encoding`."""
    pair = HELDOUT_VARIANTS.get(base.name)
    fp32, int8 = (d.get(f"{v.name}/heldout") for v in pair) if pair else (None, None)
    if fp32 is None or int8 is None:
        return []
    return [
        _row(
            f"{base.name}: int8 deltas against fp32, both under the chosen outer step, {arm}, "
            "held-out seeds",
            "time to target falls (chooses the product's delta_encoding)",
            *paired_by_seed(int8, arm, fp32, arm),
            "a quarter of the bytes on the wire; chosen on these seeds, so for the encoding "
            "they are not held out",
        )
        for arm in (static_arm(k).name, *heldout.ONLINE)
    ]


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    """The grid's mean relative time at static k* against FedAvg, per set-up."""
    means = {b.name: grid_means(d, b.name) for b in BASES}
    if not any(means.values()):
        return []
    fig = new_figure(6.5, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(BASES)
    for i, base in enumerate(BASES):
        ys = [100 * means[base.name].get(p, math.nan) for p in GRID]
        xs = np.arange(len(GRID)) + (i - (len(BASES) - 1) / 2) * width
        ax.bar(xs, ys, width, label=base.name)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(GRID)), [f"lr {lr:g}\nm {mu:g}" for lr, mu in GRID])
    ax.set_ylabel("time to target vs FedAvg (%)")
    ax.set_title("Nesterov outer step at static k*, seeds 0-4")
    ax.legend(fontsize=8)
    return [save_figure(fig, out / "outer_grid.png")]
