"""Paper Fig. 11: accuracy gain of 50 and 100 sites over 10, per round (§5.3)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite
from powertrip.app.report import claims as C
from powertrip.app.report.figures import new_figure, save_figure
from reproduction.paper.data import VariantData, facts
from reproduction.paper.fig06_07 import IDEAL

#: Fig. 11 compares accuracy per round, so every run trains the same number of rounds. Which
#: sites' power and links the clock charges does not change what a round trains, so the
#: figure reads the fixed-round runs of Figs. 6-7 (identical sites, 10/20/50/100 sites)
#: rather than training its own: the same training, paid for once.
ROUNDS = IDEAL

SUITE = Suite(
    "11",
    "Accuracy gain of 50 and 100 sites over 10 per round",
    "Paper Fig. 11: accuracy gain of the 50- and 100-site configurations over 10 sites, "
    "per round. In the first 10-20 rounds the gain is small; more sites converge faster "
    "only later.",
    (ROUNDS.name,),
    ("static-k@0.1", "static-k@0.5", "static-k@1.0"),
    show_sweep=True,
)
VARIANTS = ()  # its set-up is Figs. 6-7's


def accuracy_gaps(v: VariantData, big: str, small: str) -> list[np.ndarray]:
    """Per complete seed: accuracy(big) - accuracy(small) per round (common rounds)."""
    gaps = []
    for seed in v.seeds:
        a, b = v.runs[big][seed], v.runs[small][seed]
        n = min(len(a.rounds), len(b.rounds))
        gaps.append(a.column("accuracy")[:n] - b.column("accuracy")[:n])
    return gaps


def fig11_arms(v: VariantData) -> tuple[str, str, str]:
    ks = sorted(int(a.removeprefix("static-k")) for a in v.arms)
    return f"static-k{ks[0]}", f"static-k{ks[len(ks) // 2]}", f"static-k{ks[-1]}"


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    v = d[ROUNDS.name]
    small, mid, big = fig11_arms(v)
    rows = []
    for arm in (mid, big):
        gaps = accuracy_gaps(v, arm, small) if v.seeds else []
        n_rounds = min((len(g) for g in gaps), default=0)
        early = min(10, n_rounds)
        if not gaps or not early:
            rows.append(
                C.ClaimRow(
                    "11",
                    f"{arm} gains little over {small} in the first rounds",
                    "small in the first 10-20 rounds",
                    "not run",
                    "n/a",
                    0,
                )
            )
            continue
        est = C.mean_ci(float(np.mean(g[:early])) for g in gaps)
        row = C.ClaimRow(
            "11",
            f"{arm} gains little over {small} in the first {early} rounds "
            f"(mean gap < {C.SMALL_GAIN * 100:g} points)",
            "small in the first 10-20 rounds",
            f"{C.fmt_estimate(est, ' points', scale=100, digits=1)} mean accuracy gap",
            C.holds_below(est, C.SMALL_GAIN),
            est.n,
        )
        row.differs = row.holds != "yes"
        rows.append(row)
        last = C.mean_ci(float(g[n_rounds - 1]) for g in gaps)
        grow = C.ClaimRow(
            "11",
            f"{arm} is ahead of {small} after {n_rounds} rounds",
            "more sites converge faster eventually",
            f"{C.fmt_estimate(last, ' points', scale=100, digits=1)} at round {n_rounds}",
            C.holds_positive([C.Bound(float(g[n_rounds - 1])) for g in gaps]),
            last.n,
        )
        grow.differs = grow.holds != "yes"
        rows.append(grow)
    for row in rows:
        if row.differs:
            row.reasons.append(f"{v.config().get('max_rounds', '?')} rounds per run")
    return C.finish(rows, facts(v, meta))


def plot_accuracy_gain(v: VariantData, path: Path) -> Path:
    small, mid, big = fig11_arms(v)
    fig = new_figure(7.5, 4.4)
    ax = fig.add_subplot()
    for arm, color in ((mid, "tab:blue"), (big, "tab:green")):
        gaps = accuracy_gaps(v, arm, small) if v.seeds else []
        n = min((len(g) for g in gaps), default=0)
        if not n:
            continue
        matrix = np.array([g[:n] for g in gaps]) * 100
        mean = matrix.mean(axis=0)
        rounds = np.arange(1, n + 1)
        ax.plot(rounds, mean, color=color, marker="o", ms=3, label=f"{arm} - {small}")
        if matrix.shape[0] > 1:
            half = np.array([C.mean_ci(matrix[:, j]).half_width for j in range(n)])
            ax.fill_between(rounds, mean - half, mean + half, color=color, alpha=0.15)
    ax.axhline(0, color="gray", lw=1)
    ax.axhline(C.SMALL_GAIN * 100, color="gray", ls=":", lw=1, label="'small' threshold")
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy gain (points), mean ± 95 % CI")
    ax.set_title("Accuracy gain over the smallest configuration, per round")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return save_figure(fig, path)


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    return [plot_accuracy_gain(d[ROUNDS.name], out / "fig11_accuracy_gain.png")]
