"""The site population against the paper: distances calibrated to Fig. 9 (22 of 100 sites
within 1,000 miles), bandwidth ~ 1/distance (§5.1) or flat within 1,000 miles and 1/distance
beyond (link_model fig5, Fig. 5), power range, and seeding."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.profiles import (
    LINK_MODELS,
    PopulationSpec,
    distance_exponent,
    generate_population,
    link_bandwidth,
    share_within,
)
from powertrip.core.timemodel import propagation_delay_s
from powertrip.rpc.channels import open_channel
from powertrip.v1 import profiler_pb2, profiler_pb2_grpc
from services.profiler.config import ProfilerConfig
from services.profiler.profile_book import ProfileBook

SEEDS = range(200)


def _distances(spec: PopulationSpec) -> np.ndarray:
    return np.array([s.distance_miles for s in generate_population(spec)])


def _mean_within(distribution: str, radius: float = 1000.0) -> float:
    counts = [
        int(
            np.sum(
                _distances(PopulationSpec(seed=seed, distance_distribution=distribution)) <= radius
            )
        )
        for seed in SEEDS
    ]
    return float(np.mean(counts))


def test_calibrated_puts_22_of_100_sites_within_1000_miles():
    # paper §5.3 / Fig. 9: a 1,000-mile radius is "limited to only 22 nearby sites"
    assert _mean_within("calibrated") == pytest.approx(22, abs=1)
    assert share_within(PopulationSpec(), 1000) == pytest.approx(0.22, rel=1e-12)


def test_uniform_puts_about_9_of_100_sites_within_1000_miles():
    expected = 100 * 900 / 9900  # 9.09
    assert _mean_within("uniform") == pytest.approx(expected, abs=0.6)
    assert share_within(PopulationSpec(distance_distribution="uniform"), 1000) == pytest.approx(
        900 / 9900
    )


def test_gamma_is_computed_from_the_target_share_and_radius():
    assert distance_exponent(PopulationSpec()) == pytest.approx(
        math.log(900 / 9900) / math.log(0.22)
    )
    assert distance_exponent(PopulationSpec()) == pytest.approx(1.584, abs=1e-3)
    assert distance_exponent(PopulationSpec(distance_distribution="uniform")) == 1.0
    # other targets and ranges are met too, not just the paper's
    spec = PopulationSpec(
        num_sites=20_000, min_distance_miles=0, max_distance_miles=4000,
        radius_share=0.5, radius_miles=2000,
    )  # fmt: skip
    assert np.mean(_distances(spec) <= 2000) == pytest.approx(0.5, abs=0.015)


@pytest.mark.parametrize("distribution", ["calibrated", "uniform"])
def test_distances_in_range_and_bandwidth_falls_with_distance(distribution):
    for seed in SEEDS:
        sites = generate_population(PopulationSpec(seed=seed, distance_distribution=distribution))
        d = np.array([s.distance_miles for s in sites])
        b = np.array([s.bandwidth_bytes_per_s for s in sites])
        assert 100 <= d.min() and d.max() <= 10_000
        order = np.argsort(d)
        assert np.all(np.diff(d[order]) > 0)
        assert np.all(np.diff(b[order]) < 0)  # strictly decreasing in distance
        np.testing.assert_allclose(b * d, 1.25e9 * 100, rtol=1e-12)  # B = B_ref D_ref / D


def test_same_seed_same_population_and_the_two_distributions_share_draws():
    spec = PopulationSpec(seed=11)
    assert generate_population(spec) == generate_population(PopulationSpec(seed=11))
    assert generate_population(spec) != generate_population(PopulationSpec(seed=12))
    calibrated = generate_population(spec)
    uniform = generate_population(PopulationSpec(seed=11, distance_distribution="uniform"))
    # same u_i: the same distance ranking and the same powers under either distribution
    assert [s.power_fraction for s in calibrated] == [s.power_fraction for s in uniform]
    rank = np.argsort([s.distance_miles for s in calibrated])
    assert list(rank) == list(np.argsort([s.distance_miles for s in uniform]))


def test_uniform_is_the_population_made_before_calibration():
    rng = np.random.default_rng([5, 0x5173])
    distance = rng.uniform(100, 10_000, 100)
    power = rng.uniform(0.1, 1.0, 100)
    sites = generate_population(PopulationSpec(seed=5, distance_distribution="uniform"))
    assert [s.distance_miles for s in sites] == distance.tolist()
    assert [s.power_fraction for s in sites] == power.tolist()


def test_another_process_builds_the_same_population():
    code = (
        "from powertrip.core.profiles import PopulationSpec, generate_population;"
        "print(repr([tuple(s.as_dict().values()) for s in "
        "generate_population(PopulationSpec(seed=7, num_sites=30))]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.strip()
    here = [
        tuple(s.as_dict().values())
        for s in generate_population(PopulationSpec(seed=7, num_sites=30))
    ]
    assert out == repr(here)


def test_bad_distribution_names_the_field_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"distance_distribution.*calibrated, uniform"):
        generate_population(PopulationSpec(distance_distribution="gaussian"))
    with pytest.raises(ConfigError, match=r"distance_distribution.*calibrated, uniform"):
        RunConfig(distance_distribution="gaussian").validate()
    with pytest.raises(ValueError, match="radius_share"):
        generate_population(PopulationSpec(radius_share=1.0))
    with pytest.raises(ValueError, match="radius_miles.*uniform"):
        generate_population(PopulationSpec(max_distance_miles=900))
    # uniform needs no radius inside the range
    assert (
        len(
            generate_population(
                PopulationSpec(max_distance_miles=900, distance_distribution="uniform")
            )
        )
        == 100
    )


def test_full_power_sites():
    # min_power = max_power = 1: identical full-power sites (the paper's Figs. 6-7)
    sites = generate_population(PopulationSpec(min_power=1.0, max_power=1.0))
    assert all(s.power_fraction == 1.0 for s in sites)
    run = RunConfig(min_power=1, max_power=1).validate()
    book = ProfileBook(ProfilerConfig.from_run_config(run))
    assert all(book.power_at(s, 0.0) == 1.0 for s in book.sites)
    assert all(book.gpus_at(s, 0.0) == run.gpus_per_site for s in book.sites)


def test_run_config_rejects_min_power_above_max_power():
    with pytest.raises(ConfigError, match=r"max_power.*min_power=0\.8, max_power=0\.5"):
        RunConfig(min_power=0.8, max_power=0.5).validate()
    with pytest.raises(ConfigError, match="min_power"):
        RunConfig(min_power=0).validate()
    with pytest.raises(ValueError, match="min_power, max_power"):
        generate_population(PopulationSpec(min_power=0.8, max_power=0.5))


def test_profiler_config_threads_the_run_config_through():
    run = RunConfig(num_sites=40, seed=2, distance_distribution="uniform", min_power=0.5).validate()
    spec = ProfilerConfig.from_run_config(run).population
    assert spec.distance_distribution == "uniform"
    assert (spec.min_power, spec.max_power) == (0.5, 1.0)
    assert ProfileBook(ProfilerConfig.from_run_config(run)).sites == generate_population(spec)


def test_profiler_process_serves_the_configured_population(service_factory, tmp_path):
    """What `powertrip run` does: the profiler reads the run's YAML, so `distance_distribution`
    and the power range in it change the sites it serves; the flags override the file."""
    config = RunConfig(
        workload="synthetic", num_sites=30, seed=4, distance_distribution="uniform", min_power=1
    )
    path = tmp_path / "run.yaml"
    config.write_yaml(path)
    profiler = service_factory("profiler", "--config", str(path))
    flagged = service_factory(
        "profiler", "--config", str(path), "--distance-distribution", "calibrated",
        "--min-power", "0.2", "--max-power", "0.4",
    )  # fmt: skip
    served = {}
    for name, service in (("file", profiler), ("flags", flagged)):
        with open_channel(service.target) as channel:
            reply = profiler_pb2_grpc.ProfilerStub(channel).GetProfiles(
                profiler_pb2.GetProfilesRequest(), timeout=10
            )
        served[name] = reply.sites
    expected = generate_population(config.population_spec())
    assert [s.distance_miles for s in served["file"]] == [s.distance_miles for s in expected]
    assert all(s.power_fraction == 1.0 for s in served["file"])
    calibrated = generate_population(
        PopulationSpec(num_sites=30, seed=4, min_power=0.2, max_power=0.4, gpus_per_site=32)
    )
    assert [s.distance_miles for s in served["flags"]] == [s.distance_miles for s in calibrated]
    assert all(0.2 <= s.power_fraction <= 0.4 for s in served["flags"])


# ---- link models -----------------------------------------------------------------------
def _delay_s(spec: PopulationSpec, miles: np.ndarray, update_bytes: float = 1.5e9) -> np.ndarray:
    """Eq. 3 along a grid of distances: D / c + M / B(D)."""
    propagation = np.array([propagation_delay_s(float(d)) for d in miles])
    return propagation + update_bytes / link_bandwidth(spec, miles)


def test_inverse_is_the_default_and_unchanged_bit_for_bit():
    assert PopulationSpec().link_model == RunConfig().link_model == "inverse"
    assert LINK_MODELS == ("inverse", "fig5")
    for seed in range(20):
        for distribution in ("calibrated", "uniform"):
            spec = PopulationSpec(seed=seed, distance_distribution=distribution)
            sites = generate_population(spec)
            d = np.array([s.distance_miles for s in sites])
            before = 1.25e9 * 100.0 / np.maximum(d, 1e-9)  # the formula before link_model
            assert [s.bandwidth_bytes_per_s for s in sites] == [float(b) for b in before]
            assert sites == generate_population(
                PopulationSpec(seed=seed, distance_distribution=distribution, link_model="inverse")
            )


def test_fig5_bandwidth_is_flat_within_1000_miles_and_falls_as_1_over_d_beyond():
    spec = PopulationSpec(link_model="fig5")
    assert spec.link_knee_miles == 1000.0
    inside = np.linspace(100, 1000, 50)
    beyond = np.linspace(1000, 10_000, 50)
    np.testing.assert_array_equal(link_bandwidth(spec, inside), 1.25e9)
    assert np.all(np.diff(link_bandwidth(spec, beyond)) < 0)
    np.testing.assert_allclose(link_bandwidth(spec, beyond) * beyond, 1.25e9 * 1000, rtol=1e-12)
    for seed in range(20):
        sites = generate_population(PopulationSpec(seed=seed, link_model="fig5"))
        plain = generate_population(PopulationSpec(seed=seed))
        # the same sites (distances, powers); only the links differ
        assert [s.distance_miles for s in sites] == [s.distance_miles for s in plain]
        assert [s.power_fraction for s in sites] == [s.power_fraction for s in plain]
        for s in sites:
            expected = 1.25e9 if s.distance_miles <= 1000 else 1.25e9 * 1000 / s.distance_miles
            assert s.bandwidth_bytes_per_s == pytest.approx(expected, rel=1e-12)


def test_fig5_delay_grows_non_linearly_inverse_delay_is_a_straight_line():
    miles = np.linspace(100, 10_000, 100)
    fig5 = _delay_s(PopulationSpec(link_model="fig5"), miles)
    inverse = _delay_s(PopulationSpec(), miles)
    assert np.all(np.diff(fig5) > 0) and np.all(np.diff(inverse) > 0)  # both increase
    # fig5: a convex kink at the knee (second difference > 0 there, >= 0 everywhere) ...
    second = np.diff(fig5, 2)
    assert np.all(second > -1e-9)
    assert second.max() > 100 * np.abs(np.diff(inverse, 2)).max()
    knee = int(np.searchsorted(miles, 1000))  # a grid point: 100, 200, ..., 10,000 miles
    assert miles[knee] == 1000 and int(np.argmax(second)) == knee - 1  # centred on the knee
    assert second[knee - 1] > 0.1  # the slope grows by M / (B_ref K) = 1.2 ms/mile there
    slope_in = (fig5[knee - 1] - fig5[0]) / (miles[knee - 1] - miles[0])
    slope_out = (fig5[-1] - fig5[knee]) / (miles[-1] - miles[knee])
    assert slope_out > 50 * slope_in
    # ... while under inverse both D/c and M/B = M D / (B_ref D_ref) are linear in D
    chord = inverse[0] + (inverse[-1] - inverse[0]) * (miles - miles[0]) / (miles[-1] - miles[0])
    np.testing.assert_allclose(inverse, chord, rtol=1e-9)


def test_a_bad_link_model_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="link_model must be one of inverse, fig5, got 'cubic'"):
        generate_population(PopulationSpec(link_model="cubic"))
    with pytest.raises(ValueError, match="link_knee_miles must be > 0"):
        PopulationSpec(link_model="fig5", link_knee_miles=0).validate()
    with pytest.raises(ConfigError, match="link_model must be one of inverse, fig5, got 'cubic'"):
        RunConfig.from_mapping({"link_model": "cubic"})
    with pytest.raises(ConfigError, match="link_model must be one of inverse, fig5"):
        RunConfig(link_model="cubic").validate()
    assert RunConfig.from_mapping({"link_model": "fig5"}).population_spec().link_model == "fig5"
