"""Statistics over seeds for the claims: means with 95 % confidence intervals, times to target
that may be lower bounds (`Sample`), the reductions and growths derived from them (`Bound`),
and how estimates are written in claims tables.

A time-to-target is a `Sample`: either the time a run reached the target or, when a run was
cut off first, a lower bound (the simulated time it had run). Derived numbers keep track of
which way a bound points, so verdicts use the bounds honestly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def t_critical(df: int, confidence: float = 0.95) -> float:
    """Two-sided Student-t critical value (df >= 1)."""
    if df < 1:
        raise ValueError(f"t_critical: df must be >= 1, got {df}")
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


@dataclass(frozen=True)
class Estimate:
    """Mean and half-width of its 95 % CI (NaN half-width with a single value)."""

    mean: float
    half_width: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def contains(self, value: float) -> bool:
        return math.isfinite(self.half_width) and self.low <= value <= self.high


def mean_ci(values: Iterable[float], confidence: float = 0.95) -> Estimate:
    """Mean ± t-based CI half-width over seeds; NaN half-width when n < 2."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return Estimate(math.nan, math.nan, 0)
    mean = sum(xs) / n
    if n < 2:
        return Estimate(mean, math.nan, 1)
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return Estimate(mean, t_critical(n - 1, confidence) * math.sqrt(var / n), n)


@dataclass(frozen=True)
class Sample:
    """One seed's time to target in seconds; `reached=False` means `value` is a lower bound."""

    value: float
    reached: bool = True


@dataclass(frozen=True)
class Bound:
    """A derived per-seed number that is exact, a lower or upper bound, or unknown."""

    value: float
    kind: str = "exact"  # exact | lower | upper | unknown


def reduction(a: Sample, b: Sample) -> Bound:
    """1 - a/b: how much shorter a's time is than b's (0.44 = a is 44 % faster).

    b cut off -> b is at least its value -> the reduction is a lower bound; a cut off ->
    an upper bound; both cut off -> unknown."""
    if a.value <= 0 and a.reached or b.value <= 0:
        return Bound(math.nan, "unknown")
    value = 1.0 - a.value / b.value
    if a.reached and b.reached:
        return Bound(value, "exact")
    if a.reached:
        return Bound(value, "lower")
    if b.reached:
        return Bound(value, "upper")
    return Bound(math.nan, "unknown")


def growth(a: Sample, b: Sample) -> Bound:
    """b/a - 1: how much longer b's time is than a's (0.085 = +8.5 %)."""
    r = reduction(a, b)
    if r.kind == "unknown":
        return r
    # b/a - 1 = 1/(1 - r) - 1 is increasing in r, so a bound keeps its direction
    return Bound(1.0 / (1.0 - r.value) - 1.0 if r.value < 1 else math.inf, r.kind)


def times_estimate(samples: Sequence[Sample]) -> tuple[Estimate, bool]:
    """Mean ± CI of the times in hours, and whether any seed was a lower bound."""
    est = mean_ci(s.value / 3600 for s in samples)
    return est, any(not s.reached for s in samples)


# ---- formatting ------------------------------------------------------------------------
def fmt_estimate(est: Estimate, unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
    """'0.92 ± 0.05 h' (or '0.92 h' for one seed, '-' for none)."""
    if est.n == 0:
        return "-"
    mean = est.mean * scale
    text = f"{mean:.{digits}f}"
    if math.isfinite(est.half_width):
        text += f" ± {est.half_width * scale:.{digits}f}"
    return f"{text}{unit}"


def fmt_time(samples: Sequence[Sample]) -> str:
    """'0.92 ± 0.05 h', or '> 1.10 h' when any seed was cut off before the target."""
    est, censored = times_estimate(samples)
    if est.n == 0:
        return "-"
    if censored:
        missed = sum(not s.reached for s in samples)
        return f"> {est.mean:.2f} h ({missed}/{len(samples)} seeds cut off before the target)"
    return fmt_estimate(est, " h")


def fmt_pct(est: Estimate, bound: str = "exact", signed: bool = True) -> str:
    """'-16 % ± 9 %' for reductions shown as the paper does (negative = faster)."""
    if est.n == 0:
        return "-"
    # shown negated when signed: a lower bound on a reduction is an upper bound on -r
    if signed:
        prefix = {"lower": "≤ ", "upper": "≥ "}.get(bound, "")
    else:
        prefix = {"lower": "≥ ", "upper": "≤ "}.get(bound, "")
    mean = -est.mean * 100 if signed else est.mean * 100
    text = f"{prefix}{mean:+.0f} %" if signed else f"{prefix}{mean:.0f} %"
    if math.isfinite(est.half_width):
        text += f" ± {est.half_width * 100:.0f} %"
    return text
