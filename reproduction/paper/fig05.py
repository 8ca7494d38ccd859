"""Paper Fig. 5: the link model, bandwidth (left axis) and Eq. 3's communication delay
(right axis) against distance (§5.1), for the run's site population under both link models
(`powertrip.core.profiles.LINK_MODELS`).

No training runs: everything is computed from the base config's population
(`RunConfig.population_spec`), so `powertrip reproduce --figure 5` renders at once. The
claims are checked for the link model the base config names; the table and the plot show
both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from powertrip.app.experiments.suite import Suite, Variant
from powertrip.app.report import claims as C
from powertrip.app.report.figures import new_figure, save_figure
from powertrip.app.report.html import Table
from powertrip.core.config import RunConfig
from powertrip.core.profiles import LINK_MODELS, PopulationSpec, generate_population, link_bandwidth
from powertrip.core.timemodel import propagation_delay_s
from reproduction.paper.data import VariantData

SUITE = Suite(
    "5",
    "Link model: bandwidth and delay against distance",
    "Paper Fig. 5 (§5.1): each site's bandwidth is \"inversely proportional to its "
    'distance" (left y-axis); the total communication delay (Eq. 3, 1.5 GB update) '
    '"increases non-linearly with distance" (right y-axis). §5.3 takes the 1,000-mile radius '
    'from it: Fig. 5 "shows the bandwidth remains relatively constant in this radius". The '
    "paper gives no link speeds.",
    (),
    (),
)
VARIANTS: tuple[Variant, ...] = ()
#: the report's third section (render.py's default is the times table)
TABLE_TITLE = "Bandwidth and delay at sample distances"
NOTES = (
    "No training runs: computed from the base config's site population (seed, distances, "
    "B_ref) under both link models; the claims are for the link model the config names.",
)

#: the distances the table lists (miles)
TABLE_MILES = (100.0, 500.0, 1000.0, 2000.0, 5000.0, 10_000.0)
#: the update size when the base config does not give one (paper §5.1: 1.5 GB)
DEFAULT_UPDATE_GB = 1.5
#: "relatively constant" (§5.3): the largest max/min bandwidth ratio within the radius we
#: accept (ours)
FLAT_RATIO = 1.5
#: "non-linear" (§5.1): the delay strays from the chord between the nearest and the
#: farthest site by more than this share of its range (ours; a straight line strays by 0)
NONLINEAR_SHARE = 0.05
GBIT = 1e9 / 8


def run_config(meta: Mapping[str, Any]) -> RunConfig:
    """The base config of the reproduction (its fields this version knows)."""
    base = dict(meta.get("base_config") or {})
    known = {k: v for k, v in base.items() if k in RunConfig.field_names()}
    return RunConfig.from_mapping(known, "reproduce base config")


def update_size_bytes(config: RunConfig) -> float:
    gb = config.update_size_gb if config.update_size_gb is not None else DEFAULT_UPDATE_GB
    return float(gb) * 1e9


@dataclass(frozen=True)
class Links:
    """One link model's sites, nearest first: distance, bandwidth and Eq. 3's delay."""

    model: str
    distance_miles: np.ndarray
    bandwidth_bytes_per_s: np.ndarray
    delay_s: np.ndarray


def delay_s(spec: PopulationSpec, distance_miles: np.ndarray, update_bytes: float) -> np.ndarray:
    """Eq. 3, one transfer: D / c + M / B(D)."""
    propagation = np.array([propagation_delay_s(float(d)) for d in distance_miles])
    return propagation + update_bytes / link_bandwidth(spec, distance_miles)


def population_links(spec: PopulationSpec, update_bytes: float) -> Links:
    sites = sorted(generate_population(spec), key=lambda s: (s.distance_miles, s.index))
    distance = np.array([s.distance_miles for s in sites])
    bandwidth = np.array([s.bandwidth_bytes_per_s for s in sites])
    latency = np.array([s.latency_s for s in sites])
    return Links(spec.link_model, distance, bandwidth, latency + update_bytes / bandwidth)


def specs(config: RunConfig) -> dict[str, PopulationSpec]:
    """The run's population spec under each link model."""
    spec = config.population_spec()
    return {model: dataclasses.replace(spec, link_model=model) for model in LINK_MODELS}


# ---- claims ----------------------------------------------------------------------------
def flat_claim(links: Links, radius: float) -> C.ClaimRow:
    inside = links.bandwidth_bytes_per_s[links.distance_miles <= radius]
    row = C.ClaimRow(
        "5",
        f"bandwidth remains relatively constant within {radius:,.0f} miles (§5.3)",
        "relatively constant",
        "no site inside",
        "n/a",
        1,
    )
    if inside.size:
        ratio = float(inside.max() / inside.min())
        row.ours = (
            f"{links.model}: {inside.min() / GBIT:.2f}-{inside.max() / GBIT:.2f} Gbit/s "
            f"over {inside.size} sites (max/min {ratio:.2f})"
        )
        row.holds = "yes" if ratio <= FLAT_RATIO else "no"
        row.differs = row.holds != "yes"
        if row.differs:
            row.reasons.append(
                f"link_model {links.model} falls as 1/distance from 100 miles on; link_model "
                f"fig5 keeps it flat within {radius:,.0f} miles (we call max/min <= "
                f"{FLAT_RATIO:g} constant)"
            )
    return row


