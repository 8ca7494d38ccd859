"""Paper Fig. 12: every policy with spare power from Google's power traces (§5.3)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite, Variant
from powertrip.app.report import claims as C
from powertrip.core.power import load_domains
from reproduction.paper.common import (
    FIG9_ARMS,
    comparison_claims,
    comparison_plots,
    policy_names,
    variant_equal_time_claim,
)
from reproduction.paper.data import VariantData, facts
from reproduction.paper.fig02 import trace_path

TRACE = Variant("trace", "Google PowerData 2019 trace power, 1.5 GB", {"power": "trace"})

SUITE = Suite(
    "12",
    "Policy comparison, Google power traces",
    "Paper Fig. 12: as Fig. 9 with spare power from Google's power traces. PowerTrip is "
    "still the fastest: 24 % faster than static k* and 27 % faster than centralized at "
    "25 % power; spare power per site typically peaks at 26-51 % of capacity, so every "
    "policy is slower than with uniform power.",
    (TRACE.name,),
    FIG9_ARMS,
)
VARIANTS = (TRACE,)

#: "the maximum available spare power at any given site in these traces is ... typically
#: falling within the range of 26% to 51% of the total capacity" (§5.3)
PAPER_MAX_SPARE = (0.26, 0.51)

PAPER: dict[str, float | None] = {
    "powertrip": None,
    "static-k*": None,
    "static-k*:reduction": 0.24,
    "centralized-25": None,
    "centralized-25:reduction": 0.27,
}


def max_spare_claim(v: VariantData, meta: Mapping[str, Any]) -> C.ClaimRow:
    """The paper's statement: each trace site's maximum spare power (1 - its minimum
    utilisation over the trace) is within 26-51 % of capacity. From the trace the runs
    replay (each site replays one of its domains), so no run is needed. (The paper's 26-51 %
    is exactly 1 - its Fig. 2 range of mean utilisation, 49-74 %, so it may mean the cells'
    mean spare; the row gives both.)"""
    lo, hi = PAPER_MAX_SPARE
    config = v.config() or dict(meta.get("base_config") or {})
    domains = load_domains(trace_path(config))
    peaks = [1.0 - float(d.utilisation.min()) for d in domains]
    means = [1.0 - float(d.utilisation.mean()) for d in domains]
    inside = sum(lo <= p <= hi for p in peaks)
    row = C.ClaimRow(
        "12",
        "the maximum spare power at any site typically falls within 26-51 % of capacity (§5.3)",
        f"{lo:.0%}-{hi:.0%}",
        f"max spare (1 - min utilisation) per domain {min(peaks):.1%}-{max(peaks):.1%}, "
        f"{inside} of {len(peaks)} inside; mean spare {min(means):.1%}-{max(means):.1%}",
        "yes" if inside == len(peaks) else "yes*" if 2 * inside > len(peaks) else "no",
        1,
    )
    row.differs = row.holds != "yes"
    row.reasons.append(
        "our trace is cell a's 5 PDUs, measured (not production) utilisation; production is "
        "part of measured, so its spare is at least ours"
    )
    return row


def spare_power_claim(v: VariantData) -> C.ClaimRow:
    """Ours, not the paper's: the traces' spare power at t = 0 against uniform
    U[0.1, 1]'s mean of 55 %, the reason §5.3 gives for every policy being slower."""
    powers = [
        float(site["power_fraction"])
        for r in v.runs_of("powertrip")
        for site in r.summary.get("sites") or []
    ]
    if powers:
        p10, p90 = np.percentile(powers, [10, 90])
        est = C.mean_ci([float(np.mean(powers))])
        ours = f"site power at t = 0: 10th-90th percentile {p10:.0%}-{p90:.0%}, mean {est.mean:.0%}"
        holds = C.holds_below(est, 0.55)
    else:
        ours, holds = "not run", "n/a"
    row = C.ClaimRow(
        "12",
        "ours: trace power at t = 0 is lower than uniform U[0.1, 1]'s (mean 55 %)",
        "more constrained than uniform (no number given)",
        ours,
        holds,
        len(v.seeds),
        differs=holds != "yes",
    )
    row.reasons.append("we replay cell a's 5 PDUs only, with seeded offsets into the month")
    return row


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    v = d[TRACE.name]
    rows = comparison_claims("12", v, PAPER)
    rows[0].paper = "fastest of all"
    rows.append(max_spare_claim(v, meta))
    rows.append(spare_power_claim(v))
    rows.append(variant_equal_time_claim("12", v, policy_names(v)))
    return C.finish(rows, facts(v, meta))


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    return comparison_plots("12", d[TRACE.name], out)
