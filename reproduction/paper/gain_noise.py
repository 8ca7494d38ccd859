"""Can a run tell one k from another by its own progress? (Not a figure of the paper.)

On the ideal set-up (identical sites, free links) a site costs no round time, so an online
rule can place k only by how much a round buys at each k. This measures that difference and
its noise on the static runs, pair by pair: seed s trained at k = small and at k = large
shares its data, its sites and its start, so the difference of the two runs' progress is the
effect of k plus the noise a comparison of two runs really has.

Progress over the first R rounds is measured from the shared starting model:
(x_R - x_0) / R, x the held-out accuracy or loss and x_0 the reading of the model both runs
of a seed start from. x_0 is the same for both, so it cancels in their difference, which is
(x_R(small) - x_R(large)) / R: one reading of each run. Measuring from round 1 instead,
(x_R - x_1) / (R - 1), carried two readings of each run, and the round-1 readings of the two
runs (already apart after one round at different k) made about half of the difference at
R = 5. Taking the spread of the paired differences across seeds, at the same R, keeps each
reading's noise in: it is the run-level noise, with no model of the rounds inside it.

At each horizon R (up to the shortest run) the row gives the mean paired difference d, its
spread sd over seeds, and the pairs of runs that 2 standard errors need, (2 sd / d)^2; the
claim holds where one pair of runs resolves d (|d| > 2 sd) within the runs' length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from powertrip.app.report import claims as C
from powertrip.app.report.result import RunResult

#: the signals a run can read its progress from: rounds.csv column and a reader's name
SIGNALS: dict[str, str] = {"accuracy": "accuracy", "loss": "held-out loss"}
#: the horizons at which the pairs are compared, while every run is still that long
HORIZONS = (5, 10, 15, 20, 25, 30)
Z = 2.0


def reading(run: RunResult, column: str, horizon: int) -> float:
    """x_R, the run's reading after round `horizon`; nan if it is shorter."""
    x = run.column(column) if run.rounds else np.array([])
    if len(x) < horizon or horizon < 1:
        return float("nan")
    return float(x[horizon - 1])


def paired_differences(
    small: Mapping[int, RunResult], large: Mapping[int, RunResult], column: str, horizon: int
) -> list[float]:
    """Per seed with both runs at least `horizon` rounds long: progress per round from the
    shared start at k = small minus at k = large, (x_R(small) - x_R(large)) / R (x_0
    cancels)."""
    diffs = []
    for seed in sorted(set(small) & set(large)):
        ours, theirs = reading(small[seed], column, horizon), reading(large[seed], column, horizon)
        d = (ours - theirs) / horizon
        if np.isfinite(d):
            diffs.append(d)
    return diffs


def pairs_to_resolve(difference: float, spread: float, z: float = Z) -> float:
    """Pairs of runs for the mean paired difference to clear z standard errors:
    z spread / sqrt(n) < |d|."""
    return (z * spread / difference) ** 2 if difference else float("inf")


def resolution_rows(
    static: Mapping[int, Mapping[int, RunResult]], small: int, large: int
) -> list[C.ClaimRow]:
    """One claim per signal: can one pair of runs tell k = `small` from `large` by it (see
    the module's docstring); `static` maps k -> seed -> finished static run."""
    a, b = static.get(small, {}), static.get(large, {})
    shared = sorted(set(a) & set(b))
    rows = []
    for column, name in SIGNALS.items():
        claim = (
            f"one pair of runs (k = {small} and k = {large}, one seed) tells them apart by its "
            f"{name} (ideal set-up)"
        )
        paper = "- (what an online rule needs where a site costs no time)"
        if len(shared) < 3:
            rows.append(C.ClaimRow("heldout", claim, paper, "not run", "n/a"))
            continue
        shortest = min(len(r.rounds) for r in (*a.values(), *b.values()))
        cells, first, signs = [], None, []
        for horizon in (h for h in HORIZONS if h <= shortest):
            diffs = np.array(paired_differences(a, b, column, horizon))
            d, sd = float(diffs.mean()), float(diffs.std(ddof=1))
            cells.append(
                f"R = {horizon}: d = {d:+.4f}, sd = {sd:.4f}, {pairs_to_resolve(d, sd):,.1f} pairs"
            )
            if first is None and abs(d) > Z * sd:
                first = horizon
            if first is not None:
                signs.append((horizon, np.sign(d)))
        # resolved, and the ordering it resolved stays at every longer horizon: a difference
        # whose sign flips later told the two k apart by the noise of one stretch of rounds
        flip = next((h for h, sign in signs if sign != signs[0][1]), None) if signs else None
        holds = "yes" if first is not None and flip is None else "no"
        rows.append(
            C.ClaimRow(
                "heldout",
                claim,
                paper,
                "; ".join(cells),
                holds,
                len(shared),
                why=f"d: progress per round from the shared starting model at k = {small} minus "
                f"k = {large} over the first R rounds, (x_R(k={small}) - x_R(k={large})) / R, "
                "paired by seed; sd its spread over seeds; pairs for 2 se = (2 sd / d)^2; one "
                "pair resolves at R = "
                + (str(first) if first is not None else f"none up to {shortest}")
                + (f", but the ordering flips by R = {flip}" if flip is not None else ""),
            )
        )
    return rows


def static_runs(
    data: Sequence[Mapping[str, Mapping[int, RunResult]]], arms: Mapping[int, str]
) -> dict[int, dict[int, RunResult]]:
    """k -> seed -> run, gathered from several set-ups' runs ({arm: {seed: run}}) for the
    static arms named in `arms` (k -> arm name)."""
    return {k: {s: r for d in data for s, r in d.get(arm, {}).items()} for k, arm in arms.items()}
