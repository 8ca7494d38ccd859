"""Verdicts: does a claim hold ('yes', 'yes*', 'no', 'unclear', 'n/a') given per-seed numbers
that may be bounds? A baseline cut off at 1.5x PowerTrip's time is *at least* 33 % slower,
never more, so a bound pointing the wrong way gives 'unclear', not a verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from powertrip.app.report.claims.stats import Bound, Estimate, Sample, mean_ci, times_estimate

#: verdicts; "yes*" = the mean points the paper's way but the 95 % CI does not exclude chance
HOLDS = ("yes", "yes*", "no", "unclear", "n/a")

#: gap below which an accuracy gain counts as "small" (Fig. 11), in accuracy points
SMALL_GAIN = 0.05
#: relative difference below which two times count as "similar" (centralized-50, Fig. 9)
SIMILAR = 0.10
#: relative growth of PowerTrip's time from 1 GB to 2 GB counted as "modest" (Fig. 13)
MODEST_GROWTH = 0.20


def aggregate(bounds: Sequence[Bound]) -> tuple[Estimate, str]:
    """Mean ± CI of per-seed bounds and the kind of the aggregate (mixed -> the weakest)."""
    kinds = {b.kind for b in bounds}
    if (
        not bounds
        or "unknown" in kinds
        or kinds == {"lower", "upper"}
        or ({"lower", "upper"} <= kinds)
    ):
        return mean_ci(b.value for b in bounds if b.kind != "unknown"), "unknown"
    kind = "lower" if "lower" in kinds else "upper" if "upper" in kinds else "exact"
    return mean_ci(b.value for b in bounds), kind


def holds_positive(bounds: Sequence[Bound]) -> str:
    """Verdict for 'this per-seed quantity is > 0' (e.g. PowerTrip is faster than X).

    yes: the 95 % CI lies above 0 (lower bounds count: the truth is even larger);
    yes*: the mean is above 0 but the CI reaches 0 (or one seed only); no: the mean is <= 0
    (upper bounds count: the truth is even smaller); unclear: bounds point the wrong way."""
    if not bounds:
        return "n/a"
    est, kind = aggregate(bounds)
    if kind == "unknown" or est.n == 0:
        return "unclear"
    if est.mean > 0:
        if kind == "upper":
            return "unclear"  # an upper bound above 0 says nothing
        return "yes" if math.isfinite(est.half_width) and est.low > 0 else "yes*"
    if kind == "lower":
        return "unclear"  # a lower bound below 0 says nothing
    return "no"


def holds_similar(bounds: Sequence[Bound], tolerance: float = SIMILAR) -> str:
    """Verdict for 'two times are similar': |mean| <= tolerance or the CI contains 0."""
    if not bounds:
        return "n/a"
    est, kind = aggregate(bounds)
    if kind != "exact" or est.n == 0:
        return "no" if kind == "lower" and est.mean > tolerance else "unclear"
    return "yes" if abs(est.mean) <= tolerance or est.contains(0.0) else "no"


def holds_below(est: Estimate, limit: float) -> str:
    """Verdict for 'this quantity is below limit' (e.g. a small accuracy gain)."""
    if est.n == 0:
        return "n/a"
    if est.mean >= limit:
        return "no"
    return "yes" if not math.isfinite(est.half_width) or est.high < limit else "yes*"


def rank_first(name: str, times: Mapping[str, Sequence[Sample]]) -> tuple[str, list[str]]:
    """Is `name` the fastest on mean time? Returns the verdict and who beat it.

    A rival cut off before the target is slower only if its lower bound already exceeds
    our mean; otherwise it cannot be ranked and the verdict is 'unclear'."""
    ours = times.get(name) or []
    if not ours:
        return "n/a", []
    est, censored = times_estimate(ours)
    if censored:
        return "unclear", []
    beaten_by, unclear = [], []
    for rival, samples in times.items():
        if rival == name or not samples:
            continue
        other, other_censored = times_estimate(samples)
        if other.mean < est.mean:
            (unclear if other_censored else beaten_by).append(rival)
    if beaten_by:
        return "no", beaten_by
    return ("unclear" if unclear else "yes"), unclear
