"""gRPC face of the profiler."""

from __future__ import annotations

import logging
import threading
import time

import grpc
import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge

from powertrip.linkshaping.probe import ProbeError, measure
from powertrip.rpc.sitecolumns import profile_at, profiles_from_columns
from powertrip.v1 import common_pb2, profiler_pb2, profiler_pb2_grpc
from services.profiler.profile_book import ClaimError, Measured, ProfileBook, SiteTelemetry

SERVICE_NAME = profiler_pb2.DESCRIPTOR.services_by_name["Profiler"].full_name
log = logging.getLogger("profiler")


class ProfilerMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.power = Gauge(
            "powertrip_site_power_ratio",
            "Power fraction p_i(t) of a site: its powered share of GPUs (0-1)",
            ["site"],
            registry=registry,
        )
        self.latency = Gauge(
            "powertrip_site_link_latency_seconds",
            "One-way link latency",
            ["site", "source"],
            registry=registry,
        )
        self.bandwidth = Gauge(
            "powertrip_site_link_bandwidth_bytes_per_second",
            "Link bandwidth, configured or measured",
            ["site", "source"],
            registry=registry,
        )
        self.energy = Counter(
            "powertrip_site_energy_joules_total",
            "Energy reported by a site",
            ["site"],
            registry=registry,
        )


