"""Paired per-seed comparisons of an online policy with a static k (not a figure of the
paper): the relative difference of times to target, its bootstrap CI over seeds, and the
verdict against the issue's goal of being within WITHIN of the static k."""

from __future__ import annotations

import math
from collections.abc import Sequence

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
