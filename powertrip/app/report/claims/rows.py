"""Claim rows: one of the paper's claims against our numbers (paper, ours, holds, why), the
common claim shapes (faster, similar, fastest) and the data-driven 'why it may differ' line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from powertrip.app.report.claims.stats import Sample, fmt_pct, fmt_time, reduction
from powertrip.app.report.claims.verdicts import (
    SIMILAR,
    aggregate,
    holds_positive,
    holds_similar,
    rank_first,
)


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
