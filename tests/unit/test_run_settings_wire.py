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


def test_a_worker_trains_as_the_run_says_whatever_its_own_flags():
    """fused_sgd and channels_last decide a site's numbers: the run's reach a remote worker
    and replace its flags; a 1.0 aggregator's spec (no settings) leaves the flags."""
    from powertrip.v1 import aggregator_pb2
    from services.site_worker.config import WorkerConfig, spec_settings

    worker = WorkerConfig(aggregator="a:1", worker_id="w", fused_sgd=True, trainer="vmap")
    run = RunConfig(fused_sgd=False, channels_last=False)
    spec = aggregator_pb2.RunSpec(workload="femnist", settings=settings_message(run, "site_worker"))
    taken = worker.with_run(spec_settings(spec))
    assert (taken.fused_sgd, taken.channels_last, taken.trainer) == (False, False, "vmap")
    old = aggregator_pb2.RunSpec(workload="femnist", num_sites=5, delta_encoding="int8")
    assert spec_settings(old)["delta_encoding"] == "int8"
    assert worker.with_run(spec_settings(old)) == worker
