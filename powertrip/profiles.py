"""The site population of paper §5.1, generated from a seed.

Distances. The paper places its 100 sites 100 to 10,000 miles from the aggregator (§5.1) and
says a 1,000-mile radius is "limited to only 22 nearby sites" (§5.3, Fig. 9). Uniform
distances U[100, 10000] put only 100 * 900 / 9900 ~ 9.1 sites inside 1,000 miles, so the
default ("calibrated") distribution skews them towards the aggregator:

    D_i = D_min + (D_max - D_min) * u_i ** gamma,  u_i ~ U[0, 1],
    gamma = ln((R - D_min) / (D_max - D_min)) / ln(s),

which gives P(D_i <= R) = s exactly. With R = `radius_miles` = 1000 and s = `radius_share`
= 0.22 on [100, 10000], gamma = ln(900/9900) / ln(0.22) ~ 1.584. gamma is computed from
(s, R, D_min, D_max), never hard-coded, so the calibration holds for any range that contains
R. `distance_distribution="uniform"` (gamma = 1) keeps the plain U[D_min, D_max] draw.

Links. Bandwidth falls inversely with distance (§5.1 text, Fig. 5):
B_i = B_ref * D_ref / D_i, 10 Gbit/s at 100 miles by default; propagation runs at fibre
speed (`timemodel.propagation_delay_s`).

Power. Each site's power fraction is U[min_power, max_power], U[0.1, 1.0] by default
(uniform power mode; trace mode replaces it in the profiler). min_power = max_power = 1 gives
identical full-power sites (the paper's Figs. 6-7).

Everything derives from the seed through one numpy Generator, and both distance
distributions consume the same draws (the same u_i, then the powers), so every process
builds the same population, the two distributions rank sites by distance identically and
give them the same powers, and "uniform" reproduces the populations this module made before
the calibrated default existed, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from powertrip.timemodel import propagation_delay_s

#: "calibrated": u**gamma, 22 % of sites within 1,000 miles (paper Fig. 9); "uniform": U[min, max]
DISTANCE_DISTRIBUTIONS = ("calibrated", "uniform")


@dataclass(frozen=True)
class PopulationSpec:
    num_sites: int = 100
    seed: int = 0
    min_distance_miles: float = 100.0
    max_distance_miles: float = 10_000.0
    #: how distances spread over [min, max]; see the module docstring
    distance_distribution: str = "calibrated"
    #: "calibrated": this share of the sites lies within `radius_miles` (in expectation)
    radius_share: float = 0.22
    radius_miles: float = 1000.0
    #: bandwidth at `reference_distance_miles`; B_i = B_ref * D_ref / D_i
    reference_bandwidth_bytes_per_s: float = 1.25e9  # 10 Gbit/s at 100 miles
    reference_distance_miles: float = 100.0
    min_power: float = 0.1
    max_power: float = 1.0
    gpus_per_site: int = 8

    def validate(self) -> None:
        """Raise ValueError naming the field (and the allowed values) of the first bad one."""
        if self.num_sites < 1:
            raise ValueError(f"num_sites must be >= 1, got {self.num_sites}")
        if not 0 <= self.min_distance_miles <= self.max_distance_miles:
            raise ValueError("min_distance_miles must be in [0, max_distance_miles]")
        if self.distance_distribution not in DISTANCE_DISTRIBUTIONS:
            raise ValueError(
                f"distance_distribution must be one of {', '.join(DISTANCE_DISTRIBUTIONS)}, "
                f"got {self.distance_distribution!r}"
            )
        if self.distance_distribution == "calibrated":
            if not 0 < self.radius_share < 1:
                raise ValueError(f"radius_share must be in (0, 1), got {self.radius_share}")
            if not self.min_distance_miles < self.radius_miles < self.max_distance_miles:
                raise ValueError(
                    f"radius_miles ({self.radius_miles:g}) must lie strictly between "
                    f"min_distance_miles ({self.min_distance_miles:g}) and max_distance_miles "
                    f"({self.max_distance_miles:g}) for distance_distribution 'calibrated'; "
                    "widen the range or use distance_distribution 'uniform'"
                )
        if self.reference_bandwidth_bytes_per_s <= 0:
            raise ValueError("reference_bandwidth_bytes_per_s must be > 0")
        if not 0 < self.min_power <= self.max_power <= 1:
            raise ValueError(
                "min_power, max_power: must satisfy 0 < min_power <= max_power <= 1, got "
                f"min_power={self.min_power}, max_power={self.max_power}"
            )


def distance_exponent(spec: PopulationSpec) -> float:
    """gamma of D = D_min + (D_max - D_min) * u**gamma: 1 for "uniform"; for "calibrated" the
    value that puts `radius_share` of the sites within `radius_miles` (module docstring)."""
    spec.validate()
    if spec.distance_distribution == "uniform":
        return 1.0
    inner = (spec.radius_miles - spec.min_distance_miles) / (
        spec.max_distance_miles - spec.min_distance_miles
    )
    return math.log(inner) / math.log(spec.radius_share)


def share_within(spec: PopulationSpec, radius_miles: float) -> float:
    """P(D_i <= radius_miles) under the spec's distance distribution (expected share)."""
    lo, hi = spec.min_distance_miles, spec.max_distance_miles
    if radius_miles < lo:
        return 0.0
    if radius_miles >= hi:
        return 1.0
    return ((radius_miles - lo) / (hi - lo)) ** (1.0 / distance_exponent(spec))


@dataclass(frozen=True)
class Site:
    site_id: str
    index: int
    distance_miles: float
    latency_s: float
    bandwidth_bytes_per_s: float
    power_fraction: float
    gpus_available: int

    def as_dict(self) -> dict:
        return asdict(self)


def site_id(index: int) -> str:
    return f"site-{index:03d}"


def site_index(site: str) -> int:
    """Inverse of site_id; raises ValueError for ids that are not ours."""
    prefix, _, number = site.partition("-")
    if prefix != "site" or not number.isdigit():
        raise ValueError(f"not a site id: {site!r}")
    return int(number)


def generate_population(spec: PopulationSpec) -> list[Site]:
    """The spec's sites, a pure function of the spec (the seed above all)."""
    gamma = distance_exponent(spec)  # validates the spec
    rng = np.random.default_rng([spec.seed, 0x5173])
    u = rng.random(spec.num_sites)
    span = spec.max_distance_miles - spec.min_distance_miles
    # gamma == 1 takes the exact arithmetic of rng.uniform(min, max, n), so "uniform" keeps the
    # populations made before the calibrated default, bit for bit
    distance = spec.min_distance_miles + span * (u if gamma == 1.0 else u**gamma)
    power = rng.uniform(spec.min_power, spec.max_power, spec.num_sites)
    bandwidth = (
        spec.reference_bandwidth_bytes_per_s
        * spec.reference_distance_miles
        / np.maximum(distance, 1e-9)
    )
    return [
        Site(
            site_id=site_id(i),
            index=i,
            distance_miles=float(distance[i]),
            latency_s=propagation_delay_s(float(distance[i])),
            bandwidth_bytes_per_s=float(bandwidth[i]),
            power_fraction=float(power[i]),
            gpus_available=spec.gpus_per_site,
        )
        for i in range(spec.num_sites)
    ]
