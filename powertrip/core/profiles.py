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

Links. Two link models (`link_model`), both with propagation at fibre speed
(`timemodel.propagation_delay_s`) and Eq. 3's delay T_comm,i = D_i / c + M / B_i:

* "inverse" (the default): B_i = B_ref * D_ref / D_i. From §5.1: bandwidth "is set to be
  inversely proportional to its distance". Ours: B_ref = 10 Gbit/s at D_ref = 100 miles
  (the paper gives no link speeds). Both M / B_i = M D_i / (B_ref D_ref) and D_i / c are
  linear in D_i, so this model's delay is a straight line in distance.
* "fig5": B_i = B_ref * K / max(D_i, K), with the knee K = `link_knee_miles`. Flat (= B_ref)
  within K, from §5.3: the 1,000-mile radius was chosen because Fig. 5 "shows the bandwidth
  remains relatively constant in this radius"; 1/D beyond K, from §5.1's "inversely
  proportional". The delay is then about M / B_ref inside K and grows with slope
  M / (B_ref K) + 1/c beyond it: convex with a kink at K, the "increases non-linearly with
  distance" of §5.1 (Fig. 5, right axis). Ours: B_ref = 10 Gbit/s (the flat speed; D_ref is
  not used) and K = 1,000 miles (the §5.3 radius; the paper gives neither a knee nor a
  speed). With these numbers fig5's links are K / D_ref = 10x faster than inverse's at and
  beyond the knee.

