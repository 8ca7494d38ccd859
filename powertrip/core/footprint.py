"""Energy, wide-area egress cost and carbon of a round, as pure functions.

The paper compares policies on time to accuracy only; a power-constrained deployment also
asks how many joules, dollars of egress and grams of CO2 a policy spends to get there.
Every number here follows from the round's facts (which sites trained, for how long, with
how many GPUs, how many bytes crossed their links) and the settings in `FootprintSpec`:

* active energy of a selected site = its effective GPUs x `gpu_power_w` x its compute
  seconds (paper Eq. 6: N_eff GPUs at P_gpu each; effective GPUs = p_i x N_max,i, so a
  site at lower power computes longer with fewer GPUs), or what NVML measured on the site
  when its worker reports it (wall clock only);
* idle energy = the same GPUs x `gpu_idle_power_w` for the rest of the time the round holds
  them: from the end of the site's compute until the straggler is done (its own transfer
  and its wait for the straggler). OUR CHOICE: sites not selected are not charged (their
  GPUs are not the run's), and the aggregation after the straggler is not charged either;
* egress cost = bytes moved over the site's link / 1e9 x `egress_usd_per_gb`;
* carbon = the site's energy in kWh x its grid's carbon intensity (`carbon_g_per_kwh`, or
  the site's value in a carbon trace at the round's start; in a `population: regions` run
  without a trace, its region's annual intensity from data/regions/regions.csv). The
  network's own energy is not counted.

The defaults are the constants below, each with its source (README.md, "Energy, egress
cost and carbon", repeats them).
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powertrip.core.profiles import population_regions, site_id

JOULES_PER_KWH = 3.6e6
GB = 1e9
#: NVIDIA GeForce GTX 1080 Ti specifications, "Graphics Card Power (W): 250" (its TDP): the
#: GPU of the paper's testbed (§5.1: 40 NVIDIA GTX 1080Ti GPUs)
GPU_POWER_W = 250.0
#: OUR CHOICE: NVIDIA's spec sheet gives no idle figure. 50 W (20 % of the board power) is a
#: GPU that a job holds between kernels (clocks up, memory allocated), not a parked desktop
#: card (~10-15 W); measure yours with `nvidia-smi --query-gpu=power.draw --format=csv`
GPU_IDLE_POWER_W = 50.0
#: AWS EC2 on-demand pricing, "Data Transfer OUT from Amazon EC2 to another AWS Region":
#: $0.02 per GB from the US regions (most inter-region pairs; some are $0.01 or more)
EGRESS_USD_PER_GB = 0.02
#: Ember, Global Electricity Review 2024: the world's power sector emitted 481 gCO2 per kWh
#: generated in 2023 (the global average; per-site values go in a carbon trace)
CARBON_G_PER_KWH = 481.0
#: a carbon trace's columns: site_id, g_per_kwh, and optionally hour (from that simulated
#: hour on; a step function per site, its first value before its first hour)
TRACE_COLUMNS = ("site_id", "g_per_kwh")
#: the RunConfig settings of the accounting, with their defaults
SETTINGS: dict[str, Any] = {
    "gpu_power_w": GPU_POWER_W,
    "gpu_idle_power_w": GPU_IDLE_POWER_W,
    "egress_usd_per_gb": EGRESS_USD_PER_GB,
    "carbon_g_per_kwh": CARBON_G_PER_KWH,
    "carbon_trace": None,
}


class FootprintError(ValueError):
    """A bad footprint setting or carbon trace; the message names the field or the line."""


@dataclass(frozen=True)
class CarbonTrace:
    """Per-site grid carbon intensity over simulated time (g CO2 per kWh)."""

    hours: Mapping[str, tuple[float, ...]]
    values: Mapping[str, tuple[float, ...]]

    def at(self, site_id: str, t_s: float, default: float) -> float:
        """The site's intensity at simulated second `t_s`; `default` for a site not listed."""
        hours = self.hours.get(site_id)
        if not hours:
            return default
        i = max(bisect.bisect_right(hours, t_s / 3600.0) - 1, 0)
        return self.values[site_id][i]


