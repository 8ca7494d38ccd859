"""Can a run tell one k from another by its own progress? (Not a figure of the paper.)

On the ideal set-up (identical sites, free links) a site costs no round time, so an online
rule can place k only by how much a round buys at each k. This measures that difference and
its noise on the static runs, pair by pair: seed s trained at k = small and at k = large
shares its data, its sites and its start, so the difference of the two runs' progress is the
effect of k plus the noise a comparison of two runs really has.

Progress over the first R rounds is (x_R - x_1) / (R - 1), x the held-out accuracy or loss.
A per-round gain is a difference of two readings, so consecutive gains are negatively
correlated (an evaluation that reads high makes one gain large and the next small) and their
sum telescopes: the noise of a run's mean gain falls as 1/R, not 1/sqrt(R) as it would for
independent gains. Taking the spread of the paired differences across seeds, at the same R,
keeps that in: it is the run-level noise, with no model of the rounds inside it.

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


def progress(run: RunResult, column: str, horizon: int) -> float:
    """(x_R - x_1) / (R - 1) over the run's first `horizon` rounds; nan if it is shorter."""
    x = run.column(column) if run.rounds else np.array([])
    if len(x) < horizon or horizon < 2:
        return float("nan")
    return float((x[horizon - 1] - x[0]) / (horizon - 1))


def paired_differences(
    small: Mapping[int, RunResult], large: Mapping[int, RunResult], column: str, horizon: int
) -> list[float]:
    """Per seed with both runs at least `horizon` rounds long: progress at k = small minus
    at k = large."""
    diffs = []
    for seed in sorted(set(small) & set(large)):
        d = progress(small[seed], column, horizon) - progress(large[seed], column, horizon)
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
        cells, first = [], None
        for horizon in (h for h in HORIZONS if h <= shortest):
            diffs = np.array(paired_differences(a, b, column, horizon))
            d, sd = float(diffs.mean()), float(diffs.std(ddof=1))
            cells.append(
                f"R = {horizon}: d = {d:+.4f}, sd = {sd:.4f}, {pairs_to_resolve(d, sd):,.1f} pairs"
            )
            if first is None and abs(d) > Z * sd:
                first = horizon
        holds = "yes" if first is not None else "no"
        rows.append(
            C.ClaimRow(
                "heldout",
                claim,
                paper,
                "; ".join(cells),
                holds,
                len(shared),
                why=f"d: progress per round at k = {small} minus k = {large} over the first R "
                "rounds, paired by seed; sd its spread over seeds (the telescoping of per-round "
                f"gains is in it); pairs for 2 se = (2 sd / d)^2; one pair resolves at R = "
                + (str(first) if first is not None else f"none up to {shortest}"),
            )
        )
    return rows


def static_runs(
    data: Sequence[Mapping[str, Mapping[int, RunResult]]], arms: Mapping[int, str]
) -> dict[int, dict[int, RunResult]]:
    """k -> seed -> run, gathered from several set-ups' runs ({arm: {seed: run}}) for the
    static arms named in `arms` (k -> arm name)."""
    return {k: {s: r for d in data for s, r in d.get(arm, {}).items()} for k, arm in arms.items()}
