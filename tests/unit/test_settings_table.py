"""The settings table is the one home of a setting: a made-up setting declared in one row
(a subclass adding a field with `setting(...)`) is read from YAML, flags, `--set` and the
environment, coerced, range-checked, shown by `powertrip config show|settings` and given
its stored-run meaning, with no other code touched."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from powertrip.app import cli, cliconfig
from powertrip.app.settingstable import markdown_table, text_table
from powertrip.core import settings
from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.settings import ALWAYS, SAME, rows, setting


@dataclass
class WithKnob(RunConfig):
    knob_count: int = setting(4, "a made-up count", at_least=1, later=2)
    knob_mode: str = setting("fast", "a made-up mode", choices=("fast", "slow"), later="slow")


def test_yaml_loading_and_coercion_know_the_new_row(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("knob_count: 7\nknob_mode: slow\n")
    config = WithKnob.from_yaml(path)
    assert (config.knob_count, config.knob_mode) == (7, "slow")
    assert WithKnob().knob_count == 4
    with pytest.raises(ConfigError, match=r"run.yaml: knob_count must be of type int, got 'x'"):
        WithKnob.from_mapping({"knob_count": "x"}, source=str(path))
    with pytest.raises(ConfigError, match=r"knob_mode must be one of fast, slow, got 'slowest'"):
        WithKnob.from_mapping({"knob_mode": "slowest"})


def test_set_flags_and_environment_know_the_new_row():
    config = WithKnob().with_settings(["knob_count=9"])
    assert config.knob_count == 9 and config.sources()["knob_count"] == "--set knob_count=9"
    assert WithKnob().with_overrides(knob_mode="slow").sources()["knob_mode"] == "--knob-mode"
    env = WithKnob().with_environment({"POWERTRIP_RUN_KNOB_COUNT": "3"})
    assert env.knob_count == 3
    with pytest.raises(ConfigError, match="unknown key knob_size"):
        WithKnob().with_settings(["knob_size=1"])


def test_the_rows_range_is_checked_and_named_by_its_source():
    with pytest.raises(ConfigError, match=r"^knob_count: must be >= 1, got 0$"):
        WithKnob(knob_count=0).validate()
    with pytest.raises(ConfigError, match=r"^--set knob_count=0: knob_count: must be >= 1"):
        WithKnob().with_settings(["knob_count=0"]).validate()
    WithKnob(knob_count=1).validate()


def test_a_stored_run_without_the_row_ran_as_its_later_value(tmp_path):
    stored = tmp_path / "config.yaml"
    data = RunConfig().to_dict()  # a run stored before the knobs existed
    stored.write_text(yaml.safe_dump({**data, "provenance": {"version": "0.9"}}))
    old = WithKnob.from_run(stored)
    assert (old.knob_count, old.knob_mode) == (2, "slow")
    assert settings.later_settings(WithKnob)["knob_count"] == 2
    assert "knob_count" not in settings.later_settings(RunConfig)


def test_config_show_and_config_settings_list_the_new_row(monkeypatch, capsys):
    monkeypatch.setattr(cliconfig, "RunConfig", WithKnob)
    assert cli.main(["config", "show", "--set", "knob_count=5"]) == 0
    shown = capsys.readouterr().out
    assert "knob_count: 5  # --set knob_count=5" in shown
    assert "knob_mode: fast  # default" in shown
    assert "| `knob_count` | int | `4` | >= 1 |" in markdown_table(WithKnob)
    assert "knob_mode (str; default fast; fast | slow)" in text_table(WithKnob)


def test_every_row_of_the_product_is_complete():
    for row in rows(RunConfig):
        assert row.help and not row.help.endswith("."), row.name
        assert row.paper is SAME or row.paper != row.default, row.name
        assert row.later is ALWAYS or row.choices is None or row.later in row.choices, row.name
        assert set(row.services) <= set(settings.SERVICES), row.name
        if row.choices is not None:
            assert row.default in row.choices, row.name
        assert row.range_problem(row.default) is None, row.name
