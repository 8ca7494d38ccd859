"""The per-round gain fit and the trial bookkeeping `adaptive` decides from.

Pure functions of the history (the rounds' k and accuracies), so each is tested on a
hand-made history; `adaptive.py` says how the decision uses them and why (every choice here
is OUR CHOICE: the paper has no such fit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import PastRound

#: gains needed in the window before k may move (a level, a state term, one residual dof)
MIN_FIT_POINTS = 3
#: relative tolerance: a candidate must beat the current efficiency by more than this
REL_TOL = 1e-9
#: Gauss-Newton iterations of the relative fit (it converges in a few)
GN_ITERATIONS = 20


def short(x: float) -> float | None:
    """A short JSON number; None for one that is not finite."""
    return float(f"{x:.6g}") if math.isfinite(x) else None


@dataclass(frozen=True)
class GainFit:
    """dA_j = level + slope ln(k_j / k_ref) + state (A_{j-1} - A_R), on the last rounds."""

    points: int = 0
    k_values: int = 0  # distinct k in the window
    level: float = 0.0  # L: the projected gain of the next round at k_ref
    state: float = 0.0  # c: change of the gain per unit of accuracy reached (0: not fitted)
    slope: float = 0.0  # s: gain per unit of ln k (0 when unknown)
    slope_se: float = math.inf  # its standard error (inf when unknown)
    sigma: float = 0.0  # residual sd of one latest-round gain (0 without residual dof)
    known: bool = False  # the slope is identified and has a standard error

    @property
    def enough(self) -> bool:
        return self.points >= MIN_FIT_POINTS

    def explain(self) -> dict:
        return {
            "points": self.points,
            "k_values": self.k_values,
            "level": short(self.level),
            "state": short(self.state),
            "slope": short(self.slope) if self.known else None,
            "slope_se": short(self.slope_se) if self.known else None,
            "sigma": short(self.sigma),
        }


def fit_gain(
    history: Sequence[PastRound], k_ref: int, fit_rounds: int, half_life: float
) -> GainFit:
    """The weighted least-squares gain fit of adaptive's docstring (step 2); the slope's
    standard error is at least `block_slope_se` of the window."""
    if len(history) < 2:
        return GainFit()
    accuracies = np.array([h.accuracy for h in history], dtype=np.float64)
    gains = np.diff(accuracies)[-fit_rounds:]
    ks = np.array([max(1, int(h.k)) for h in history[1:]], dtype=np.float64)[-fit_rounds:]
    # the accuracy each round started from, relative to where the next one starts
    start = accuracies[:-1][-fit_rounds:] - accuracies[-1]
    age = np.arange(len(gains) - 1, -1, -1, dtype=np.float64)  # 0 for round R
    finite = np.isfinite(gains) & np.isfinite(start)  # a round without an accuracy is skipped
    gains, ks, start, age = gains[finite], ks[finite], start[finite], age[finite]
    n = len(gains)
    if n == 0:
        return GainFit()
    w = 0.5 ** (age / half_life)
    k_values = len(np.unique(ks))
    columns = {"level": np.ones(n)}
    if k_values > 1 and n >= 3:
        columns["slope"] = np.log(ks / k_ref)
    if n >= len(columns) + 2:
        columns["state"] = start
    while True:
        x = np.column_stack(list(columns.values()))
        sw = np.sqrt(w)
        a, y = x * sw[:, None], gains * sw
        coef, _, rank, _ = np.linalg.lstsq(a, y, rcond=None)
        if rank == x.shape[1]:
            break
        # collinear (k grew in step with the accuracy): the slope is not identified
        del columns["slope" if "slope" in columns else "state"]
    named = dict(zip(columns, coef.tolist(), strict=True))
    if abs(named["level"]) <= REL_TOL * float(np.max(np.abs(gains))):
        # rounding error of an exact zero (flat gains the state term explains), whose sign
        # depends on the machine's BLAS kernels: adaptive holds on a level <= 0, so a GPU
        # host's run held where a replay here probed (a plateau run of the archive, commit e2b9ee1)
        named["level"] = 0.0
    dof = n - x.shape[1]
    resid = y - a @ coef
    sigma2 = float(resid @ resid) / dof if dof > 0 else math.nan
    known = "slope" in named and dof > 0
    se = math.inf
    if known:
        cov = np.linalg.inv(a.T @ a)
        at = list(columns).index("slope")
        se = math.sqrt(max(sigma2 * float(cov[at, at]), 0.0))
        if named["level"] > 0:
            refined = _relative_fit(columns, named, gains, w, dof)
            if refined is not None:
                named["slope"], se, sigma2 = refined
        se = max(se, block_slope_se(ks, k_ref, math.sqrt(sigma2)))
        # exact (noise-free) histories: keep rounding error from counting as evidence
        se = max(se, REL_TOL * max(abs(named["level"]), 1e-12))
    return GainFit(
        points=n,
        k_values=k_values,
        level=named["level"],
        state=named.get("state", 0.0),
        slope=named.get("slope", 0.0),
        slope_se=se,
        sigma=math.sqrt(sigma2) if dof > 0 else 0.0,
        known=known,
    )


def block_slope_se(ks: np.ndarray, k_ref: int, sigma: float) -> float:
    """The slope's standard error if each run of consecutive rounds at one k were one
    observation with one round's noise sigma: sigma / sqrt(sum_b (x_b - mean x)^2), x_b =
    ln(k_b / k_ref) over the runs b. Why: rounds at one k come in a block, and a block's
    gains share the phase of training they fell in (a probe in the steep part of the curve
    gains more whatever its k), so the fit's rounds are not independent evidence about k.
    Counted per block, one probe a -> b gives sqrt(2) sigma / ln(b / a) at best. inf with
    one block."""
    starts = np.concatenate([[0], np.flatnonzero(ks[1:] != ks[:-1]) + 1])
    x = np.log(ks[starts] / k_ref)
    spread = float(np.sum((x - x.mean()) ** 2))
    return sigma / math.sqrt(spread) if spread > 0 else math.inf


def _relative_fit(
    columns: dict[str, np.ndarray],
    named: dict[str, float],
    gains: np.ndarray,
    w: np.ndarray,
    dof: int,
) -> tuple[float, float, float] | None:
    """The slope as a share of the gain: dA_j = (L + c y_j)(1 + r x_j), x = ln(k_j/k_ref),
    y = the state, by Gauss-Newton from the linear fit (r = s / L). The linear model's
    slope s is in gain units, and gains shrink as the run goes on: averaged over the window
    it overstates what more sites buy now. Returns (slope L r, its se, sigma^2) at the
    next round (y = 0), or None when it does not converge. The se of s = L r is L x se(r),
    as if L were known."""
    x = columns["slope"]
    y = columns.get("state", np.zeros_like(x))
    theta = np.array([named["level"], named.get("state", 0.0), named["slope"] / named["level"]])
    sw = np.sqrt(w)
    for _ in range(GN_ITERATIONS):
        level, state, rel = theta
        base = level + state * y
        jac = np.column_stack([1 + rel * x, y * (1 + rel * x), x * base])
        if "state" not in columns:
            jac[:, 1] = 0.0
        step, *_ = np.linalg.lstsq(
            jac * sw[:, None], (gains - base * (1 + rel * x)) * sw, rcond=None
        )
        theta = theta + step
        if not np.isfinite(theta).all():
            return None
        if np.max(np.abs(step)) <= 1e-12 * max(1.0, float(np.max(np.abs(theta)))):
            break
    level, state, rel = theta
    if level <= 0:
        return None
    base = level + state * y
    resid = (gains - base * (1 + rel * x)) * sw
    sigma2 = float(resid @ resid) / dof
    jac = np.column_stack([1 + rel * x, y * (1 + rel * x), x * base])
    if "state" not in columns:
        jac = jac[:, [0, 2]]
    a = jac * sw[:, None]
    try:
        cov = sigma2 * np.linalg.inv(a.T @ a)
    except np.linalg.LinAlgError:
        return None
    named["level"], named["state"] = float(level), float(state)
    se_rel = math.sqrt(max(float(cov[-1, -1]), 0.0))
    return float(level * rel), float(level * se_rel), sigma2


def _runs(ks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(start index, value) of every run of equal k."""
    arr = np.asarray(ks, dtype=np.int64)
    starts = np.concatenate([[0], np.flatnonzero(arr[1:] != arr[:-1]) + 1])
    return starts, arr[starts]


