"""The clocks as data (powertrip/core/clocks.py): one table that the aggregator's clock
objects, the run-directory schema, the reports and the CLI read instead of comparing strings."""

from __future__ import annotations

import pytest

from powertrip.app.report.html import clock_text
from powertrip.core import runfiles
from powertrip.core.clocks import CLOCKS, SIMULATED, WALL, clock_kind
from powertrip.core.configvalues import FIELD_CHOICES
from services.aggregator.clock import CLOCK_CLASSES


def test_the_config_allows_exactly_the_known_clocks():
    assert FIELD_CHOICES["clock"] == CLOCKS == ("simulated", "wall")


def test_the_aggregator_clocks_are_the_kinds_behaviour():
    for name, cls in CLOCK_CLASSES.items():
        kind = clock_kind(name)
        assert (cls.name, cls.measured, cls.note) == (kind.name, kind.measured, kind.summary_note)


def test_only_the_measured_clock_writes_the_model_time_column():
    assert "model_round_time_s" in runfiles.round_columns(WALL.name)
    assert "model_round_time_s" not in runfiles.round_columns(SIMULATED.name)


def test_a_run_without_a_clock_was_simulated_and_an_unknown_one_is_refused():
    assert clock_kind(None) is SIMULATED and clock_text("") == SIMULATED.text
    with pytest.raises(ValueError, match="unknown clock 'sundial'; allowed: simulated, wall"):
        clock_kind("sundial")
