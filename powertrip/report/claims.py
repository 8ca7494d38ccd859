"""The paper's claims against our numbers: means with 95 % confidence intervals over seeds,
and a 'holds?' verdict per claim.

Pure functions only (numbers in, rows out), so the verdict logic is tested without running
anything. A time-to-target is a `Sample`: either the time a run reached the target or, when a
run was cut off first, a lower bound (the simulated time it had run). Verdicts use the bounds
honestly: a baseline cut off at 1.5x PowerTrip's time is *at least* 33 % slower, never more.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: claims.csv columns (the issue asks for at least figure, claim, paper, ours, holds)
CLAIM_COLUMNS: tuple[str, ...] = ("figure", "claim", "paper", "ours", "holds", "seeds", "why")

#: verdicts; "yes*" = the mean points the paper's way but the 95 % CI does not exclude chance
HOLDS = ("yes", "yes*", "no", "unclear", "n/a")

#: gap below which an accuracy gain counts as "small" (Fig. 11), in accuracy points
SMALL_GAIN = 0.05
#: relative difference below which two times count as "similar" (centralized-50, Fig. 9)
SIMILAR = 0.10
#: relative growth of PowerTrip's time from 1 GB to 2 GB counted as "modest" (Fig. 13)
MODEST_GROWTH = 0.20


# ---- statistics ------------------------------------------------------------------------
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


# ---- verdicts --------------------------------------------------------------------------
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


# ---- claims ----------------------------------------------------------------------------
@dataclass
class ClaimRow:
    figure: str
    claim: str
    paper: str
    ours: str
    holds: str
    seeds: int = 0
    why: str = ""
    #: our number is outside what the paper reports (drives the 'why it may differ' line)
    differs: bool = False
    #: claim-specific reasons, prepended to the suite-wide ones
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, str]:
        return {
            "figure": self.figure,
            "claim": self.claim,
            "paper": self.paper,
            "ours": self.ours,
            "holds": self.holds,
            "seeds": str(self.seeds),
            "why": self.why,
        }


def faster_claim(
    figure: str,
    a: str,
    b: str,
    times: Mapping[str, Sequence[Sample]],
    paper_a_h: float | None,
    paper_b_h: float | None,
    paper_reduction: float | None,
    claim: str = "",
) -> ClaimRow:
    """'a reaches the target faster than b', paired by seed (the paper's reduction is
    derived from its hours when not stated)."""
    if paper_reduction is None and paper_a_h and paper_b_h:
        paper_reduction = 1.0 - paper_a_h / paper_b_h
    sa, sb = list(times.get(a) or []), list(times.get(b) or [])
    pairs = list(zip(sa, sb, strict=False))
    bounds = [reduction(x, y) for x, y in pairs]
    est, kind = aggregate(bounds)
    paper = _paper_pair(paper_a_h, paper_b_h, paper_reduction)
    if not pairs:
        ours = "not run"
    else:
        ours = f"{fmt_time(sa)} vs {fmt_time(sb)}"
        if kind != "unknown":
            ours += f" ({fmt_pct(est, kind)})"
    differs = paper_reduction is not None and not (
        est.n and est.contains(paper_reduction) and kind == "exact"
    )
    return ClaimRow(
        figure,
        claim or f"{a} reaches the target faster than {b}",
        paper,
        ours,
        holds_positive(bounds),
        len(pairs),
        differs=differs,
    )


def similar_claim(
    figure: str,
    a: str,
    b: str,
    times: Mapping[str, Sequence[Sample]],
    paper: str,
    tolerance: float = SIMILAR,
) -> ClaimRow:
    sa, sb = list(times.get(a) or []), list(times.get(b) or [])
    bounds = [reduction(x, y) for x, y in zip(sa, sb, strict=False)]
    est, kind = aggregate(bounds)
    ours = "not run" if not bounds else f"{fmt_time(sa)} vs {fmt_time(sb)}"
    if bounds and kind != "unknown":
        ours += f" ({fmt_pct(est, kind)})"
    verdict = holds_similar(bounds, tolerance)
    return ClaimRow(
        figure,
        f"{a} performs similar to {b} (within {tolerance:.0%} or CI contains 0)",
        paper,
        ours,
        verdict,
        len(bounds),
        differs=verdict != "yes",
    )


def fastest_claim(
    figure: str, name: str, times: Mapping[str, Sequence[Sample]], paper: str
) -> ClaimRow:
    verdict, others = rank_first(name, times)
    ours = fmt_time(times.get(name) or [])
    if verdict == "no":
        ours += f"; faster: {', '.join(others)}"
    elif verdict == "unclear" and others:
        ours += f"; cannot rank against {', '.join(others)} (cut off)"
    n = len(times.get(name) or [])
    ran = len([t for t in times.values() if t])
    return ClaimRow(
        figure,
        f"{name} is the fastest of {ran} policies" if ran else f"{name} is the fastest policy",
        paper,
        ours,
        verdict,
        n,
        differs=verdict != "yes",
    )


def _paper_pair(a_h: float | None, b_h: float | None, red: float | None) -> str:
    parts = []
    if a_h is not None and b_h is not None:
        parts.append(f"{a_h:g} h vs {b_h:g} h")
    if red is not None:
        parts.append(f"({-red * 100:+.0f} %)" if parts else f"{-red * 100:+.0f} %")
    return " ".join(parts) or "-"


# ---- why it may differ -----------------------------------------------------------------
def why_differs(row: ClaimRow, facts: Mapping[str, object]) -> str:
    """A data-driven line on why our number may differ from the paper's (empty if it agrees).

    `facts` is what the suite actually used: workload, samples, lr, local_steps, seeds,
    num_sites, budget_factor, cores ... (missing keys are simply not mentioned)."""
    if (row.holds == "yes" and not row.differs) or row.ours in ("not run", "-"):
        return ""
    reasons = list(row.reasons)
    if facts.get("subset"):
        reasons.append(str(facts["subset"]))
    lr, paper_lr = facts.get("lr"), facts.get("paper_lr")
    if lr is not None and paper_lr is not None and float(lr) != float(paper_lr):  # type: ignore[arg-type]
        reasons.append(f"lr {lr:g} (paper {paper_lr:g})")  # type: ignore[str-format]
    if facts.get("local_steps") is not None:
        reasons.append(f"{facts['local_steps']} local steps/round")
    if facts.get("target_accuracy") is not None:
        reasons.append(f"target {float(facts['target_accuracy']):.0%}")  # type: ignore[arg-type]
    if facts.get("num_sites") is not None:
        reasons.append(f"{facts['num_sites']} sites")
    if facts.get("seeds") is not None:
        reasons.append(f"{facts['seeds']} seeds (paper 10)")
    factor = facts.get("budget_factor")
    if factor:
        reasons.append(
            f"baselines cut off at {float(factor):g}x PowerTrip's time, so their times are "  # type: ignore[arg-type]
            "lower bounds"
        )
    if facts.get("hardware"):
        reasons.append(str(facts["hardware"]))
    return "; ".join(reasons)


def finish(rows: Sequence[ClaimRow], facts: Mapping[str, object]) -> list[ClaimRow]:
    """Fill each row's 'why' line from the suite's facts."""
    for row in rows:
        row.why = why_differs(row, facts)
    return list(rows)


def write_claims_csv(path: str | Path, rows: Sequence[ClaimRow]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CLAIM_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_dict())
    return out


def read_claims_csv(path: str | Path) -> list[dict[str, str]]:
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CLAIM_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        return list(reader)


def claims_markdown(rows: Sequence[Mapping[str, str]], header: str = "") -> str:
    """The summary table as Markdown (for results/claims.md)."""
    cols = ("figure", "claim", "paper", "ours", "holds", "why")
    lines = [header.rstrip(), ""] if header else []
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for row in rows:
        cells = [str(row.get(c, "")).replace("|", "\\|").replace("\n", " ") for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
