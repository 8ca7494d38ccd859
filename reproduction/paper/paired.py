"""Paired per-seed comparisons of an online policy with a static k (not a figure of the
paper): the relative difference of times to target, two 95 % CIs over seeds (a percentile
bootstrap and a Student-t interval) and the verdict against the issue's goal of being within
WITHIN of the static k.

At five seeds the percentile bootstrap is too narrow (it can resample only 126 distinct
sets, and ignores that the spread itself is estimated), so a verdict other than level needs
the t-interval to agree: it is judged on the union of both intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from powertrip.app.report import claims as C

#: the issue's goal for an online policy: within this share of the static optimum
WITHIN = 0.05
BOOTSTRAP_RESAMPLES = 10_000


def paired_bootstrap(
    diffs: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-seed differences and its bootstrap 95 % CI (the
    seeds resampled with replacement); NaN bounds with fewer than two seeds."""
    xs = np.asarray(diffs, dtype=np.float64)
    if xs.size == 0:
        return math.nan, math.nan, math.nan
    if xs.size < 2:
        return float(xs.mean()), math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = xs[rng.integers(0, xs.size, size=(resamples, xs.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(xs.mean()), float(low), float(high)


def paired_t(diffs: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-seed differences and its Student-t 95 % CI (n - 1
    degrees of freedom, `claims.mean_ci`); NaN bounds with fewer than two seeds."""
    est = C.mean_ci(diffs)
    if est.n == 0:
        return math.nan, math.nan, math.nan
    return est.mean, est.low, est.high


@dataclass(frozen=True)
class Paired:
    """The mean of per-seed differences with its bootstrap and its t 95 % CI."""

    mean: float
    boot: tuple[float, float]
    t: tuple[float, float]

    @property
    def envelope(self) -> tuple[float, float]:
        """The union of both intervals: a direction holds only where both exclude zero."""
        if not (math.isfinite(self.boot[0]) and math.isfinite(self.t[0])):
            return math.nan, math.nan
        return min(self.boot[0], self.t[0]), max(self.boot[1], self.t[1])

    def verdict(self, bounds: str) -> str:
        """`verdict` over the envelope: 'level' unless both intervals agree."""
        return verdict(self.mean, *self.envelope, bounds)


def paired(diffs: Sequence[float]) -> Paired:
    """Both intervals of the same per-seed differences."""
    mean, *boot = paired_bootstrap(diffs)
    _, *t = paired_t(diffs)
    return Paired(mean, (boot[0], boot[1]), (t[0], t[1]))


def relative(a: C.Sample, b: C.Sample) -> tuple[float, str]:
    """(t_a - t_b) / t_b, and which way a cut-off bends it ('' exact, '>' or '<' a bound)."""
    value = (a.value - b.value) / b.value
    if a.reached and b.reached:
        return value, ""
    if not a.reached and b.reached:
        return value, ">"
    if a.reached and not b.reached:
        return value, "<"
    return value, "?"


def verdict(mean: float, low: float, high: float, bounds: str) -> str:
    """'faster' when the CI lies below 0; 'within 5 %' when it lies inside +-5 % (the
    goal, even if it excludes 0); 'slower' when it lies above 0; else 'level (CI wide)';
    'unclear' where cut-off runs leave the direction open."""
    if not math.isfinite(mean):
        return "n/a"
    if not math.isfinite(low):
        return "unclear (one seed)"
    if "?" in bounds or ("<" in bounds and ">" in bounds):
        return "unclear"
    if math.isfinite(high) and high < 0:
        return "faster"
    if math.isfinite(low) and -WITHIN <= low and high <= WITHIN and "<" not in bounds:
        return "within 5 %"
    if math.isfinite(low) and low > 0:
        return "slower" if "<" not in bounds else "unclear"
    return "level (CI wide)"
