"""What the profiler knows: the generated population, power over time, and telemetry.

Every round the aggregator asks for every site's profile. What does not change between
calls (ids, distances, links, and in uniform mode the power too) is built once as a
SiteColumns template; a call copies it (in C) and adds only what changes: trace-mode power,
computed for all sites at once with numpy, and probed links. At 100,000 sites a call then
costs milliseconds, not the second that a Python loop over the sites took.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from powertrip.core.power import (
    DEFAULT_TRACE,
    SAMPLE_PERIOD_S,
    SitePowerTrace,
    assign_traces,
    load_domains,
)
from powertrip.core.profiles import Site, generate_population, population_regions
from powertrip.v1 import common_pb2
from services.profiler.config import ProfilerConfig


@dataclass
class SiteTelemetry:
    power_draw_w: float = 0.0
    step_time_s: float = 0.0
    bytes_up: int = 0
    bytes_down: int = 0
    energy_j: float = 0.0


@dataclass(frozen=True)
class Measured:
    latency_s: float
    bandwidth_bytes_per_s: float
    rtt_s: float
    probe_bytes: int


def combine(samples: list[Measured]) -> Measured:
    """The link estimate from a window of probes: the minimum RTT (queueing and a busy CPU
    only ever add delay) and the median throughput (a stalled sender or receiver can make
    one probe read low, or high when it catches up from buffers, so neither extreme)."""
    if not samples:
        raise ValueError("combine needs at least one sample")
    fastest = min(samples, key=lambda m: m.rtt_s)
    return Measured(
        latency_s=fastest.rtt_s / 2,
        bandwidth_bytes_per_s=statistics.median(m.bandwidth_bytes_per_s for m in samples),
        rtt_s=fastest.rtt_s,
        probe_bytes=max(m.probe_bytes for m in samples),
    )


class ClaimError(Exception):
    """A site cannot be claimed; `reason` is "invalid", "unknown", "taken" or "exhausted"."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class ProfileBook:
    """Thread-safe store of sites and their latest telemetry."""

    config: ProfilerConfig
    sites: list[Site] = field(init=False)
    telemetry: dict[str, SiteTelemetry] = field(default_factory=dict)
    measured: dict[str, Measured] = field(default_factory=dict)
    samples: dict[str, deque] = field(default_factory=dict)
    window: int = 6  # probes per site the estimate is made from
    claims: dict[str, str] = field(default_factory=dict)  # site_id -> worker_id
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.sites = generate_population(self.config.population)
        self._by_id = {s.site_id: s for s in self.sites}
        #: each site's grid intensity (g/kWh) in a regions population, else None: the
        #: carbon-aware policies rank by it (SiteColumns.carbon_g_per_kwh)
        self.carbon: dict[str, float] | None = None
        if self.config.population.population == "regions":
            regions = population_regions(self.config.population)
            self.carbon = {
                site.site_id: region.g_co2_per_kwh
                for site, region in zip(self.sites, regions, strict=True)
            }
        self.traces = None
        if self.config.power == "trace":
            domains = load_domains(self.config.power_trace or DEFAULT_TRACE)
            population = self.config.population
            self.traces = assign_traces(
                domains,
                population.num_sites,
                population.seed,
                population.gpus_per_site,
                [site.gpus_available for site in self.sites],
                self.config.gpu_power_w,
            )
        self._trace_power = None if self.traces is None else TracePower(self.traces)
        template = self._static_columns()
        # merged into each reply: parsing bytes into a fresh message beats CopyFrom
        self._template = template.SerializeToString()
        self._uniform_power = np.array(template.power_fraction, dtype=np.float64)

    def _static_columns(self) -> common_pb2.SiteColumns:
        """Every site's columns that no call changes (uniform power included)."""
        sites = self.sites
        links = [self.link(site) for site in sites]
        columns = common_pb2.SiteColumns(
            site_id=[site.site_id for site in sites],
            distance_miles=[site.distance_miles for site in sites],
            latency_s=[latency for latency, _ in links],
            bandwidth_bytes_per_s=[bandwidth for _, bandwidth in links],
            gpus_available=[site.gpus_available for site in sites],
            alive=[True] * len(sites),
            power_source=self.config.power,
        )
        if self.carbon is not None:
            columns.carbon_g_per_kwh.extend([self.carbon[site.site_id] for site in sites])
        if self.traces is None:
            columns.power_fraction.extend([self.power_at(site, 0.0) for site in sites])
            columns.gpus_effective.extend([self.gpus_at(site, 0.0) for site in sites])
        return columns

    def all_columns(self, at_s: float, columns: common_pb2.SiteColumns) -> np.ndarray:
        """Fill the empty `columns` with every site's profile at `at_s` (the values that
        `power_at`, `gpus_at`, `link` and `measured` give per site); returns the power
        column as an array (read-only)."""
        columns.MergeFromString(self._template)
        if self._trace_power is None:
            power = self._uniform_power
        else:
            power, gpus = self._trace_power.at(at_s)
            columns.power_fraction.extend(power.tolist())
            columns.gpus_effective.extend(gpus.tolist())
        with self._lock:
            measured = dict(self.measured)
        if measured:  # left empty until a probe has measured some site
            found = [measured.get(site.site_id) for site in self.sites]
            columns.measured_latency_s.extend([m.latency_s if m else 0.0 for m in found])
            columns.measured_bandwidth_bytes_per_s.extend(
                [m.bandwidth_bytes_per_s if m else 0.0 for m in found]
            )
        return power

    def link(self, site: Site) -> tuple[float, float]:
        """(latency_s, bandwidth_bytes_per_s) of the emulated link: the profile x the scales."""
        return (
            site.latency_s * self.config.latency_scale,
            site.bandwidth_bytes_per_s * self.config.bandwidth_scale,
        )

    def claim(self, worker_id: str, site_id: str = "") -> Site:
        """Give `worker_id` the site it names, or the lowest unclaimed one; idempotent, so a
        restarted worker gets its site back."""
        if not worker_id:
            raise ClaimError("invalid", "worker_id is required")
        with self._lock:
            if site_id:
                if site_id not in self._by_id:
                    # say what exists: a remote worker's --sites must name one of the run's
                    ids = [s.site_id for s in self.sites]
                    span = f"{ids[0]} .. {ids[-1]}" if ids else "none"
                    raise ClaimError(
                        "unknown",
                        f"unknown site id {site_id}: this run has {len(ids)} sites ({span}); "
                        "name one of them, or leave --sites out to claim a free one",
                    )
                holder = self.claims.get(site_id)
                if holder not in (None, worker_id):
                    raise ClaimError("taken", f"{site_id} is already claimed by worker {holder}")
            else:
                mine = [s for s, w in self.claims.items() if w == worker_id]
                free = [s.site_id for s in self.sites if s.site_id not in self.claims]
                if mine:
                    site_id = mine[0]
                elif free:
                    site_id = free[0]
                else:
                    raise ClaimError(
                        "exhausted",
                        f"all {len(self.sites)} sites are claimed; run as many site workers "
                        "as the run has sites",
                    )
            self.claims[site_id] = worker_id
            return self._by_id[site_id]

    def add_sample(self, site_id: str, sample: Measured) -> Measured:
        """Record one probe of a site; returns the site's estimate over its window."""
        with self._lock:
            window = self.samples.setdefault(site_id, deque(maxlen=self.window))
            window.append(sample)
            self.measured[site_id] = combine(list(window))
            return self.measured[site_id]

    def power_at(self, site: Site, at_s: float) -> float:
        """Uniform mode draws p_i once (paper §5.1); trace mode replays spare power at t."""
        if self.traces is None:
            return site.power_fraction
        return self.traces[site.index].power_fraction_at(at_s)

    def gpus_at(self, site: Site, at_s: float) -> int:
        if self.traces is None:  # p_i x N_max, at most N_avail (p_i <= N_avail / N_max)
            n_max = self.config.population.gpus_per_site
            return min(site.gpus_available, int(site.power_fraction * n_max))
        return self.traces[site.index].effective_gpus_at(at_s)

    def lookup(self, site_ids: list[str]) -> list[Site]:
        if not site_ids:
            return list(self.sites)
        missing = [s for s in site_ids if s not in self._by_id]
        if missing:
            raise KeyError(f"unknown site id(s): {', '.join(missing[:5])}")
        return [self._by_id[s] for s in site_ids]

    def record(self, site_id: str, update: SiteTelemetry) -> SiteTelemetry:
        if site_id not in self._by_id:
            raise KeyError(f"unknown site id: {site_id}")
        with self._lock:
            current = self.telemetry.setdefault(site_id, SiteTelemetry())
            current.power_draw_w = update.power_draw_w
            current.step_time_s = update.step_time_s or current.step_time_s
            current.bytes_up += update.bytes_up
            current.bytes_down += update.bytes_down
            current.energy_j += update.energy_j
            return current


