"""Paper Eq. 6 in watts (issue #36): a site's capacity P_cap = N_max x P_gpu, its spare power
in watts, N_eff = min(N_avail, floor(P_spare / P_gpu)), and N_avail drawn per site behind new
settings whose defaults reproduce every earlier run bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from powertrip.core.config import LATER_SETTINGS, ConfigError, RunConfig
from powertrip.core.power import DomainTrace, SitePowerTrace, assign_traces, load_domains
from powertrip.core.profiles import (
    GPUS_PER_SITE,
    PopulationSpec,
    generate_population,
    gpus_available,
)
from services.profiler.config import ProfilerConfig
from services.profiler.profile_book import ProfileBook


def test_one_default_for_the_gpus_per_site():
    assert PopulationSpec().gpus_per_site == RunConfig().gpus_per_site == GPUS_PER_SITE == 32
    assert RunConfig().population_spec().gpus_per_site == 32


def test_capacity_is_in_watts_and_the_hardware_side_binds():
    d = DomainTrace("x", np.array([0.7, 0.7]))  # spare 30 %
    site = SitePowerTrace(d, 0.0, gpus_available=32, gpus_max=32)  # P_gpu 250 W
    assert site.capacity_w == 32 * 250.0
    assert site.spare_power_w_at(0) == pytest.approx(2400.0)  # 30 % of 8 kW
    assert site.effective_gpus_at(0) == 9  # the power side: floor(2400 W / 250 W)
    few = SitePowerTrace(d, 0.0, gpus_available=5, gpus_max=32)
    assert few.effective_gpus_at(0) == 5  # the hardware side: 5 < 9
    assert few.power_fraction_at(0) == 5 / 32
    # P_gpu scales the capacity with it: the same GPUs fit, whatever a GPU draws
    heavy = SitePowerTrace(d, 0.0, gpus_available=32, gpus_max=32, gpu_power_w=700.0)
    assert heavy.capacity_w == 22_400.0 and heavy.effective_gpus_at(0) == 9


def test_watts_give_the_unit_power_models_gpus_bit_for_bit():
    """floor(s N P / P) == floor(s N) for N = 32, P = 250 (every stored run), at every
    spare value the shipped trace gives and at values a hair below each integer."""
    for domain in load_domains():
        site = SitePowerTrace(domain, 0.0, 32, 32)
        for t in np.linspace(0, 31 * 86_400, 4001):
            spare = domain.spare_at(float(t))
            assert site.effective_gpus_at(float(t)) == min(32, math.floor(max(spare * 32, 0.0)))
    for n in range(33):
        x = float(n)
        for _ in range(40):
            for s in (x / 32, math.nextafter(x, 0.0) / 32):
                assert math.floor((s * 32 * 250.0) / 250.0) == math.floor(s * 32)
            x = math.nextafter(x, 0.0)


def test_default_inventory_is_every_gpu_with_no_draw():
    spec = PopulationSpec(seed=3, num_sites=50)
    assert gpus_available(spec).tolist() == [32] * 50
    assert {s.gpus_available for s in generate_population(spec)} == {32}


def test_drawn_inventory_leaves_distances_and_powers_alone():
    base = generate_population(PopulationSpec(seed=3, num_sites=200))
    spec = PopulationSpec(
        seed=3, num_sites=200, gpus_available_min_fraction=0.25, gpus_available_max_fraction=0.5
    )
    drawn = generate_population(spec)
    assert gpus_available(spec).tolist() == [s.gpus_available for s in drawn]
    assert {s.gpus_available for s in drawn} <= set(range(8, 17))  # ceil(8) .. floor(16)
    assert len({s.gpus_available for s in drawn}) > 3
    assert [s.distance_miles for s in drawn] == [s.distance_miles for s in base]
    for a, b in zip(base, drawn, strict=True):  # uniform power capped at N_avail / N_max
        assert b.power_fraction == min(a.power_fraction, b.gpus_available / 32)
    assert any(b.power_fraction < a.power_fraction for a, b in zip(base, drawn, strict=True))
    assert generate_population(spec) == drawn  # seeded


def test_trace_mode_applies_eq6_with_the_drawn_inventory():
    run = RunConfig(
        power="trace", seed=2, gpus_available_min_fraction=0.1, gpus_available_max_fraction=0.3
    ).validate()
    book = ProfileBook(ProfilerConfig.from_run_config(run))
    assert book.config.gpu_power_w == run.gpu_power_w == 250.0
    bound = 0
    for site in book.sites:
        trace = book.traces[site.index]
        assert trace.gpus_available == site.gpus_available and trace.gpus_max == 32
        power_side = math.floor(trace.spare_power_w_at(0.0) / 250.0)
        assert book.gpus_at(site, 0.0) == min(site.gpus_available, power_side)
        bound += site.gpus_available < power_side
    assert bound > 0, "with 3-9 GPUs of 32 the hardware side should bind somewhere"
    power, gpus = book._trace_power.at(0.0)  # the columnar path agrees, bit for bit
    assert gpus.tolist() == [book.gpus_at(s, 0.0) for s in book.sites]
    assert power.tolist() == [book.power_at(s, 0.0) for s in book.sites]


def test_assign_traces_keeps_its_draws_and_takes_an_inventory():
    domains = load_domains()
    plain = assign_traces(domains, 10, seed=4, gpus_per_site=32)
    given = assign_traces(domains, 10, seed=4, gpus_per_site=32, gpus_available=range(1, 11))
    assert [(s.domain.name, s.offset_s) for s in plain] == [
        (s.domain.name, s.offset_s) for s in given
    ]
    assert [s.gpus_available for s in plain] == [32] * 10
    assert [s.gpus_available for s in given] == list(range(1, 11))
    with pytest.raises(ValueError, match="3 values for 10 sites"):
        assign_traces(domains, 10, seed=4, gpus_per_site=32, gpus_available=[1, 2, 3])


def test_the_new_settings_are_later_settings_with_the_old_behaviour():
    assert LATER_SETTINGS["gpus_available_min_fraction"] == 1.0
    assert LATER_SETTINGS["gpus_available_max_fraction"] == 1.0
    config = RunConfig()
    assert config.gpus_available_min_fraction == config.gpus_available_max_fraction == 1.0
    spec = RunConfig(gpus_available_min_fraction=0.5).population_spec()
    assert spec.gpus_available_min_fraction == 0.5
    with pytest.raises(ConfigError, match="gpus_available_min_fraction"):
        RunConfig(gpus_available_min_fraction=0.8, gpus_available_max_fraction=0.5).validate()
    with pytest.raises(ConfigError, match="gpus_available_min_fraction"):
        RunConfig(gpus_available_min_fraction=0).validate()
    with pytest.raises(ValueError, match="gpus_available_min_fraction"):
        generate_population(PopulationSpec(gpus_available_max_fraction=1.5))


def test_accounting_counts_fractions_of_n_max_when_the_inventory_is_drawn():
    from services.aggregator.accounting import Accounting
    from services.aggregator.domain import SiteProfile

    profile = SiteProfile(site_id="site-000", power_fraction=0.25, gpus_available=8)
    assert Accounting(RunConfig())._max_gpus(profile) == 8  # as before: the profile's
    drawn = RunConfig(gpus_available_min_fraction=0.25, gpus_available_max_fraction=0.5)
    assert Accounting(drawn)._max_gpus(profile) == 32  # N_max, not N_avail
