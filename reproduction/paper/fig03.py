"""Paper Fig. 3: the power draw of PDUs over time (§2.1).

No training runs: computed from the power trace a trace run replays (see fig02.py), so
`powertrip reproduce --figure 3` renders at once. The paper plots PDUs' power draw; Google
did not publish the PDUs' capacities, so our y-axis is `measured_power_util` (measured
power / capacity, cooling included), the shipped data's only column, for cell `a`'s 5 PDUs
(data/google-power/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite, Variant
from powertrip.app.report import claims as C
from powertrip.app.report.figures import new_figure, save_figure
from powertrip.app.report.html import Table
from powertrip.core.power import SAMPLE_PERIOD_S, DomainTrace
from reproduction.paper.data import VariantData
from reproduction.paper.fig02 import domains_of

SUITE = Suite(
    "3",
    "Power draw of PDUs over time, Google power traces",
    'Paper Fig. 3 (§2.1): "the power draw for any given PDU (power distribution unit for '
    'each rack of servers) at these sites is highly dynamic over time."',
    (),
    (),
)
VARIANTS: tuple[Variant, ...] = ()
TABLE_TITLE = "Power draw per PDU over time"
NOTES = (
    "No training runs: computed from the power trace (the base config's power_trace, else "
    "the shipped data/google-power/pdu_5min.csv.gz: cell a's 5 PDUs, May 2019, 5-minute "
    "samples).",
    "Power draw as a share of the PDU's capacity (measured_power_util): Google published no "
    "capacities, so there are no watts.",
)

#: samples per day (5-minute samples)
DAY = int(round(86_400 / SAMPLE_PERIOD_S))
#: "highly dynamic over time" (§2.1): every PDU's median daily max - min swing is at least
#: this (ours; the paper gives no number)
DAILY_SWING = 0.05
#: the zoomed panel shows this many days at full resolution
ZOOM_DAYS = 2


def daily_swings(domain: DomainTrace) -> np.ndarray:
    """max - min of each whole day of the domain's utilisation."""
    u = domain.utilisation
    days = len(u) // DAY
    if days == 0:
        return np.array([float(u.max() - u.min())])
    whole = u[: days * DAY].reshape(days, DAY)
    return whole.max(axis=1) - whole.min(axis=1)


# ---- claims ----------------------------------------------------------------------------
def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    domains = domains_of(meta)
    swings = [float(np.median(daily_swings(x))) for x in domains]
    ranges = [float(x.utilisation.max() - x.utilisation.min()) for x in domains]
    row = C.ClaimRow(
        "3",
        "the power draw of any given PDU is highly dynamic over time (§2.1)",
        "highly dynamic (no number given)",
        f"{len(domains)} PDUs: median daily swing {min(swings):.1%}-{max(swings):.1%} of "
        f"capacity, range over the trace {min(ranges):.1%}-{max(ranges):.1%} (ours: a median "
        f"daily swing >= {DAILY_SWING:.0%} counts as dynamic)",
        "yes" if min(swings) >= DAILY_SWING else "no",
        1,
    )
    row.differs = row.holds != "yes"
    row.reasons.append("measured utilisation of cell a's PDUs (no watts, no other cells)")
    return C.finish([row], {})


# ---- table and plot --------------------------------------------------------------------
def table(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[Table]:
    rows = []
    for x in domains_of(meta):
        u, swing = x.utilisation, daily_swings(x)
        p05, p95 = np.percentile(u, [5, 95])
        rows.append(
            [
                x.label,
                f"{u.mean():.1%}",
                f"{u.min():.1%}-{u.max():.1%}",
                f"{p05:.1%}-{p95:.1%}",
                f"{np.median(swing):.1%}",
                f"{swing.min():.1%}-{swing.max():.1%}",
            ]
        )
    headers = ["PDU", "mean", "min-max", "p05-p95", "median daily swing", "daily swing range"]
    caption = "measured_power_util, 5-minute samples; daily swing = max - min within a day"
    return [Table(headers, rows, caption=caption)]


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    """Left: each PDU's utilisation over the whole trace (hourly means); right: the first
    ZOOM_DAYS days at 5-minute resolution."""
    domains = domains_of(meta)
    fig = new_figure(12.0, 4.2)
    whole = fig.add_subplot(1, 2, 1)
    zoom = fig.add_subplot(1, 2, 2)
    hour = int(round(3600 / SAMPLE_PERIOD_S))
    for x in domains:
        u = x.utilisation
        hours = len(u) // hour
        if hours:
            hourly = u[: hours * hour].reshape(hours, hour).mean(axis=1)
            whole.plot((np.arange(hours) + 0.5) / 24, hourly * 100, linewidth=0.8, label=x.label)
        n = min(len(u), ZOOM_DAYS * DAY)
        zoom.plot(np.arange(n) * SAMPLE_PERIOD_S / 3600, u[:n] * 100, linewidth=0.8)
    whole.set_xlabel("days since the trace start (shipped data: 2019-05-01 00:00 PT)")
    whole.set_title("Whole trace, hourly means", fontsize=10)
    whole.legend(fontsize=8, loc="lower right")
    zoom.set_xlabel("hours since the trace start")
    zoom.set_title(f"First {ZOOM_DAYS} days, 5-minute samples", fontsize=10)
    for ax in (whole, zoom):
        ax.set_ylabel("power draw, % of PDU capacity")
        ax.grid(alpha=0.3)
    return [save_figure(fig, out / "fig3_pdu_power.png")]