Power. Each site's power fraction is U[min_power, max_power], U[0.1, 1.0] by default
(uniform power mode; trace mode replaces it in the profiler). min_power = max_power = 1 gives
identical full-power sites (the paper's Figs. 6-7).

GPUs (paper §2.1, Eq. 6). Every site has room for N_max = `gpus_per_site` GPUs (32, the one
default: `RunConfig.gpus_per_site` is `GPUS_PER_SITE` too) and a power capacity of
P_cap = N_max x P_gpu watts (`powertrip.core.power`, P_gpu = `gpu_power_w`, 250 W). N_avail,i, the
GPUs physically there (`Site.gpus_available`), is N_max unless `gpus_available_min_fraction`
/ `gpus_available_max_fraction` (both 1 by default) ask for fewer: then N_avail,i is an
integer drawn uniformly from [ceil(min_fraction x N_max), floor(max_fraction x N_max)] (at
least 1) from its own seeded stream, so the distances and powers stay those of the defaults,
and the hardware side of Eq. 6 can bind: N_eff,i = min(N_avail,i, floor(P_spare / P_gpu)).
In uniform power mode the drawn power fraction is then capped at N_avail,i / N_max (the cap
is 1, a no-op, for the defaults); in trace mode the profiler applies Eq. 6 at every time.

Real regions (`population="regions"`). Instead of drawn distances, the sites are
Google Cloud's regions (`powertrip.core.regions`, data/regions/regions.csv): D_i is the
great-circle distance from the aggregator's region (`aggregator_region`), and the links
follow from D_i through `link_model` as above. The aggregator's own region would be 0 miles
away, which the inverse link model cannot take, so every D_i is at least
`min_distance_miles` (100, the paper's nearest site); `max_distance_miles` and the
distance distribution do not apply (Sydney is about 10,300 miles from Eemshaven). With fewer
sites than regions, the `num_sites` regions nearest the aggregator take part, in catalog
order. Powers (and GPUs) are drawn as for synthetic sites, from the same streams.

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

from powertrip.core import regions
from powertrip.core.timemodel import propagation_delay_s

#: "calibrated": u**gamma, 22 % of sites within 1,000 miles (paper Fig. 9); "uniform": U[min, max]
DISTANCE_DISTRIBUTIONS = ("calibrated", "uniform")
#: "inverse": B = B_ref D_ref / D (paper §5.1); "fig5": flat within the knee, then 1/D (Fig. 5)
LINK_MODELS = ("inverse", "fig5")
#: "synthetic": distances drawn from the seed; "regions": Google Cloud's regions (module docstring)
POPULATIONS = ("synthetic", "regions")
#: the aggregator's region for population "regions": europe-west4 (Eemshaven, NL), the
#: catalog's most central region (`regions.most_central`: 3,908 miles on average to the other
#: 39, Berlin's europe-west10 next at 3,910), so the typical site's link is as short as any
#: one aggregator can make it
AGGREGATOR_REGION = "europe-west4"
#: N_max, GPUs per site (trace mode's power granularity): the one default, RunConfig's too
GPUS_PER_SITE = 32

#: a site profile's per-site number columns, in the contract's SiteProfile field order (the
#: wire's SiteColumns and the aggregator's Profiles both hold one column per name)
SITE_NUMBER_COLUMNS = (
    "power_fraction",
    "distance_miles",
    "latency_s",
    "bandwidth_bytes_per_s",
    "measured_latency_s",
    "measured_bandwidth_bytes_per_s",
    "gpus_available",
    "gpus_effective",
    "alive",
    "carbon_g_per_kwh",
)


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
    #: how bandwidth falls with distance: LINK_MODELS, see the module docstring
    link_model: str = "inverse"
    #: "fig5": bandwidth is B_ref up to this distance, B_ref * knee / D beyond it (ours)
    link_knee_miles: float = 1000.0
    min_power: float = 0.1
    max_power: float = 1.0
    #: N_max (the default was 8 here while every run used RunConfig's 32; now both are 32)
    gpus_per_site: int = GPUS_PER_SITE
    #: N_avail,i ~ U{ceil(min x N_max) .. floor(max x N_max)}; 1, 1: N_avail = N_max (default)
    gpus_available_min_fraction: float = 1.0
    gpus_available_max_fraction: float = 1.0
    #: where the sites are: POPULATIONS (module docstring)
    population: str = "synthetic"
    #: population "regions": the region the aggregator runs in
    aggregator_region: str = AGGREGATOR_REGION

    def validate(self) -> None:
        """Raise ValueError naming the field (and the allowed values) of the first bad one."""
        if self.num_sites < 1:
            raise ValueError(f"num_sites must be >= 1, got {self.num_sites}")
        if self.population not in POPULATIONS:
            raise ValueError(
                f"population must be one of {', '.join(POPULATIONS)}, got {self.population!r}"
            )
        if self.population == "regions":
            for name, why in regions_problems(self.num_sites, self.aggregator_region):
                raise ValueError(f"{name}: {why}")
        if not 0 <= self.min_distance_miles <= self.max_distance_miles:
            raise ValueError("min_distance_miles must be in [0, max_distance_miles]")
        if self.distance_distribution not in DISTANCE_DISTRIBUTIONS:
            raise ValueError(
                f"distance_distribution must be one of {', '.join(DISTANCE_DISTRIBUTIONS)}, "
                f"got {self.distance_distribution!r}"
            )
        if self.distance_distribution == "calibrated" and self.population == "synthetic":
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
        if self.link_model not in LINK_MODELS:
            raise ValueError(
                f"link_model must be one of {', '.join(LINK_MODELS)}, got {self.link_model!r}"
            )
        if self.link_knee_miles <= 0:
            raise ValueError(f"link_knee_miles must be > 0, got {self.link_knee_miles}")
        if not 0 < self.min_power <= self.max_power <= 1:
            raise ValueError(
                "min_power, max_power: must satisfy 0 < min_power <= max_power <= 1, got "
                f"min_power={self.min_power}, max_power={self.max_power}"
            )
        if self.gpus_per_site < 1:
            raise ValueError(f"gpus_per_site must be >= 1, got {self.gpus_per_site}")
        lo, hi = self.gpus_available_min_fraction, self.gpus_available_max_fraction
        if not 0 < lo <= hi <= 1:
            raise ValueError(
                "gpus_available_min_fraction, gpus_available_max_fraction: must satisfy "
                f"0 < min <= max <= 1, got min={lo}, max={hi}"
            )


def regions_problems(num_sites: int, aggregator_region: str) -> list[tuple[str, str]]:
    """(setting, why) for each setting a "regions" population cannot take: more sites than
    the catalog has regions, an aggregator in no region of it. PopulationSpec.validate and
    the run configuration's checks (which name where a value came from) share them."""
    catalog = regions.catalog()
    problems = []
    if num_sites > len(catalog):
        problems.append((
            "num_sites",
            f"population 'regions' has {len(catalog)} sites (one per region of "
            f"data/regions/regions.csv), got {num_sites}; use --sites {len(catalog)} or fewer",
        ))  # fmt: skip
    names = [r.name for r in catalog]
    if aggregator_region not in names:
        problems.append((
            "aggregator_region",
            f"must be one of {', '.join(names)}, got {aggregator_region!r}",
        ))  # fmt: skip
    return problems


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


def link_bandwidth(spec: PopulationSpec, distance_miles: np.ndarray | float) -> np.ndarray:
    """Bytes/s of a link `distance_miles` long under the spec's link model (module
    docstring): "inverse" B_ref D_ref / D; "fig5" B_ref K / max(D, K)."""
    distance = np.asarray(distance_miles, dtype=np.float64)
    if spec.link_model == "fig5":
        knee = spec.link_knee_miles
        return spec.reference_bandwidth_bytes_per_s * knee / np.maximum(distance, knee)
    if spec.link_model != "inverse":
        raise ValueError(
            f"link_model must be one of {', '.join(LINK_MODELS)}, got {spec.link_model!r}"
        )
    # the arithmetic of the populations made before link_model existed, bit for bit
    return (
        spec.reference_bandwidth_bytes_per_s
        * spec.reference_distance_miles
        / np.maximum(distance, 1e-9)
    )


def gpus_available(spec: PopulationSpec) -> np.ndarray:
    """N_avail,i of every site (module docstring): N_max each for the default fractions (1,
    1), without a draw; else a seeded integer draw from its own stream."""
    n_max = spec.gpus_per_site
    lo_f, hi_f = spec.gpus_available_min_fraction, spec.gpus_available_max_fraction
    if lo_f == 1.0 and hi_f == 1.0:
        return np.full(spec.num_sites, n_max, dtype=np.int64)
    lo = max(1, math.ceil(lo_f * n_max - 1e-9))
    hi = max(lo, math.floor(hi_f * n_max + 1e-9))
    rng = np.random.default_rng([spec.seed, 0x6A7A])
    return rng.integers(lo, hi + 1, spec.num_sites).astype(np.int64)


def _nearest_regions(spec: PopulationSpec) -> tuple[list[int], np.ndarray]:
    """(catalog indices of the population's regions in catalog order, every region's miles
    from the aggregator's)."""
    spec.validate()
    if spec.population != "regions":
        raise ValueError(f"population {spec.population!r} has no regions")
    miles = regions.distances_from(regions.catalog(), spec.aggregator_region)
    return sorted(int(i) for i in np.argsort(miles, kind="stable")[: spec.num_sites]), miles


def population_regions(spec: PopulationSpec) -> tuple[regions.Region, ...]:
    """The regions of a "regions" population in site order (site i is the i-th): the
    `num_sites` nearest the aggregator's region, in catalog order."""
    chosen, _ = _nearest_regions(spec)
    return tuple(regions.catalog()[i] for i in chosen)


def region_distances(spec: PopulationSpec) -> np.ndarray:
    """D_i of a "regions" population: great-circle miles from the aggregator's region, at
    least `min_distance_miles` (module docstring)."""
    chosen, miles = _nearest_regions(spec)
    return np.maximum(miles[chosen], spec.min_distance_miles)


def generate_population(spec: PopulationSpec) -> list[Site]:
    """The spec's sites, a pure function of the spec (the seed above all)."""
    spec.validate()
    rng = np.random.default_rng([spec.seed, 0x5173])
    u = rng.random(spec.num_sites)
    if spec.population == "regions":
        distance = region_distances(spec)
    else:
        gamma = distance_exponent(spec)
        span = spec.max_distance_miles - spec.min_distance_miles
        # gamma == 1 takes the exact arithmetic of rng.uniform(min, max, n), so "uniform" keeps
        # the populations made before the calibrated default, bit for bit
        distance = spec.min_distance_miles + span * (u if gamma == 1.0 else u**gamma)
    power = rng.uniform(spec.min_power, spec.max_power, spec.num_sites)
    bandwidth = link_bandwidth(spec, distance)
    gpus = gpus_available(spec)
    if (gpus < spec.gpus_per_site).any():  # never for the defaults: their powers stay as drawn
        power = np.minimum(power, gpus / spec.gpus_per_site)
    return [
        Site(
            site_id=site_id(i),
            index=i,
            distance_miles=float(distance[i]),
            latency_s=propagation_delay_s(float(distance[i])),
            bandwidth_bytes_per_s=float(bandwidth[i]),
            power_fraction=float(power[i]),
            gpus_available=int(gpus[i]),
        )
        for i in range(spec.num_sites)
    ]