class ProfilerServicer(profiler_pb2_grpc.ProfilerServicer):
    def __init__(self, book: ProfileBook, metrics: ProfilerMetrics, probe_interval_s: float = 0):
        self.book = book
        self.metrics = metrics
        self.probe_interval_s = probe_interval_s
        self._probe_addresses: dict[str, str] = {}  # site_id -> probe address
        self._probe_failures: dict[str, int] = {}
        if probe_interval_s > 0:
            threading.Thread(target=self._reprobe_loop, name="reprobe", daemon=True).start()
        # one probe at a time: concurrent probes would share CPU and links and read low
        self._probe_lock = threading.Lock()
        for site in book.sites:
            latency, bandwidth = book.link(site)
            metrics.latency.labels(site.site_id, "configured").set(latency)
            metrics.bandwidth.labels(site.site_id, "configured").set(bandwidth)
        # each site's power gauge, and the value it shows (NaN: not yet shown): a call for
        # every site sets only the gauges whose value changed (none in uniform mode)
        self._power_gauges = [metrics.power.labels(site.site_id) for site in book.sites]
        self._power_shown = np.full(len(book.sites), np.nan)
        self._gauge_lock = threading.Lock()
        self._show_power(book.all_columns(0.0, common_pb2.SiteColumns()))

    def _show_power(self, power: np.ndarray) -> None:
        """Set the power gauge of every site whose value differs from the one shown."""
        with self._gauge_lock:
            changed = np.flatnonzero(power != self._power_shown)
            for row, value in zip(changed.tolist(), power[changed].tolist(), strict=True):
                self._power_gauges[row].set(value)
            self._power_shown[changed] = power[changed]

    def _columns(self, sites, at_s: float) -> common_pb2.SiteColumns:
        """The profiles of `sites` at `at_s`, built column by column: the one place profile
        values are computed, whether the caller asked for columns or for messages."""
        book = self.book
        power = [book.power_at(site, at_s) for site in sites]
        with self._gauge_lock:
            for site, fraction in zip(sites, power, strict=True):
                self._power_gauges[site.index].set(fraction)
                self._power_shown[site.index] = fraction
        links = [book.link(site) for site in sites]
        columns = common_pb2.SiteColumns(
            site_id=[site.site_id for site in sites],
            power_fraction=power,
            distance_miles=[site.distance_miles for site in sites],
            latency_s=[latency for latency, _ in links],
            bandwidth_bytes_per_s=[bandwidth for _, bandwidth in links],
            gpus_available=[site.gpus_available for site in sites],
            gpus_effective=[book.gpus_at(site, at_s) for site in sites],
            alive=[True] * len(sites),
            power_source=book.config.power,
        )
        if book.carbon is not None:
            columns.carbon_g_per_kwh.extend([book.carbon[site.site_id] for site in sites])
        measured = [book.measured.get(site.site_id) for site in sites]
        if any(measured):  # left empty until a probe has measured some site
            columns.measured_latency_s.extend([m.latency_s if m else 0.0 for m in measured])
            columns.measured_bandwidth_bytes_per_s.extend(
                [m.bandwidth_bytes_per_s if m else 0.0 for m in measured]
            )
        return columns

    def _profile(self, site, at_s: float) -> common_pb2.SiteProfile:
        return profile_at(self._columns([site], at_s), 0)

    def _all_columns(self, at_s: float, columns: common_pb2.SiteColumns) -> None:
        """Every site into `columns`, in the book's order: the values `_columns` gives,
        from the book's template (see profile_book.py) instead of a loop over the sites."""
        self._show_power(self.book.all_columns(at_s, columns))

    def GetProfiles(self, request, context):
        try:
            sites = self.book.lookup(list(request.site_ids)) if request.site_ids else None
        except KeyError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        if request.at_s < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "at_s must be >= 0")
        reply = profiler_pb2.GetProfilesResponse(
            power_mode=self.book.config.power, seed=self.book.config.population.seed
        )
        if sites is None and request.columnar:  # what the aggregator asks every round
            self._all_columns(request.at_s, reply.columns)
            return reply
        columns = self._columns(self.book.sites if sites is None else sites, request.at_s)
        if request.columnar:
            reply.columns.CopyFrom(columns)
        else:
            reply.sites.extend(profiles_from_columns(columns))
        return reply

    def ReportTelemetry(self, request, context):
        update = SiteTelemetry(
            power_draw_w=request.power_draw_w,
            step_time_s=request.step_time_s,
            bytes_up=request.bytes_up,
            bytes_down=request.bytes_down,
            energy_j=request.energy_j,
        )
        if min(update.power_draw_w, update.step_time_s, update.energy_j) < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "telemetry values must be >= 0")
        try:
            self.book.record(request.site_id, update)
        except KeyError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        if update.energy_j:
            self.metrics.energy.labels(request.site_id).inc(update.energy_j)
        return profiler_pb2.TelemetryAck(ok=True)

    def ClaimSite(self, request, context):
        try:
            site = self.book.claim(request.worker_id, request.site_id)
        except ClaimError as exc:
            code = {
                "unknown": grpc.StatusCode.NOT_FOUND,
                "taken": grpc.StatusCode.ALREADY_EXISTS,
                "exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
            }.get(exc.reason, grpc.StatusCode.INVALID_ARGUMENT)
            context.abort(code, str(exc))
        log.info("worker %s claimed %s", request.worker_id, site.site_id)
        return profiler_pb2.ClaimSiteResponse(
            site=self._profile(site, 0.0),
            latency_scale=self.book.config.latency_scale,
            bandwidth_scale=self.book.config.bandwidth_scale,
        )

    def MeasureLink(self, request, context):
        """Probe the site's echo through its shaped path: RTT and throughput, then publish."""
        try:
            (site,) = self.book.lookup([request.site_id])
        except (KeyError, ValueError):
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown site id: {request.site_id!r}")
        if not request.probe_address:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "probe_address is required")
        try:
            measured, sample = self._probe(site, request.probe_address)
        except ProbeError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        self._probe_addresses[site.site_id] = request.probe_address
        self._probe_failures[site.site_id] = 0
        latency, bandwidth = self.book.link(site)
        log.info(
            "%s link measured via %s: one-way %.1f ms (configured %.1f), %.2f MB/s "
            "(configured %.2f), probe %d bytes",
            site.site_id,
            request.probe_address,
            measured.latency_s * 1e3,
            latency * 1e3,
            measured.bandwidth_bytes_per_s / 1e6,
            bandwidth / 1e6,
            sample.probe_bytes,
        )
        return profiler_pb2.MeasureLinkResponse(
            site=self._profile(site, 0.0), rtt_s=sample.rtt_s, probe_bytes=sample.probe_bytes
        )

    def _probe(self, site, address: str, bulk_probes: int = 2) -> tuple[Measured, Measured]:
        """One probe of a site; returns (the site's estimate over its window, this probe)."""
        _latency, bandwidth = self.book.link(site)
        with self._probe_lock:
            m = measure(address, bandwidth, bulk_probes=bulk_probes)
        sample = Measured(m.latency_s, m.bandwidth_bytes_per_s, m.rtt_s, m.probe_bytes)
        measured = self.book.add_sample(site.site_id, sample)
        self.metrics.latency.labels(site.site_id, "measured").set(measured.latency_s)
        self.metrics.bandwidth.labels(site.site_id, "measured").set(measured.bandwidth_bytes_per_s)
        return measured, sample

    def _reprobe_loop(self) -> None:
        """Probe every known site again each interval; a site whose probe fails 3 times in a
        row (its worker has gone) keeps its last estimate and is no longer probed.  One bulk
        transfer (about 1 s of the link) per re-probe: the probe shares the link the site
        uploads its deltas on."""
        while True:
            time.sleep(self.probe_interval_s)
            for site_id, address in list(self._probe_addresses.items()):
                (site,) = self.book.lookup([site_id])
                try:
                    measured, _ = self._probe(site, address, bulk_probes=1)
                    self._probe_failures[site_id] = 0
                    log.debug("%s re-probed: rtt %.2f ms", site_id, measured.rtt_s * 1e3)
                except ProbeError as exc:
                    self._probe_failures[site_id] = self._probe_failures.get(site_id, 0) + 1
                    if self._probe_failures[site_id] >= 3:
                        log.info("%s: probe failing (%s); no longer probed", site_id, exc)
                        self._probe_addresses.pop(site_id, None)
