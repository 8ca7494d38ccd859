"""What the ServerApp and the ClientApps share: the settings, the FEMNIST workload of
PowerTrip (real data, in the repository's data/), and each node's site profile.

Node i (Flower's partition-id) is PowerTrip's site i of the same generated population the
services use (powertrip.core.profiles: distance, one-way latency, bandwidth and spare power
from the seed), so a Flower run and `powertrip run` see the same sites.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import lru_cache

import torch

from powertrip.app.flower import SiteProfile
from powertrip.core.profiles import PopulationSpec, Site, generate_population
from powertrip.core.workloads import get_workload


@dataclass(frozen=True)
class Settings:
    """The run: Flower's run_config keys (pyproject.toml's [tool.flwr.app.config]), dashed."""

    num_server_rounds: int = 5
    policy: str = "powertrip"
    policy_params: str = "{}"  # JSON, e.g. '{"k": 5}'
    seed: int = 0
    workload: str = "femnist"
    local_steps: int = 10
    clock: str = "simulated"
    #: how long the strategy waits each round for the nodes' profiles; a node that has not
    #: answered by then sits the round out (PowerTripStrategy.profiles)
    profile_timeout_s: float = 60.0
    #: nodes that must be connected before a round's profile query (FedAvg's default, 2);
    #: set it to the federation's size so round 1 chooses among all of them
    min_available_nodes: int = 2
    #: each run writes decisions.jsonl and rounds.csv to OUT-DIR/run-<Flower run id>; a
    #: relative path is relative to the ServerApp's working directory (under `flwr run`,
    #: the directory the SuperLink was started in)
    out_dir: str = "runs/flower"

    @classmethod
    def from_run_config(cls, run_config) -> Settings:
        """From a run_config; an unknown key is an error that lists the known ones."""
        known = {f.name.replace("_", "-"): f.name for f in fields(cls)}
        values = {}
        for key, value in dict(run_config).items():
            if key not in known:
                raise ValueError(f"unknown run_config key {key!r}; known: {sorted(known)}")
            values[known[key]] = type(getattr(cls, known[key]))(value)
        return cls(**values)

    @property
    def params(self) -> dict:
        return json.loads(self.policy_params)


@lru_cache(maxsize=4)
def population(num_sites: int, seed: int) -> tuple[Site, ...]:
    return tuple(generate_population(PopulationSpec(num_sites=num_sites, seed=seed)))


def site_profile(index: int, num_sites: int, seed: int) -> SiteProfile:
    """Node `index`'s site of a population of `num_sites` (the federation's size). Its spare
    power is the population's, as the services' uniform power source draws it; it stays
    fixed here (the example keeps the power source simple)."""
    site = population(num_sites, seed)[index]
    return SiteProfile(
        site_id=site.site_id,
        power_fraction=site.power_fraction,
        distance_miles=site.distance_miles,
        latency_s=site.latency_s,
        bandwidth_bytes_per_s=site.bandwidth_bytes_per_s,
    )


@lru_cache(maxsize=2)
def site_data(workload: str, num_sites: int, seed: int):
    return get_workload(workload).site_data(None, num_sites, seed)


@lru_cache(maxsize=2)
def test_split(workload: str, seed: int):
    data = get_workload(workload).load(None, seed)
    return data.test


def new_model(workload: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return get_workload(workload).build_model()
