"""Profiler configuration: the site population and the power mode."""

from __future__ import annotations

from dataclasses import dataclass

from powertrip.config import RunConfig
from powertrip.profiles import PopulationSpec


@dataclass(frozen=True)
class ProfilerConfig:
    population: PopulationSpec
    power: str = "uniform"
    power_trace: str | None = None
    #: emulated links = paper profile x scale (containers scale bandwidth down so that
    #: updates cross real shaped links in seconds, not minutes); 1 = the paper's links
    latency_scale: float = 1.0
    bandwidth_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("latency_scale", "bandwidth_scale"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")

    @classmethod
    def from_run_config(
        cls, run: RunConfig, latency_scale: float = 1.0, bandwidth_scale: float = 1.0
    ) -> ProfilerConfig:
        return cls(
            population=PopulationSpec(
                num_sites=run.num_sites,
                seed=run.seed,
                min_distance_miles=run.min_distance_miles,
                max_distance_miles=run.max_distance_miles,
                reference_bandwidth_bytes_per_s=run.reference_bandwidth_gbps * 1e9 / 8,
                gpus_per_site=run.gpus_per_site,
            ),
            power=run.power,
            power_trace=run.power_trace,
            latency_scale=latency_scale,
            bandwidth_scale=bandwidth_scale,
        )