class TracePower:
    """Every site's trace-mode power at one time, as arrays: `SitePowerTrace`'s arithmetic
    step for step (same operations, same order), so each value is bit for bit the one
    `power_fraction_at` / `effective_gpus_at` gives (tests/unit/test_profiler_scale.py)."""

    def __init__(self, traces: list[SitePowerTrace]):
        domains = {id(t.domain): t.domain for t in traces}
        which = {key: i for i, key in enumerate(domains)}
        domain = np.array([which[id(t.domain)] for t in traces], dtype=np.int64)
        #: (the domain's utilisation, the rows of its sites), one per domain in use
        self.groups = [
            (d.utilisation, np.flatnonzero(domain == i)) for i, d in enumerate(domains.values())
        ]
        self.offset = np.array([t.offset_s for t in traces], dtype=np.float64)
        self.available = np.array([t.gpus_available for t in traces], dtype=np.int64)
        self.gpus_max = np.array([t.gpus_max for t in traces], dtype=np.int64)
        self.gpu_power_w = np.array([t.gpu_power_w for t in traces], dtype=np.float64)
        self.capacity_w = np.array([t.capacity_w for t in traces], dtype=np.float64)

    def at(self, sim_time_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(power fractions, effective GPUs) of every site at `sim_time_s`."""
        position = (self.offset + sim_time_s) / SAMPLE_PERIOD_S
        spare = np.empty(len(self.offset), dtype=np.float64)
        for util, rows in self.groups:  # DomainTrace.spare_at
            n = len(util)
            at = np.remainder(position[rows], n)
            i = np.floor(at)
            frac = at - i
            i = i.astype(np.int64)
            spare[rows] = 1.0 - ((1 - frac) * util[i] + frac * util[(i + 1) % n])
        # SitePowerTrace.effective_gpus_at (Eq. 6 in watts): P_spare = spare x P_cap, then
        # timemodel.effective_gpus: min(available, floor(max(P_spare, 0) / P_gpu))
        spare_w = spare * self.capacity_w
        gpus = np.minimum(self.available, np.floor(np.maximum(spare_w, 0.0) / self.gpu_power_w))
        gpus = gpus.astype(np.int64)
        return np.maximum(gpus, 1) / self.gpus_max, gpus
