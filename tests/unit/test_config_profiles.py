"""Run configuration validation and the seeded site population of paper §5.1."""

from __future__ import annotations

import numpy as np
import pytest

from powertrip.core.config import ConfigError, RunConfig, parse_setting
from powertrip.core.configvalues import FIELD_CHOICES
from powertrip.core.profiles import PopulationSpec, generate_population, site_id, site_index
from powertrip.core.timemodel import propagation_delay_s


def test_yaml_round_trip(tmp_path):
    config = RunConfig(num_sites=7, policy="radius", policy_params={"radius_miles": 500})
    path = tmp_path / "c.yaml"
    config.write_yaml(path)
    again = RunConfig.from_yaml(path)
    assert again.to_dict() == config.to_dict()
    # what is written holds every parameter of the policy, the given one and its defaults
    assert again.policy_params == {"radius_miles": 500.0, "m_ref_gb": 1.5}
    assert again.to_dict() == again.with_values({}).to_dict()  # and reads back as written


def test_a_stored_config_keeps_its_parameters_when_a_default_moves(tmp_path, monkeypatch):
    """A run's config.yaml says every parameter that made it: read back after a default has
    moved, it is still the run it was, and its provenance block is not a setting."""
    from powertrip.core.policies import REGISTRY

    path = tmp_path / "config.yaml"
    RunConfig(policy="adaptive").write_yaml(path, made_by={"commit": "abc"})
    assert "provenance:" in path.read_text() and "commit: abc" in path.read_text()
    moved = REGISTRY["adaptive"].Params.with_defaults(probe_cost=0.5)
    monkeypatch.setattr(REGISTRY["adaptive"], "Params", moved)
    stored = RunConfig.from_yaml(path)
    assert stored.policy_params["probe_cost"] == 0.1  # as it ran, not today's 0.5
    assert RunConfig(policy="adaptive").to_dict()["policy_params"]["probe_cost"] == 0.5


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"num_sites": 0}, "num_sites"),
        ({"target_accuracy": 0}, "target_accuracy"),
        ({"target_accuracy": 1.01}, "target_accuracy"),
        ({"update_size_gb": -1}, "update_size_gb"),
        ({"clock": "sundial"}, "clock"),
        ({"work_model": "magic"}, "work_model"),
        ({"estimator": "guess"}, "estimator"),
        ({"reference_bandwidth_gbps": -5}, "reference_bandwidth_gbps"),
        ({"distance_distribution": "gaussian"}, "distance_distribution"),
        ({"max_distance_miles": 800}, "distance_distribution"),  # calibrated needs 1000 inside
        ({"min_power": 0}, "min_power"),
        ({"min_power": 0.9, "max_power": 0.5}, "max_power"),
        ({"max_power": 1.5}, "max_power"),
        ({"comm_directions": 3}, "comm_directions"),
        ({"max_rounds": "many"}, "max_rounds"),
        ({"unknown_knob": 1}, "unknown_knob"),
    ],
)
def test_bad_values_name_the_field(data, field):
    with pytest.raises(ConfigError, match=field):
        RunConfig.from_mapping(data).validate()


def test_paper_defaults():
    """Eq. 3 charges one transfer per round; distances are calibrated to the paper's Fig. 9;
    power is U[0.1, 1.0] (§5.1). Both directions and uniform distances stay settings; both
    directions need fp32 deltas (int8, the default, encodes the upload only)."""
    config = RunConfig().validate()
    assert config.comm_directions == 1
    assert config.distance_distribution == "calibrated"
    assert (config.min_power, config.max_power) == (0.1, 1.0)
    other = RunConfig(
        comm_directions=2, distance_distribution="uniform", max_distance_miles=800,
        delta_encoding="fp32",
    ).validate()  # fmt: skip
    assert other.comm_directions == 2
    with pytest.raises(ConfigError, match="comm_directions 1 .* or delta_encoding fp32"):
        RunConfig(comm_directions=2).validate()


def test_population_spec_carries_every_population_field():
    config = RunConfig(
        num_sites=7,
        seed=3,
        min_distance_miles=50,
        max_distance_miles=4000,
        distance_distribution="uniform",
        reference_bandwidth_gbps=8,
        min_power=1,
        max_power=1,
        gpus_per_site=4,
    ).validate()
    assert config.population_spec() == PopulationSpec(
        num_sites=7,
        seed=3,
        min_distance_miles=50,
        max_distance_miles=4000,
        distance_distribution="uniform",
        reference_bandwidth_bytes_per_s=1e9,
        min_power=1.0,
        max_power=1.0,
        gpus_per_site=4,
    )


def test_unknown_key_lists_the_allowed_ones():
    with pytest.raises(ConfigError, match="allowed keys: policy, policy_params"):
        RunConfig.from_mapping({"polcy": "all"})


