"""The site population of paper §5.1, generated from a seed.

Distances are U[100, 10000] miles, bandwidth is inversely proportional to distance,
propagation runs at fibre speed, and each site's power fraction is U[0.1, 1.0] (uniform
mode). Everything derives from the seed, so every process builds the same population.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from powertrip.timemodel import propagation_delay_s


@dataclass(frozen=True)
class PopulationSpec:
    num_sites: int = 100
    seed: int = 0
    min_distance_miles: float = 100.0
    max_distance_miles: float = 10_000.0
    #: bandwidth at `reference_distance_miles`; B_i = B_ref * D_ref / D_i
    reference_bandwidth_bytes_per_s: float = 1.25e9  # 10 Gbit/s at 100 miles
    reference_distance_miles: float = 100.0
    min_power: float = 0.1
    max_power: float = 1.0
    gpus_per_site: int = 8

    def validate(self) -> None:
        if self.num_sites < 1:
            raise ValueError(f"num_sites must be >= 1, got {self.num_sites}")
        if not 0 <= self.min_distance_miles <= self.max_distance_miles:
            raise ValueError("min_distance_miles must be in [0, max_distance_miles]")
        if self.reference_bandwidth_bytes_per_s <= 0:
            raise ValueError("reference_bandwidth_bytes_per_s must be > 0")
        if not 0 < self.min_power <= self.max_power <= 1:
            raise ValueError("power range must satisfy 0 < min_power <= max_power <= 1")


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
    spec.validate()
    rng = np.random.default_rng([spec.seed, 0x5173])
    distance = rng.uniform(spec.min_distance_miles, spec.max_distance_miles, spec.num_sites)
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