def _last_change(ks: Sequence[int]) -> tuple[int, int, int] | None:
    """(c, a, b) when k changed a -> b for round index c and has stayed b since; else None."""
    if len(ks) < 2:
        return None
    starts, values = _runs(ks)
    if len(starts) < 2:
        return None
    return int(starts[-1]), int(values[-2]), int(values[-1])


def last_growth(ks: Sequence[int]) -> tuple[int, int, int] | None:
    """(c, a, b) when k grew a -> b for round index c and has stayed b since; else None."""
    change = _last_change(ks)
    return change if change is not None and change[1] < change[2] else None


def failed_trials(ks: Sequence[int], hold: int) -> list[tuple[int, int]]:
    """(size b, index of the round back at a) for every growth a -> b undone after at most
    `hold` rounds at b (k went a -> b ... b -> a), in the order they happened."""
    if len(ks) < 3:
        return []
    starts, values = _runs(ks)
    ends = np.concatenate([starts[1:], [len(ks)]])
    failed = []
    for r in range(1, len(starts) - 1):
        a, b, after = values[r - 1], values[r], values[r + 1]
        if a < b and after == a and ends[r] - starts[r] <= max(1, hold):
            failed.append((int(b), int(ends[r])))
    return failed


def growth_cap(ks: Sequence[int], hold: int, backoff: float, n: int) -> int:
    """The largest k a growth may reach now (step 7): below every failed size still in its
    cool-down of backoff x 2^m rounds (m-th failure) after the round back at a."""
    decided = len(ks)  # index of the round being decided
    blocked = [
        size
        for m, (size, back_at) in enumerate(failed_trials(ks, hold))
        if decided - back_at < backoff * 2.0**m
    ]
    return max(min([n, *(size - 1 for size in blocked)]), 1)
