"""`adaptive`'s two floors under k (not the paper's): a set of sites that stopped improving, or
that levels off below the target, is not enough, however its gains compare across k.

Why. A fixed set of sites trains towards an accuracy set by the data it holds. A gain fit
over a dozen rounds at one k (`gainfit.py`) cannot see that: it reads a set that has levelled
off as one whose extra sites buy nothing, and may shrink k to one site and hold it there.
Two replays of the history say when k is too small whatever the fit says:

* the stall floor (`stall_rounds` R): once R rounds in a row have not beaten the best
  accuracy, k stays at least a step above the largest k of those rounds;
* the ceiling floor (`ceiling_rounds` W): once W or more rounds in a row ran at the current
  k, their accuracies are fitted to a saturating curve, and if even the highest ceiling
  they allow is below the run's target, k stays at least a step above that k.

Neither binds before a run has spent R (or W) rounds without progress (or at one k), so a
run that reaches its target climbing is left alone.

The ceiling, how (OUR CHOICE throughout). The accuracies of every round of the latest run at
one k (a window of a few dozen rounds cannot see a bend that takes a hundred) are fitted to
A_t = C - D exp(-lam t) (t = 0, 1, ... from the run's first round at this k) by least squares
for each lam on a geometric grid; C and D are linear for a fixed lam. The curves that fit
about as well as the best one (a likelihood-ratio bound: RSS <= RSS_min (1 + 3.84 / (n - 3))
over the n rounds fitted, 95 % for one parameter) give the ceilings the data allow; each
counts its own error too (C + 1.96 se(C), sigma from the best fit). The set is below the
target only when the highest of them is. A trend that shows no bend is fitted as well by a
small lam, whose ceiling is far above any target, so a run that is still climbing steadily
is never stopped by this check. Pure functions of the history, replayed on every decision,
so the policy holds no state.
"""

from __future__ import annotations

import math

import numpy as np

#: the rates lam (per round) the curve may fall off at: from almost linear to a step
RATE_GRID = np.geomspace(1e-3, 2.0, 64)
#: chi-square(1) at 95 %: curves within this likelihood ratio of the best fit are allowed
LR_BOUND = 3.84
#: a ceiling counts its own error at this many standard errors
CEILING_Z = 1.96
#: rates tried between two coarse grid points when the grid is refined
REFINE = 64


def _fits(y: np.ndarray, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each rate lam, the least-squares fit of y_t = C - D exp(-lam t): (RSS, C, and
    C's variance over sigma^2). A rate so large that exp(-lam t) is a step leaves no
    second column to fit: its RSS is inf."""
    n = len(y)
    u = np.exp(-np.outer(rates, np.arange(n, dtype=np.float64)))  # one row per lam
    u_mean = u.mean(axis=1)
    du = u - u_mean[:, None]
    sxx = np.einsum("ij,ij->i", du, du)
    ok = sxx > 1e-12 * n
    safe = np.where(ok, sxx, 1.0)
    slope = du @ (y - y.mean()) / safe
    ceiling = y.mean() - slope * u_mean  # the curve's value as exp(-lam t) -> 0
    residuals = y[None, :] - ceiling[:, None] - slope[:, None] * u
    rss = np.where(ok, np.einsum("ij,ij->i", residuals, residuals), math.inf)
    return rss, ceiling, 1.0 / n + u_mean**2 / safe


def ceiling_upper_bound(accuracies: np.ndarray) -> float:
    """The highest ceiling C of A_t = C - D exp(-lam t) that the accuracies allow (see the
    module's docstring); inf when they do not bend (or are too few to tell).

    The likelihood-ratio region in lam is often narrower than the coarse grid's step (a
    large rise in little noise pins lam down), so the grid is refined where it matters:
    around the best fit (for RSS_min), then across the allowed region and one coarse step
    beyond each of its ends (for the highest C)."""
    y = np.asarray(accuracies, dtype=np.float64)
    n = len(y)
    if n < 5:
        return math.inf
    rss, _, _ = _fits(y, RATE_GRID)
    if not np.isfinite(rss).any():
        return math.inf
    last = len(RATE_GRID) - 1
    i = int(np.argmin(rss))
    around = np.geomspace(RATE_GRID[max(i - 1, 0)], RATE_GRID[min(i + 1, last)], REFINE)
    best = min(float(rss[i]), float(np.min(_fits(y, around)[0])))
    limit = best * (1 + LR_BOUND / (n - 3)) + 1e-30
    inside = np.flatnonzero(rss <= limit)
    lo = RATE_GRID[max(int(inside.min()) - 1, 0)] if len(inside) else RATE_GRID[max(i - 1, 0)]
    hi = RATE_GRID[min(int(inside.max()) + 1, last)] if len(inside) else RATE_GRID[min(i + 1, last)]
    rates = np.concatenate([RATE_GRID, np.geomspace(lo, hi, 4 * REFINE)])
    rss, ceiling, var_factor = _fits(y, rates)
    sigma2 = max(best, 1e-30) / (n - 3)
    bound = ceiling + CEILING_Z * np.sqrt(sigma2 * var_factor)
    return float(np.max(np.where(rss <= limit, bound, -math.inf)))


def ceiling_floor(
    accuracies: list[float],
    ks: list[int],
    target: float,
    rounds: int,
    step: int,
    n: int,
) -> tuple[int, float]:
    """(floor on k, the latest ceiling bound checked, inf if none): the ceiling floor.

    Replays the history: whenever the latest run of rounds at one k is at least `rounds`
    long and the highest ceiling its accuracies allow is below `target`, the floor rises
    to `step` sites above that k (at most n), and the rounds at the new k start a new
    count. No target, no floor."""
    floor, bound, run = 0, math.inf, 0
    if not math.isfinite(target):
        return floor, bound
    for i, k in enumerate(ks):
        run = run + 1 if i > 0 and k == ks[i - 1] else 1
        if run < rounds or k < floor:
            continue
        bound = ceiling_upper_bound(np.asarray(accuracies[i + 1 - run : i + 1]))
        if bound < target:
            floor = min(n, max(floor, k) + step)
            run = 0
    return floor, bound


def apply_ceiling_floor(
    k: int,
    accuracies: list[float],
    ks: list[int],
    target: float,
    rounds: float,
    step: int,
    n: int,
    explanation: dict,
) -> int:
    """k raised to the ceiling floor; records the floor and the latest bound in
    `explanation` and says so in its reason when it binds."""
    window = max(5, math.ceil(rounds))
    floor, bound = ceiling_floor(accuracies, ks, target, window, step, n)
    explanation.update(
        ceiling_floor=floor, ceiling_bound=round(bound, 6) if math.isfinite(bound) else None
    )
    if floor > k:
        explanation["reason"] += (
            f"; raised to the floor k={floor} (ceiling_rounds {window}: a set whose accuracy "
            f"levels off below the target {target:g} is not enough)"
        )
        return floor
    return k


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
    """(floor on k, rounds since the last new best accuracy or floor rise): the stall floor.

    Once no round has beaten the best accuracy for `stall_rounds` rounds, the floor rises to
    `step` sites above the largest k of those rounds (at most n), and the count starts
    again. Replayed from the whole history, so a policy that uses it stays a pure function
    of its history."""
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
    """k raised to the stall floor; records the floor in `explanation` and says so in its
    reason when it binds.
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
