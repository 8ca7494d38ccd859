"""The outer study's grids (reproduction/paper/outer_study.py): Nesterov's points and
FedAvgM's (a tuned FedAvg, as many points), their set-ups, and the point a grid's finished
runs choose: the lowest mean time to target against FedAvg at static k* on seeds 0-4."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from powertrip.app.experiments.suite import Variant, static_arm
from reproduction.paper import heldout
from reproduction.paper.data import UNIFORM, VariantData
from reproduction.paper.fig12 import TRACE
from reproduction.paper.paired import relative

BASES: tuple[Variant, ...] = (UNIFORM, TRACE)
#: (outer_lr, outer_momentum): OpenDiLoCo's 0.7 and 0.9, half its learning rate, and a
#: momentum of 0.5 beside each; fixed before the first run
GRID: tuple[tuple[float, float], ...] = ((0.35, 0.5), (0.35, 0.9), (0.7, 0.5), (0.7, 0.9))
#: FedAvgM's (outer_lr, outer_momentum), as many points as `GRID`: FedAvg's own lr 1 and
#: OpenDiLoCo's 0.7, each with momentum 0.5 and 0.9 (lr 1 and 0.9: Hsu et al.'s server
#: momentum; effective steps lr / (1 - momentum) 1.4, 2, 7 and 10 span Nesterov's chosen 7);
#: fixed before the first run
FEDAVGM_GRID: tuple[tuple[float, float], ...] = ((0.7, 0.5), (0.7, 0.9), (1.0, 0.5), (1.0, 0.9))


def nesterov(base: Variant, lr: float, momentum: float, int8: bool = False) -> Variant:
    """`base` with the Nesterov outer step (and int8 deltas)."""
    name = f"{base.name}-nesterov-lr{lr:g}-m{momentum:g}" + ("-int8" if int8 else "")
    overrides = {
        **base.overrides,
        "outer_optimizer": "nesterov",
        "outer_lr": lr,
        "outer_momentum": momentum,
        **({"delta_encoding": "int8"} if int8 else {}),
    }
    label = f"{base.label}, Nesterov outer step (lr {lr:g}, momentum {momentum:g})"
    return Variant(name, label + (", int8 deltas" if int8 else ""), overrides)


def fedavgm(base: Variant, lr: float, momentum: float) -> Variant:
    """`base` with FedAvgM's outer step (FedAvg with server momentum)."""
    overrides = {
        **base.overrides,
        "outer_optimizer": "fedavgm",
        "outer_lr": lr,
        "outer_momentum": momentum,
    }
    label = f"{base.label}, FedAvgM outer step (lr {lr:g}, momentum {momentum:g})"
    return Variant(f"{base.name}-fedavgm-lr{lr:g}-m{momentum:g}", label, overrides)


GRID_VARIANTS: dict[str, tuple[Variant, ...]] = {
    b.name: tuple(nesterov(b, lr, mu) for lr, mu in GRID) for b in BASES
}
FEDAVGM_VARIANTS: dict[str, tuple[Variant, ...]] = {
    b.name: tuple(fedavgm(b, lr, mu) for lr, mu in FEDAVGM_GRID) for b in BASES
}


def paired_by_seed(
    a: VariantData, arm_a: str, b: VariantData, arm_b: str
) -> tuple[list[float], str, list[int]]:
    """(t_a - t_b) / t_b per seed both finished."""
    diffs, marks, seeds = [], "", []
    for seed in sorted(set(a.all_seeds) & set(b.all_seeds)):
        x, y = heldout.time_of(a, seed, arm_a), heldout.time_of(b, seed, arm_b)
        if x is None or y is None:
            continue
        value, mark = relative(x, y)
        diffs.append(value)
        marks += mark
        seeds.append(seed)
    return diffs, marks, seeds


#: optimizer -> (its grid, set-up -> the grid's variants)
GRIDS: dict[str, tuple[tuple[tuple[float, float], ...], dict[str, tuple[Variant, ...]]]] = {
    "nesterov": (GRID, GRID_VARIANTS),
    "fedavgm": (FEDAVGM_GRID, FEDAVGM_VARIANTS),
}
OPTIMIZER_LABEL = {"nesterov": "Nesterov", "fedavgm": "FedAvgM"}


def grid_means(
    d: Mapping[str, VariantData], base: str, optimizer: str = "nesterov"
) -> dict[tuple[float, float], float]:
    """Each grid point's mean (t_point - t_fedavg) / t_fedavg at static k*, seeds 0-4, of
    `optimizer`'s grid (Nesterov's `GRID`, FedAvgM's `FEDAVGM_GRID`)."""
    train = d.get(f"{base}/train")
    grid, variants = GRIDS[optimizer]
    found = {}
    for (lr, mu), v in zip(grid, variants[base], strict=True):
        got = d.get(f"{v.name}/train")
        if train is None or got is None:
            continue
        arm = static_arm(train.kstar).name
        diffs, _, seeds = paired_by_seed(got, arm, train, arm)
        if len(seeds) == len(heldout.TRAIN_SEEDS):
            found[(lr, mu)] = float(np.mean(diffs))
    return found


def chosen(
    d: Mapping[str, VariantData], base: str, optimizer: str = "nesterov"
) -> tuple[float, float] | None:
    """The grid point with the lowest mean time to target against FedAvg at static k* on the
    training seeds; None until every point has finished on all of them."""
    means = grid_means(d, base, optimizer)
    if len(means) < len(GRIDS[optimizer][0]):
        return None
    return min(means, key=means.__getitem__)


def edges(point: tuple[float, float], grid: tuple[tuple[float, float], ...] = GRID) -> list[str]:
    """Which ends of the grid `point` sits at ('the largest lr', ...): where the best may lie
    outside the grid."""
    out = []
    for i, name in enumerate(("lr", "momentum")):
        values = sorted({p[i] for p in grid})
        if point[i] == values[-1]:
            out.append(f"the largest {name} {values[-1]:g}")
        elif point[i] == values[0]:
            out.append(f"the smallest {name} {values[0]:g}")
    return out


def effective_step(lr: float, momentum: float) -> float:
    """lr / (1 - momentum): how far a steady pseudo-gradient moves the model a round; FedAvg's
    is 1."""
    return lr / (1.0 - momentum)
