"""The feedback signals PowerTrip's rule reads from the history (paper Eq. 5, §3.3, §4).

Pure functions of the per-round accuracies, measured round times and sizes k, so each can be
tested on a hand-made history; `powertrip.py` combines them into the decision (and
`adaptive.py` uses the `stall_rounds` option's floor too).
"""

from __future__ import annotations

import math

import numpy as np

#: a round counts towards patience when its efficiency is below this share of the measured one
BELOW_SHARE = 0.5


def rounds_without_gain(accuracies: list[float]) -> int:
    """How many of the latest rounds did not beat the best accuracy seen before them."""
    best = -math.inf
    streak = 0
    for acc in accuracies:
        if acc > best:
            best, streak = acc, 0
        else:
            streak += 1
    return streak


def stall_floor(
    accuracies: list[float], ks: list[int], stall_rounds: int, step: int, n: int
) -> tuple[int, int]:
    """(floor on k, rounds since the last new best accuracy or floor rise) for the
    `stall_rounds` option (not the paper's).

    A fixed set of sites levels off at an accuracy set by the data it holds (at the plateau
    target 7 sites stopped at 59-60 %, results/plateau-policies): once no round has beaten
    the best accuracy for `stall_rounds` rounds, the floor rises to `step` sites above the
    largest k of those rounds (at most n), and the count starts again. Replayed from the
    whole history, so a policy that uses it stays a pure function of its history."""
    best = -math.inf
    floor = since = largest = 0
    for acc, k in zip(accuracies, ks, strict=True):
        if acc > best:
            best, since, largest = acc, 0, 0
            continue
        since += 1
        largest = max(largest, k)
        if since >= stall_rounds:
            floor = min(n, max(floor, largest) + step)
            since = largest = 0
    return floor, since


def apply_stall_floor(
    k: int,
    accuracies: list[float],
    ks: list[int],
    stall_rounds: float,
    step: int,
    n: int,
    explanation: dict,
) -> int:
    """k raised to the `stall_rounds` floor (an option of `powertrip` and `adaptive`, not the
    paper's); records the floor in `explanation` and says so in its reason when it binds.
    `stall_rounds` as the parameter gives it: rounded up to whole rounds, at least 1 (0.5
    is 1 round, never 0)."""
    rounds = max(1, math.ceil(stall_rounds))
    floor, since = stall_floor(accuracies, ks, rounds, step, n)
    explanation.update(stall_floor=floor, rounds_without_new_best=since)
    if floor > k:
        explanation["reason"] += (
            f"; raised to the floor k={floor} (stall_rounds {rounds}: a set that stopped "
            "beating the best accuracy for that many rounds is not enough)"
        )
        return floor
    return k


def recent_gain(accuracies: list[float], window: int) -> float:
    """Mean per-round accuracy change over the last `window` rounds (first round: vs 0)."""
    series = [0.0, *accuracies]
    diffs = np.diff(series[-(window + 1) :])
    return float(np.mean(diffs)) if len(diffs) else 0.0


def gains_of(accuracies: list[float]) -> np.ndarray:
    """Per-round accuracy gains dA_j, the first measured from 0."""
    return np.diff(np.array([0.0, *accuracies], dtype=np.float64))


def measured_efficiency(gains: np.ndarray, times: np.ndarray, window: int) -> float:
    """Eq. 5 over the last `window` rounds: accuracy gained per second of measured time."""
    total = float(np.sum(times[-window:]))
    return float(np.sum(gains[-window:])) / total if total > 0 else 0.0


def trend_series(gains: np.ndarray, window: int) -> np.ndarray:
    """The trend g after each round: mean gain over the `window` rounds ending there."""
    sums = np.cumsum(gains)
    counts = np.minimum(np.arange(1, len(gains) + 1), window)
    shifted = np.concatenate([np.zeros(window), sums])[: len(gains)]
    return (sums - shifted) / counts


def training_phase(trends: np.ndarray) -> float:
    """phi = 1 - g / g_peak in [0, 1]: 0 while gains are at their peak, towards 1 as they
    decay (and 1 once there is no gain at all)."""
    g, peak = float(trends[-1]), float(np.max(trends))
    if g <= 0 or peak <= 0:
        return 1.0
    return float(min(1.0, max(0.0, 1.0 - g / peak)))


def rounds_below(gains: np.ndarray, times: np.ndarray, window: int) -> int:
    """How many of the latest rounds had a realised efficiency below BELOW_SHARE of the
    measured efficiency of the `window` rounds before each of them (rule=feedback)."""
    return realised_below(gains, times, window, BELOW_SHARE, len(gains))


def projected_gain(g: float, phi: float, k: np.ndarray, k_cur: int) -> np.ndarray:
    """dA(k) = g * (1 + phi * ln(k / k_cur)), never below zero."""
    return np.maximum(0.0, max(g, 0.0) * (1.0 + phi * np.log(k / k_cur)))


def last_growth(ks: list[int]) -> tuple[int, int, int] | None:
    """(c, a, b) when the latest change of k was a growth a -> b, first used in round index
    c; None when k never changed or last shrank."""
    for c in range(len(ks) - 1, 0, -1):
        if ks[c] != ks[c - 1]:
            return (c, ks[c - 1], ks[c]) if ks[c] > ks[c - 1] else None
    return None


#: a reverted addition keeps k below its size for this many trend windows, then may be
#: tried again (training has moved on, and more sites may pay by then)
RETRY_AFTER_WINDOWS = 3


def failed_growths(ks: list[int], window: int) -> list[tuple[int, int]]:
    """(size, round index of the revert) for every trial that was reverted: a growth a -> b
    held for `window` rounds and then taken back to a."""
    failed = []
    for c in range(1, len(ks) - window):
        a, b = ks[c - 1], ks[c]
        if b > a and all(k == b for k in ks[c : c + window]) and ks[c + window] == a:
            failed.append((b, c + window))
    return failed


def best_in_window(eff: np.ndarray, measured: float) -> int:
    """Index of the candidate (k_cur first, then k_cur+1, ...) the greedy addition ends at:
    the count with the best projected efficiency in the window (§3.3), taken only if it
    beats the measured efficiency (§4: "compared to the previously measured performance");
    otherwise index 0, the current k. Ties go to the smaller k."""
    pick = int(np.argmax(eff))
    return pick if pick > 0 and eff[pick] > measured else 0


def realised_below(
    gains: np.ndarray, times: np.ndarray, window: int, share: float, last: int
) -> int:
    """How many of the latest `last` rounds in a row had a realised efficiency dA_j / T_j
    below `share` x the measured efficiency (Eq. 5) of the `window` rounds before each; a
    round with no rounds before it never counts."""
    streak = 0
    for j in range(len(gains) - 1, max(0, len(gains) - last) - 1, -1):
        if j == 0:
            break
        reference = measured_efficiency(gains[:j], times[:j], window)
        if reference > 0 and gains[j] / times[j] < share * reference:
            streak += 1
        else:
            break
    return streak
