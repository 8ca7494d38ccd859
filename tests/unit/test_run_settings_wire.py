"""RunSettings, the one path of a run setting to a service: what the aggregator sends each
service is what its rows name, read back typed; a bad value is refused by name, an unknown
one (a newer sender's) ignored, a missing one its row's default."""

from __future__ import annotations

import pytest

from powertrip.core.config import RunConfig
from powertrip.core.settings import for_service
from powertrip.rpc.runsettings import SettingsError, read_settings, settings_message, settings_of
from powertrip.v1 import common_pb2


@pytest.mark.parametrize("service", ["policy", "site_worker"])
def test_a_service_reads_back_what_the_aggregator_sent(service):
    run = RunConfig(seed=7, carbon_slack=1.5, delta_encoding="fp32", num_sites=12, tau_s=30.0)
    message = common_pb2.RunSettings.FromString(settings_message(run, service).SerializeToString())
    assert set(message.values) == set(for_service(service))
    read = read_settings(message, service)
    assert read == {name: getattr(run, name) for name in for_service(service)}


def test_the_policy_gets_what_it_decides_with_and_the_worker_what_it_trains_with():
    assert {"estimator", "objective", "gpu_power_w", "tau_s", "shadow"} <= set(
        for_service("policy")
    )
    assert {"workload", "peft", "delta_encoding", "data_dir"} <= set(for_service("site_worker"))
    assert "delta_encoding" not in for_service("policy")


def test_missing_settings_take_the_given_or_the_rows_default_and_unknown_ones_are_ignored():
    message = settings_of({"seed": 3, "a_setting_from_a_newer_release": "x"})
    read = read_settings(message, "policy", {"estimator": "clock"})
    assert read["seed"] == 3 and read["estimator"] == "clock"
    assert read["shadow"] is True and read["objective"] == "time"
    assert "a_setting_from_a_newer_release" not in read


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"estimator": "fastest"}, "estimator must be one of paper, clock, got 'fastest'"),
        ({"comm_directions": 3}, r"comm_directions: must be in \[1, 2\], got 3"),
        ({"seed": "seven"}, "seed must be of type int"),
    ],
)
def test_a_bad_value_is_refused_by_name(values, match):
    with pytest.raises(SettingsError, match=match):
        read_settings(settings_of(values), "policy")


def test_text_that_is_not_json_is_refused_by_name():
    message = common_pb2.RunSettings(values={"seed": "{not json"})
    with pytest.raises(SettingsError, match="settings: seed: not JSON"):
        read_settings(message, "policy")
