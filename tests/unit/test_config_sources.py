"""One configuration path (#32 item 4): YAML, flags, `--set` and the container's
POWERTRIP_RUN_* variables go through the same coercion, and a bad value's message names its
source; old environment variable names still work and warn once."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from powertrip.app.cliconfig import load_config
from powertrip.app.cliparser import build_parser
from powertrip.core import envnames
from powertrip.core.config import ConfigError, RunConfig
from tests.unit.test_deploy_files import DEPLOY


def _entrypoint():
    spec = importlib.util.spec_from_file_location("entrypoint", DEPLOY / "entrypoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def entrypoint():
    return _entrypoint()


def _error(call) -> str:
    with pytest.raises(ConfigError) as info:
        call()
    return str(info.value)


# ---- the environment ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("POWERTRIP_RUN_NUM_SITES", "abc", ["num_sites", "int", "'abc'"]),
        ("POWERTRIP_RUN_NUM_SITES", "0", ["num_sites", ">= 1"]),  # validate(), not coercion
        ("POWERTRIP_RUN_CLOCK", "sundial", ["clock", "simulated", "wall"]),
        ("POWERTRIP_RUN_SHADOW", "maybe", ["shadow", "bool"]),
        ("POWERTRIP_RUN_POLICY_PARAMS", "{k: x}", ["policy_params.k", "not a number"]),
        ("POWERTRIP_RUN_POLICY_PARAMS", "20", ["policy_params", "dict"]),
    ],
)
def test_a_bad_variable_is_named(entrypoint, var, value, words):
    message = _error(lambda: entrypoint.run_config({var: value}))
    assert message.startswith(f"{var}: "), message
    assert "command line" not in message
    for word in words:
        assert word in message, (word, message)


def test_a_bad_variable_exits_2_naming_it(entrypoint, monkeypatch, capsys):
    monkeypatch.setenv("POWERTRIP_RUN_MAX_ROUNDS", "many")
    assert entrypoint.main(["services.policy"]) == 2
    assert "POWERTRIP_RUN_MAX_ROUNDS: max_rounds must be of type int" in capsys.readouterr().err


def test_policy_params_from_the_environment_as_in_yaml(entrypoint, tmp_path):
    env = entrypoint.run_config({"POWERTRIP_RUN_POLICY_PARAMS": "{k: 20}"})
    path = tmp_path / "run.yaml"
    path.write_text("policy_params: {k: 20}\n")
    assert env.policy_params == RunConfig.from_yaml(path).policy_params == {"k": 20.0}
    # a value that is not a number is refused by name, as in a file
    with pytest.raises(ConfigError, match="policy_params.k: 'many' is not a number"):
        entrypoint.run_config({"POWERTRIP_RUN_POLICY_PARAMS": "{k: many}"})
    path.write_text("policy_params: {k: many}\n")
    with pytest.raises(ConfigError, match="policy_params.k: 'many' is not a number"):
        RunConfig.from_yaml(path)


def test_environment_values_read_as_set_reads_them(entrypoint, tmp_path):
    """The deploy files' values give the run they gave before; YAML's null and text kept."""
    env = {
        "POWERTRIP_RUN_WORKLOAD": "synthetic",
        "POWERTRIP_RUN_NUM_SITES": "4",
        "POWERTRIP_RUN_CLOCK": "wall",
        "POWERTRIP_RUN_MAX_DISTANCE_MILES": "10000",
        "POWERTRIP_RUN_ROUND_DEADLINE_S": "600",
        "POWERTRIP_RUN_TARGET_ACCURACY": "",  # empty: not set
        "POWERTRIP_RUN_UPDATE_SIZE_GB": "1e-3",  # not a YAML 1.1 float: read as text, then
        "POWERTRIP_RUN_SHADOW": "false",
        "POWERTRIP_RUN_DATA_DIR": "2024",  # a text setting keeps its text
        "POWERTRIP_RUN_LR": "null",
    }
    config = entrypoint.run_config(env)
    assert (config.workload, config.num_sites, config.clock) == ("synthetic", 4, "wall")
    assert config.max_distance_miles == 10000.0 and config.round_deadline_s == 600.0
    assert config.target_accuracy is None and config.lr is None
    assert config.update_size_gb == 0.001 and config.shadow is False
    assert config.data_dir == "2024"
    # over a YAML base: the variable wins, the rest is the file's
    base = tmp_path / "base.yaml"
    base.write_text("workload: synthetic\nmax_rounds: 7\nnum_sites: 9\n")
    config = entrypoint.run_config({"POWERTRIP_RUN_CONFIG": str(base), **env})
    assert (config.max_rounds, config.num_sites) == (7, 4)


def test_a_bad_value_in_the_base_file_names_the_file(entrypoint, tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("seed: abc\n")
    message = _error(lambda: entrypoint.run_config({"POWERTRIP_RUN_CONFIG": str(base)}))
    assert message.startswith(f"{base}: seed must be of type int"), message


def test_unknown_variable_lists_the_allowed(entrypoint):
    message = _error(lambda: entrypoint.run_config({"POWERTRIP_RUN_SITES": "4"}))
    assert "POWERTRIP_RUN_SITES" in message and "POWERTRIP_RUN_NUM_SITES" in message


# ---- --set, flags, YAML through the CLI ------------------------------------------------


def _cli_error(tmp_path, *argv: str) -> str:
    args = build_parser().parse_args(["run", *argv, "--out", str(tmp_path / "o")])
    return _error(lambda: load_config(args))


def test_a_bad_set_names_set(tmp_path):
    message = _cli_error(tmp_path, "--set", "num_sites=abc")
    assert message.startswith("--set num_sites=abc: num_sites must be of type int"), message
    message = _cli_error(tmp_path, "--set", "num_sites=0")
    assert message.startswith("--set num_sites=0: num_sites: must be >= 1"), message


def test_a_bad_yaml_value_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("workload: synthetic\nseed: abc\n")
    message = _cli_error(tmp_path, "--config", str(path))
    assert message.startswith(f"{path}: seed must be of type int"), message
    path.write_text("workload: synthetic\nreference_bandwidth_gbps: -5\n")
    message = _cli_error(tmp_path, "--config", str(path))
    assert message.startswith(f"{path}: reference_bandwidth_gbps: must be > 0"), message


def test_a_bad_flag_names_the_flag(tmp_path):
    message = _cli_error(tmp_path, "--sites", "0")
    assert message.startswith("--sites: num_sites: must be >= 1"), message
    args = build_parser().parse_args(["compare", "--time-budget-h", "2", "--set", "seed=x"])
    assert _error(lambda: load_config(args)).startswith("--set seed=x: ")


def test_the_latest_source_is_named(tmp_path):
    """A setting the file sets and a flag overrides is the flag's; a check over two
    settings names both sources."""
    path = tmp_path / "run.yaml"
    path.write_text("workload: synthetic\nnum_sites: -3\n")
    message = _cli_error(tmp_path, "--config", str(path), "--set", "num_sites=0")
    assert message.startswith("--set num_sites=0: "), message
    path.write_text("workload: synthetic\nmin_distance_miles: 2000\n")
    message = _cli_error(tmp_path, "--config", str(path), "--set", "max_distance_miles=1500")
    assert message.startswith(f"{path}, --set max_distance_miles=1500: "), message


def test_a_config_built_in_code_keeps_its_message():
    assert _error(lambda: RunConfig(num_sites=0).validate()) == (
        "num_sites (--sites): must be >= 1, got 0"
    )


def test_valid_sources_give_the_same_config(tmp_path, entrypoint):
    """YAML, flags, --set and the environment make one and the same configuration."""
    settings = {"workload": "synthetic", "num_sites": 8, "seed": 3, "clock": "wall"}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(settings))
    from_yaml = RunConfig.from_yaml(path).validate()
    flags = build_parser().parse_args(
        ["run", "--workload", "synthetic", "--sites", "8", "--seed", "3", "--clock", "wall"]
    )
    sets = build_parser().parse_args(
        ["run", *[a for k, v in settings.items() for a in ("--set", f"{k}={v}")]]
    )
    env = {f"POWERTRIP_RUN_{k.upper()}": str(v) for k, v in settings.items()}
    assert from_yaml == load_config(flags) == load_config(sets) == entrypoint.run_config(env)


# ---- old variable names ---------------------------------------------------------------


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(envnames, "_warned", set())


def test_an_old_name_still_works_and_warns_once(fresh_warnings, capsys):
    env = {"POWERTRIP_DEVICE": "cpu"}
    for _ in range(3):
        assert envnames.getenv("POWERTRIP_SITE_WORKER_DEVICE", "auto", env) == "cpu"
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    assert "POWERTRIP_DEVICE is deprecated; use POWERTRIP_SITE_WORKER_DEVICE" in err


def test_the_new_name_wins_and_does_not_warn(fresh_warnings, capsys):
    env = {"POWERTRIP_DEVICE": "cpu", "POWERTRIP_SITE_WORKER_DEVICE": "cuda"}
    assert envnames.getenv("POWERTRIP_SITE_WORKER_DEVICE", "auto", env) == "cuda"
    assert envnames.getenv("POWERTRIP_SITE_WORKER_DEVICE", "auto", {}) == "auto"
    assert capsys.readouterr().err == ""


def test_every_old_name_maps_to_the_scheme():
    services = ("AGGREGATOR", "POLICY", "PROFILER", "SITE_WORKER")
    for old, new in envnames.RENAMED.items():
        assert old != new and new.startswith("POWERTRIP_")
        assert any(new.startswith(f"POWERTRIP_{s}_") for s in services), new


@pytest.mark.parametrize(
    ("old", "value", "dest", "expected"),
    [
        ("POWERTRIP_DEVICE", "cpu", "device", "cpu"),
        ("POWERTRIP_AGGREGATOR", "agg:1", "aggregator", "agg:1"),
        ("POWERTRIP_PROFILER", "prof:2", "profiler", "prof:2"),
        ("POWERTRIP_SITE_IDS", "site-003", "sites", "site-003"),
        ("POWERTRIP_WORKER_ID", "w-1", "worker_id", "w-1"),
        ("POWERTRIP_SHAPE_LINK", "1", "shape_link", True),
        ("POWERTRIP_CLAIM_SITE", "1", "claim_site", True),
        ("POWERTRIP_REPORT_POWER", "1", "report_power", True),
        ("POWERTRIP_LINK_IFACE", "eth1", "link_iface", "eth1"),
    ],
)
def test_the_site_worker_reads_old_names(fresh_warnings, monkeypatch, capsys, old, value, dest,
                                         expected):  # fmt: skip
    from services.site_worker.__main__ import parse_args

    monkeypatch.setenv(old, value)
    assert getattr(parse_args([]), dest) == expected
    new = envnames.RENAMED[old]
    assert f"{old} is deprecated; use {new}" in capsys.readouterr().err
    monkeypatch.delenv(old)
    monkeypatch.setenv(new, value)
    assert getattr(parse_args([]), dest) == expected
    assert "deprecated" not in capsys.readouterr().err


def test_the_profiler_reads_old_names(fresh_warnings, monkeypatch, capsys):
    """The profiler's scales and probe interval, by the old names, reach its flags."""
    import services.profiler.__main__ as profiler

    parsers = []
    real = profiler.base_parser

    def keep(spec):
        parsers.append(real(spec))
        return parsers[-1]

    def stop(*_args, **_kwargs):
        raise _Stop

    monkeypatch.setattr(profiler, "base_parser", keep)
    monkeypatch.setattr(profiler, "setup_process", stop)
    monkeypatch.setenv("POWERTRIP_LINK_BANDWIDTH_SCALE", "0.25")
    monkeypatch.setenv("POWERTRIP_PROFILER_PROBE_INTERVAL_S", "7")
    with pytest.raises(_Stop):
        profiler.main([])
    args = parsers[0].parse_args([])
    assert (args.bandwidth_scale, args.probe_interval_s, args.latency_scale) == (0.25, 7.0, 1.0)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1, err
    assert "POWERTRIP_LINK_BANDWIDTH_SCALE is deprecated; use " in err
    assert "POWERTRIP_PROFILER_LINK_BANDWIDTH_SCALE" in err


class _Stop(Exception):
    """Stops the profiler's main once its flags are parsed."""


def test_the_entrypoint_reads_the_old_worker_id(entrypoint, monkeypatch):
    """A bundle written before the rename (POWERTRIP_WORKER_ID) keeps its worker id: the
    entry point adds no --worker-id of its own."""
    started = []

    class Child:
        def __init__(self, argv):
            started.append(argv)

        def wait(self):
            return 2  # not 0 or 1: no rejoin

    monkeypatch.setenv("POWERTRIP_WORKER_ID", "site-003-remote")
    monkeypatch.setattr(entrypoint.subprocess, "Popen", Child)
    monkeypatch.setattr(entrypoint.signal, "signal", lambda *a: None)
    assert entrypoint.supervise_worker(["services.site_worker"]) == 2
    assert not any(a.startswith("--worker-id") for a in started[0])
    monkeypatch.delenv("POWERTRIP_WORKER_ID")
    monkeypatch.setenv("HOSTNAME", "box")
    entrypoint.supervise_worker(["services.site_worker"])
    assert "--worker-id=box-1" in started[1]
