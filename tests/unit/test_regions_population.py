"""`population: regions` (issue #60): Google Cloud's regions as the run's sites, each at its
great-circle distance from the aggregator's region and charged its own grid's intensity."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core import footprint, regions
from powertrip.core.config import ConfigError, RunConfig, experiment_differences
from powertrip.core.profiles import (
    AGGREGATOR_REGION,
    PopulationSpec,
    generate_population,
    population_regions,
    region_distances,
)


def test_every_region_is_a_site_at_its_distance_from_the_aggregator():
    catalog = regions.catalog()
    spec = PopulationSpec(num_sites=len(catalog), population="regions")
    sites = generate_population(spec)
    assert [r.name for r in population_regions(spec)] == [r.name for r in catalog]
    hub = next(r for r in catalog if r.name == AGGREGATOR_REGION)
    for site, region in zip(sites, catalog, strict=True):
        miles = float(regions.great_circle_miles(hub.latitude, hub.longitude,
                                                 region.latitude, region.longitude))  # fmt: skip
        assert site.distance_miles == pytest.approx(max(miles, 100.0))
    own = sites[[r.name for r in catalog].index(AGGREGATOR_REGION)]
    assert own.distance_miles == 100.0  # the floor the inverse link model needs
    sydney = sites[[r.name for r in catalog].index("australia-southeast1")]
    assert 10_000 < sydney.distance_miles < 10_600  # beyond the synthetic 10,000-mile range
    # the links follow from the distances as for synthetic sites (inverse: B ~ 1/D)
    assert sydney.bandwidth_bytes_per_s == pytest.approx(1.25e9 * 100 / sydney.distance_miles)


def test_fewer_sites_take_the_regions_nearest_the_aggregator():
    spec = PopulationSpec(num_sites=3, population="regions", aggregator_region="us-east4")
    names = [r.name for r in population_regions(spec)]
    # Toronto (~350 miles), Ashburn itself and Columbus (~300): in catalog order
    assert names == ["northamerica-northeast2", "us-east4", "us-east5"]
    assert np.all(region_distances(spec) <= 500)


def test_powers_are_drawn_from_the_seed_as_for_synthetic_sites():
    synthetic = generate_population(PopulationSpec(num_sites=40, seed=7))
    real = generate_population(PopulationSpec(num_sites=40, seed=7, population="regions"))
    assert [s.power_fraction for s in real] == [s.power_fraction for s in synthetic]


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"population": "regions"}, "num_sites: population 'regions' has 40 sites"),
        ({"population": "regions", "num_sites": 5, "aggregator_region": "mars-east1"},
         "aggregator_region: must be one of africa-south1"),
        ({"population": "moon"}, "population must be one of synthetic, regions"),
    ],
)  # fmt: skip
def test_a_bad_population_setting_is_named(values, words):
    with pytest.raises(ConfigError, match=words):
        RunConfig().with_values(values, "--set").validate()


def test_a_regions_run_charges_each_site_its_own_grid():
    config = RunConfig(population="regions", num_sites=40).validate()
    spec = footprint.spec_of(config)
    by_site = dict(zip((s.site_id for s in generate_population(config.population_spec())),
                       regions.catalog(), strict=True))  # fmt: skip
    for site_id, region in by_site.items():
        assert spec.intensity(site_id, 0.0) == region.g_co2_per_kwh
    montreal = next(s for s, r in by_site.items() if r.name == "northamerica-northeast1")
    assert spec.intensity(montreal, 3600.0) == 2.0  # annual averages: the same every hour
    # a synthetic run keeps the one world average
    assert footprint.spec_of(RunConfig()).intensity("site-000", 0.0) == 481.0


def test_a_carbon_trace_overrides_the_regions_intensities(tmp_path):
    trace = tmp_path / "hourly.csv"
    trace.write_text("site_id,g_per_kwh,hour\nsite-000,50,0\nsite-000,500,1\n")
    config = RunConfig(population="regions", num_sites=40, carbon_trace=str(trace))
    spec = footprint.spec_of(config.validate())
    assert (spec.intensity("site-000", 0.0), spec.intensity("site-000", 3600.0)) == (50, 500)


def test_runs_stored_before_the_setting_were_synthetic():
    stored = {k: v for k, v in RunConfig().to_dict().items()
              if k not in ("population", "aggregator_region")}  # fmt: skip
    assert experiment_differences(stored, RunConfig().to_dict()) == []
    wanted = RunConfig(population="regions", num_sites=40).to_dict()
    assert "population" in experiment_differences(stored, wanted)