def inverse_claim(links: Links, knee: float) -> C.ClaimRow:
    product = links.bandwidth_bytes_per_s * links.distance_miles
    spread = float(product.max() / product.min() - 1) if product.size else float("nan")
    beyond = product[links.distance_miles >= knee]
    row = C.ClaimRow(
        "5",
        'bandwidth is "inversely proportional to its distance" (§5.1)',
        "B ~ 1/D",
        f"{links.model}: B x D varies by {spread:.1%} over the sites",
        "yes" if spread < 1e-9 else "no",
        1,
    )
    if row.holds != "yes":
        row.differs = True
        constant = beyond.size and float(beyond.max() / beyond.min() - 1) < 1e-9
        row.reasons.append(
            f"link_model {links.model} is flat within {knee:,.0f} miles (§5.3)"
            + (f" and 1/D beyond ({beyond.size} sites)" if constant else "")
        )
    return row


def nonlinear_claim(links: Links) -> C.ClaimRow:
    d, t = links.distance_miles, links.delay_s
    row = C.ClaimRow(
        "5",
        'the total delay "increases non-linearly with distance" (§5.1)',
        "non-linear",
        "fewer than 3 sites",
        "n/a",
        1,
    )
    if d.size >= 3 and d[-1] > d[0] and t[-1] > t[0]:
        chord = t[0] + (t[-1] - t[0]) * (d - d[0]) / (d[-1] - d[0])
        share = float(np.max(np.abs(t - chord)) / (t[-1] - t[0]))
        row.ours = (
            f"{links.model}: {t[0]:.2f}-{t[-1]:.2f} s, strays {share:.1%} of its range "
            "from a straight line"
        )
        row.holds = "yes" if share > NONLINEAR_SHARE else "no"
        row.differs = row.holds != "yes"
        if row.differs:
            row.reasons.append(
                f"under link_model {links.model} both D/c and M/B = M D / (B_ref D_ref) are "
                "linear in D; link_model fig5's flat bandwidth makes a kink at the knee"
            )
    return row


def claims(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[C.ClaimRow]:
    config = run_config(meta)
    spec = config.population_spec()
    links = population_links(spec, update_size_bytes(config))
    rows = [
        flat_claim(links, spec.radius_miles),
        inverse_claim(links, spec.link_knee_miles),
        nonlinear_claim(links),
    ]
    return C.finish(rows, {})


# ---- table and plot --------------------------------------------------------------------
def table(d: Mapping[str, VariantData], meta: Mapping[str, Any]) -> list[Table]:
    config = run_config(meta)
    update = update_size_bytes(config)
    miles = np.array(TABLE_MILES)
    headers, columns = ["distance (miles)"], []
    for model, spec in specs(config).items():
        headers += [f"{model}: bandwidth (Gbit/s)", f"{model}: delay (s)"]
        columns += [link_bandwidth(spec, miles) / GBIT, delay_s(spec, miles, update)]
    rows = [[f"{m:,.0f}", *(f"{col[i]:.3g}" for col in columns)] for i, m in enumerate(TABLE_MILES)]
    caption = (
        f"B_ref {config.reference_bandwidth_gbps:g} Gbit/s (ours), update {update / 1e9:g} GB, "
        f"delay = D/c + M/B (Eq. 3, one transfer, fibre at 2/3 c); this run: "
        f"{config.link_model}"
    )
    return [Table(headers, rows, caption=caption)]


def plots(d: Mapping[str, VariantData], out: Path, meta: Mapping[str, Any]) -> list[Path]:
    """Bandwidth (left axis) and delay (right axis) against distance, one panel per link
    model: lines are the model, dots the run's sites."""
    config = run_config(meta)
    update = update_size_bytes(config)
    models = specs(config)
    fig = new_figure(6.0 * len(models), 4.2)
    for i, (model, spec) in enumerate(models.items()):
        ax = fig.add_subplot(1, len(models), i + 1)
        right = ax.twinx()
        links = population_links(spec, update)
        lo, hi = spec.min_distance_miles, max(spec.max_distance_miles, spec.min_distance_miles + 1)
        grid = np.linspace(max(lo, 1.0), hi, 400)
        ax.plot(grid, link_bandwidth(spec, grid) / GBIT, color="tab:blue")
        ax.scatter(links.distance_miles, links.bandwidth_bytes_per_s / GBIT, s=9, color="tab:blue")
        right.plot(grid, delay_s(spec, grid, update), color="tab:red")
        right.scatter(links.distance_miles, links.delay_s, s=9, color="tab:red", marker="x")
        ax.axvline(spec.radius_miles, color="0.5", linestyle=":", linewidth=1)
        ax.set_xlabel("distance to the aggregator (miles)")
        ax.set_ylabel("bandwidth (Gbit/s)", color="tab:blue")
        right.set_ylabel(f"communication delay, {update / 1e9:g} GB (s)", color="tab:red")
        ax.set_ylim(bottom=0)
        right.set_ylim(bottom=0)
        this = " (this run)" if model == config.link_model else ""
        ax.set_title(f"link_model {model}{this}", fontsize=10)
        ax.grid(alpha=0.3)
    return [save_figure(fig, out / "fig5_links.png")]
