"""gRPC face of the profiler."""

from __future__ import annotations

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge

from powertrip.v1 import common_pb2, profiler_pb2, profiler_pb2_grpc
from services.profiler.logic import ProfileBook, SiteTelemetry

SERVICE_NAME = profiler_pb2.DESCRIPTOR.services_by_name["Profiler"].full_name


class ProfilerMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.power = Gauge(
            "powertrip_site_power_fraction",
            "Power fraction p_i(t) of a site",
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
            "powertrip_site_link_bandwidth_bytes",
            "Link bandwidth in bytes/s",
            ["site", "source"],
            registry=registry,
        )
        self.energy = Counter(
            "powertrip_site_energy_joules", "Energy reported by a site", ["site"], registry=registry
        )


class ProfilerServicer(profiler_pb2_grpc.ProfilerServicer):
    def __init__(self, book: ProfileBook, metrics: ProfilerMetrics):
        self.book = book
        self.metrics = metrics
        for site in book.sites:
            metrics.latency.labels(site.site_id, "configured").set(site.latency_s)
            metrics.bandwidth.labels(site.site_id, "configured").set(site.bandwidth_bytes_per_s)

    def GetProfiles(self, request, context):
        try:
            sites = self.book.lookup(list(request.site_ids))
        except KeyError as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        if request.at_s < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "at_s must be >= 0")
        profiles = []
        for site in sites:
            power = self.book.power_at(site, request.at_s)
            self.metrics.power.labels(site.site_id).set(power)
            gpus = self.book.gpus_at(site, request.at_s)
            profiles.append(
                common_pb2.SiteProfile(
                    site_id=site.site_id,
                    power_fraction=power,
                    distance_miles=site.distance_miles,
                    latency_s=site.latency_s,
                    bandwidth_bytes_per_s=site.bandwidth_bytes_per_s,
                    gpus_available=site.gpus_available,
                    gpus_effective=gpus,
                    power_source=self.book.config.power,
                    alive=True,
                )
            )
        return profiler_pb2.GetProfilesResponse(
            sites=profiles, power_mode=self.book.config.power, seed=self.book.config.population.seed
        )

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
