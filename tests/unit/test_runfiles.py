"""The run directory's schema (powertrip/core/runfiles.py) is what the aggregator writes and what
the report requires: one list, checked against both ends."""

from __future__ import annotations

from dataclasses import fields

from powertrip.core import runfiles
from powertrip.core.config import RunConfig
from services.aggregator.records import RoundRow
from services.aggregator.report import run_summary
from services.aggregator.run_result import LoopResult


def test_round_row_writes_the_schema_columns_in_order():
    assert tuple(f.name for f in fields(RoundRow)) == (
        *runfiles.ROUND_COLUMNS,
        *runfiles.WALL_ONLY_COLUMNS,
        *runfiles.FOOTPRINT_COLUMNS,
    )
    assert runfiles.round_columns("simulated") == [
        *runfiles.ROUND_COLUMNS,
        *runfiles.FOOTPRINT_COLUMNS,
    ]
    assert runfiles.round_columns("wall")[-6] == "model_round_time_s"


def test_readers_require_only_columns_the_writer_writes():
    assert set(runfiles.REQUIRED_ROUND_COLUMNS) <= set(runfiles.ROUND_COLUMNS)


def test_the_aggregator_summary_has_every_schema_key():
    summary = run_summary(RunConfig(), LoopResult(), "done", "", [])
    missing = [key for key in runfiles.SUMMARY_KEYS if key not in summary]
    assert not missing, f"summary.json lacks {missing}"


def test_the_aggregator_summary_has_every_footprint_key():
    summary = run_summary(RunConfig(), LoopResult(), "done", "", [])
    missing = [key for key in runfiles.FOOTPRINT_SUMMARY_KEYS if key not in summary]
    assert not missing, f"summary.json lacks {missing}"
