"""Can a run tell one k from another by its own gains? (Not a figure of the paper.)

On the ideal set-up (identical sites, free links) a site costs no round time, so an online
rule can place k only by how much a round gains at each k. Here that difference, measured on
the static runs of every seed, is set against one round's gain noise as `adaptive`'s own fits
measured it: the rounds it would take to resolve, against the rounds a run lasts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from powertrip.app.report import claims as C
from powertrip.app.report.result import RunResult
from powertrip.core import runfiles


def mean_gain(run: RunResult) -> float:
    """A run's accuracy gained per round after its first: (A_R - A_1) / (R - 1)."""
    acc = run.column("accuracy") if run.rounds else np.array([])
    return float((acc[-1] - acc[0]) / (len(acc) - 1)) if len(acc) > 1 else float("nan")


def fitted_noise(runs: Sequence[RunResult], min_points: int = 6) -> list[float]:
    """One round's gain noise as `adaptive` saw it: the sigma of each of its fits with at
    least `min_points` gains, read from the runs' decisions.jsonl."""
    sigmas = []
    for run in runs:
        path = run.path / runfiles.DECISIONS
        for line in path.read_text().splitlines() if path.exists() else []:
            fit = (json.loads(line).get("explanation") or {}).get("fit") or {}
            if fit.get("points", 0) >= min_points and fit.get("sigma"):
                sigmas.append(float(fit["sigma"]))
    return sigmas


def rounds_to_resolve(difference: float, sigma: float, z: float = 2.0) -> float:
    """Rounds at each of two k for the difference of their mean gains to clear z standard
    errors when one round's gain has noise sigma: z se < d with se = sigma sqrt(2 / n)."""
    return 2 * (z * sigma / difference) ** 2 if difference else float("inf")


def resolution_claim(
    static: Mapping[int, Sequence[RunResult]], online: Sequence[RunResult], small: int, large: int
) -> C.ClaimRow:
    """Not the paper's: on the ideal set-up a site costs no time, so an online rule can
    find k* only from the gains; can a run tell k = `small` from `large` by them? The
    difference of their mean gains per round (static runs, every seed) against the noise of
    one round's gain as adaptive's own fits measured it (`online` runs). It holds when
    the rounds needed at each k fit in half of the shortest run (a run must try both)."""
    gains = {k: [mean_gain(r) for r in static.get(k, ())] for k in (small, large)}
    sigmas = fitted_noise(online)
    claim = f"a run can tell k = {small} from k = {large} by its gains (ideal set-up)"
    paper = "- (what an online rule needs where a site costs no time)"
    if not all(gains.values()) or not sigmas:
        return C.ClaimRow("heldout", claim, paper, "not run", "n/a")
    d = float(np.mean(gains[small]) - np.mean(gains[large]))
    sigma = float(np.median(sigmas))
    need = rounds_to_resolve(abs(d), sigma)
    lengths = [len(r.rounds) for k in (small, large) for r in static[k]]
    ours = (
        f"gain per round {np.mean(gains[small]):.4f} at k = {small}, "
        f"{np.mean(gains[large]):.4f} at k = {large} (d = {d:.4f}); one round's noise "
        f"{sigma:.3f} (median of {len(sigmas)} fits); 2 se need {need:,.0f} rounds at each k, "
        f"the runs last {min(lengths)}-{max(lengths)}"
    )
    holds = need <= min(lengths) / 2
    why = "rounds = 2 (2 sigma / d)^2" + ("" if holds else "; where T(k) is flat, k moves on noise")
    return C.ClaimRow(
        "heldout", claim, paper, ours, "yes" if holds else "no", len(gains[small]), why=why
    )
