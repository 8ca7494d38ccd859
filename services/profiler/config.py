"""Profiler configuration: the site population (distances, links, power range) and the
power mode."""

from __future__ import annotations

from dataclasses import dataclass

from powertrip.core.config import RunConfig
from powertrip.core.footprint import GPU_POWER_W
from powertrip.core.profiles import PopulationSpec


@dataclass(frozen=True)
class ProfilerConfig:
    population: PopulationSpec
    power: str = "uniform"
    power_trace: str | None = None
    #: emulated links = paper profile x scale (containers scale bandwidth down so that
    #: updates cross real shaped links in seconds, not minutes); 1 = the paper's links
    latency_scale: float = 1.0
    bandwidth_scale: float = 1.0
    #: P_gpu of Eq. 6 in trace mode (a site's capacity is gpus_per_site x this, in watts)
    gpu_power_w: float = GPU_POWER_W

    def __post_init__(self) -> None:
        for name in ("latency_scale", "bandwidth_scale", "gpu_power_w"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")

    @classmethod
    def from_run_config(
        cls, run: RunConfig, latency_scale: float = 1.0, bandwidth_scale: float = 1.0
    ) -> ProfilerConfig:
        """Everything population-related comes from `RunConfig.population_spec`, so the
        distance distribution, the link model and the power range of the run reach the
        served sites."""
        return cls(
            population=run.population_spec(),
            power=run.power,
            power_trace=run.power_trace,
            latency_scale=latency_scale,
            bandwidth_scale=bandwidth_scale,
            gpu_power_w=run.gpu_power_w,
        )