def load_carbon_trace(path: str | Path) -> CarbonTrace:
    """Read a carbon trace CSV (TRACE_COLUMNS, optional `hour`); errors name file and line."""
    path = Path(path)
    rows: dict[str, list[tuple[float, float]]] = {}
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise FootprintError(f"{path}: missing column(s) {', '.join(missing)}")
            for line, row in enumerate(reader, start=2):
                try:
                    hour = float(row.get("hour") or 0.0)
                    value = float(row["g_per_kwh"])
                except (TypeError, ValueError):
                    raise FootprintError(f"{path}, line {line}: not a number") from None
                if not (math.isfinite(value) and value >= 0 and math.isfinite(hour)):
                    raise FootprintError(f"{path}, line {line}: g_per_kwh must be >= 0")
                rows.setdefault(str(row["site_id"]), []).append((hour, value))
    except OSError as exc:
        raise FootprintError(f"cannot read carbon trace {path}: {exc.strerror or exc}") from None
    if not rows:
        raise FootprintError(f"{path}: no rows")
    ordered = {site: sorted(points) for site, points in rows.items()}
    return CarbonTrace(
        hours={s: tuple(h for h, _ in p) for s, p in ordered.items()},
        values={s: tuple(v for _, v in p) for s, p in ordered.items()},
    )


@dataclass(frozen=True)
class FootprintSpec:
    """The accounting's settings (RunConfig's fields of the same names)."""

    gpu_power_w: float = GPU_POWER_W
    gpu_idle_power_w: float = GPU_IDLE_POWER_W
    egress_usd_per_gb: float = EGRESS_USD_PER_GB
    carbon_g_per_kwh: float = CARBON_G_PER_KWH
    carbon_trace: CarbonTrace | None = None

    def problems(self) -> list[str]:
        """'field: why' for every bad setting (empty when all are valid)."""
        out = []
        if not self.gpu_power_w > 0:
            out.append(f"gpu_power_w: must be > 0, got {self.gpu_power_w}")
        if not 0 <= self.gpu_idle_power_w <= self.gpu_power_w:
            out.append(
                f"gpu_idle_power_w: must be in [0, gpu_power_w={self.gpu_power_w:g}], got "
                f"{self.gpu_idle_power_w}"
            )
        if not self.egress_usd_per_gb >= 0:
            out.append(f"egress_usd_per_gb: must be >= 0, got {self.egress_usd_per_gb}")
        if not self.carbon_g_per_kwh >= 0:
            out.append(f"carbon_g_per_kwh: must be >= 0, got {self.carbon_g_per_kwh}")
        return out

    def intensity(self, site_id: str, t_s: float) -> float:
        if self.carbon_trace is None:
            return self.carbon_g_per_kwh
        return self.carbon_trace.at(site_id, t_s, self.carbon_g_per_kwh)


def region_trace(intensities: Sequence[float]) -> CarbonTrace:
    """A constant trace of site i at `intensities[i]` g/kWh: a regions population's grids
    (annual averages; hourly ones go in a carbon_trace file)."""
    sites = [site_id(i) for i in range(len(intensities))]
    return CarbonTrace(
        hours={s: (0.0,) for s in sites},
        values={s: (float(g),) for s, g in zip(sites, intensities, strict=True)},
    )


def spec_of(settings: Any, load_trace: bool = True) -> FootprintSpec:
    """The spec of an object with RunConfig's footprint settings; its carbon trace read
    when `load_trace`, else (a regions population) its regions' intensities. Raises
    FootprintError naming the first bad setting."""
    trace_path = getattr(settings, "carbon_trace", None)
    trace = None
    if load_trace and trace_path is not None:
        try:
            trace = load_carbon_trace(trace_path)
        except FootprintError as exc:
            raise FootprintError(f"carbon_trace: {exc}") from None
    elif getattr(settings, "population", "synthetic") == "regions":
        try:
            chosen = population_regions(settings.population_spec())
        except ValueError as exc:
            raise FootprintError(str(exc)) from None
        trace = region_trace([r.g_co2_per_kwh for r in chosen])
    spec = FootprintSpec(
        float(settings.gpu_power_w),
        float(settings.gpu_idle_power_w),
        float(settings.egress_usd_per_gb),
        float(settings.carbon_g_per_kwh),
        trace,
    )
    problems = spec.problems()
    if problems:
        raise FootprintError(problems[0])
    return spec


