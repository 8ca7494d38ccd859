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

    @classmethod
    def from_run_config(cls, run: RunConfig) -> ProfilerConfig:
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
        )