def test_invalid_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_sites: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        RunConfig.from_yaml(bad)
    with pytest.raises(ConfigError, match="cannot read config file"):
        RunConfig.from_yaml(tmp_path / "missing.yaml")


def test_population_follows_section_5_1_and_is_seeded():
    sites = generate_population(PopulationSpec(num_sites=100, seed=4))
    again = generate_population(PopulationSpec(num_sites=100, seed=4))
    other = generate_population(PopulationSpec(num_sites=100, seed=5))
    assert sites == again and sites != other
    d = np.array([s.distance_miles for s in sites])
    p = np.array([s.power_fraction for s in sites])
    b = np.array([s.bandwidth_bytes_per_s for s in sites])
    assert 100 <= d.min() and d.max() <= 10_000
    assert 0.1 <= p.min() and p.max() <= 1.0
    # 10 Gbit/s at 100 miles, inversely proportional to distance
    np.testing.assert_allclose(b, 1.25e9 * 100 / d)
    assert sites[3].latency_s == propagation_delay_s(sites[3].distance_miles)
    assert [site_index(s.site_id) for s in sites] == list(range(100))


def test_site_ids():
    assert site_id(7) == "site-007"
    assert site_index("site-042") == 42
    with pytest.raises(ValueError):
        site_index("node-1")


@pytest.mark.parametrize(
    ("item", "key", "value"),
    [
        ("lr=0.01", "lr", 0.01),
        ("lr=1e-3", "lr", "1e-3"),  # YAML 1.1 reads it as text; coercion makes it a float
        ("shadow=off", "shadow", False),
        ("target_accuracy=null", "target_accuracy", None),
        ("data_dir=", "data_dir", None),
        ("data_dir=2024", "data_dir", "2024"),  # text settings keep the text as given
        ("policy=on", "policy", "on"),
        ("policy_params={k: 20}", "policy_params", {"k": 20}),
        ("policy_params.probe_cost=0.2", "policy_params.probe_cost", 0.2),
    ],
)
def test_parse_setting_reads_values_as_yaml_does(item, key, value):
    assert parse_setting(item) == (key, value)


def test_with_settings_goes_through_the_yaml_checks():
    config = RunConfig().with_settings(["lr=1e-3", "policy_params.k=5", "policy_params.k=6"])
    assert config.lr == 0.001 and config.policy_params == {"k": 6.0}
    assert RunConfig().policy_params == {}  # the original is untouched
    with pytest.raises(ConfigError, match=r"--set estimator=guess: estimator must be one of "):
        RunConfig().with_settings(["estimator=guess"])
    with pytest.raises(ConfigError, match="unknown key polcy; allowed keys: policy,"):
        RunConfig().with_settings(["polcy=all"])
    with pytest.raises(ConfigError, match="--set seed=abc: seed must be of type int"):
        RunConfig().with_settings(["seed=abc"])


@pytest.mark.parametrize("name", sorted(FIELD_CHOICES))
def test_every_choice_setting_names_its_values_wherever_it_is_read(name):
    allowed = ", ".join(FIELD_CHOICES[name])
    for read in (
        lambda: RunConfig.from_mapping({name: "nope"}, "c.yaml"),
        lambda: RunConfig().with_overrides(**{name: "nope"}),
        lambda: RunConfig().with_settings([f"{name}=nope"]),
    ):
        with pytest.raises(ConfigError, match=f"{name} must be one of {allowed}, got 'nope'"):
            read()
    with pytest.raises(ConfigError, match=name):  # and a config built in code
        RunConfig(**{name: "nope"}).validate()


def test_link_model_is_a_choice_and_stored_runs_without_it_ran_inverse():
    from powertrip.core.config import LATER_SETTINGS, experiment_differences

    assert FIELD_CHOICES["link_model"] == ("inverse", "fig5")
    with pytest.raises(ConfigError, match="link_model must be one of inverse, fig5"):
        RunConfig().with_settings(["link_model=linear"])
    fig5 = RunConfig().with_settings(["link_model=fig5"]).validate()
    assert fig5.population_spec() == PopulationSpec(link_model="fig5", gpus_per_site=32)
    from services.profiler.config import ProfilerConfig

    assert ProfilerConfig.from_run_config(fig5).population.link_model == "fig5"
    # a run stored before link_model existed counts as inverse, not as a different set-up
    assert LATER_SETTINGS["link_model"] == "inverse"
    stored = RunConfig().to_dict()
    del stored["link_model"]
    assert experiment_differences(stored, RunConfig().to_dict()) == []
    assert experiment_differences(stored, fig5.to_dict()) == ["link_model"]