@dataclass(frozen=True)
class SiteUse:
    """What one selected site used in a round."""

    site_id: str
    gpus: float  # effective GPUs, p_i x N_max,i
    compute_s: float
    held_s: float  # from the round's start until the straggler finished
    bytes_moved: float  # over the site's link, both directions that were charged
    #: NVML's joules for the site's compute, when its worker measured them (else None)
    measured_energy_j: float | None = None


@dataclass(frozen=True)
class SiteFootprint:
    site_id: str
    active_j: float
    idle_j: float
    egress_gb: float
    egress_usd: float
    carbon_g: float

    @property
    def energy_j(self) -> float:
        return self.active_j + self.idle_j


def site_footprint(use: SiteUse, spec: FootprintSpec, t_s: float = 0.0) -> SiteFootprint:
    """One site's joules, egress and carbon in a round that started at simulated `t_s`."""
    if use.measured_energy_j is not None:
        active = use.measured_energy_j
    else:
        active = use.gpus * spec.gpu_power_w * use.compute_s
    idle = use.gpus * spec.gpu_idle_power_w * max(use.held_s - use.compute_s, 0.0)
    egress_gb = use.bytes_moved / GB
    carbon = (active + idle) / JOULES_PER_KWH * spec.intensity(use.site_id, t_s)
    return SiteFootprint(
        use.site_id, active, idle, egress_gb, egress_gb * spec.egress_usd_per_gb, carbon
    )


@dataclass(frozen=True)
class RoundFootprint:
    """A round's totals over its selected sites (the rounds.csv columns)."""

    energy_j: float
    idle_energy_j: float
    egress_gb: float
    egress_usd: float
    carbon_g: float
    sites: tuple[SiteFootprint, ...] = ()


def round_footprint(
    uses: Sequence[SiteUse], spec: FootprintSpec, t_s: float = 0.0
) -> RoundFootprint:
    """Sum of site_footprint over the round's sites (summed in the order given)."""
    sites = tuple(site_footprint(u, spec, t_s) for u in uses)
    return RoundFootprint(
        energy_j=sum(s.energy_j for s in sites),
        idle_energy_j=sum(s.idle_j for s in sites),
        egress_gb=sum(s.egress_gb for s in sites),
        egress_usd=sum(s.egress_usd for s in sites),
        carbon_g=sum(s.carbon_g for s in sites),
        sites=sites,
    )


@dataclass
class FootprintTotals:
    """Running totals of a run (what summary.json reports, in kWh, $ and kg)."""

    energy_j: float = 0.0
    idle_energy_j: float = 0.0
    egress_gb: float = 0.0
    egress_usd: float = 0.0
    carbon_g: float = 0.0

    def add(self, r: RoundFootprint) -> None:
        self.energy_j += r.energy_j
        self.idle_energy_j += r.idle_energy_j
        self.egress_gb += r.egress_gb
        self.egress_usd += r.egress_usd
        self.carbon_g += r.carbon_g

    def to_json(self) -> dict[str, float]:
        return {
            "energy_j": self.energy_j,
            "idle_energy_j": self.idle_energy_j,
            "egress_gb": self.egress_gb,
            "egress_usd": self.egress_usd,
            "carbon_g": self.carbon_g,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, float]) -> FootprintTotals:
        return cls(**{k: float(data[k]) for k in cls().to_json()})

    def summary(self) -> dict[str, float]:
        """The summary.json units: kWh, GB, US$, kg CO2."""
        return {
            "energy_kwh": self.energy_j / JOULES_PER_KWH,
            "idle_energy_kwh": self.idle_energy_j / JOULES_PER_KWH,
            "egress_gb": self.egress_gb,
            "egress_usd": self.egress_usd,
            "carbon_kg": self.carbon_g / 1000.0,
        }
