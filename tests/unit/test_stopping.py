"""The stop rule (services/aggregator/stopping.py): the accuracy target, the perplexity target
that replaces it when a run sets one, and the time budget."""

from __future__ import annotations

import math

import pytest

from powertrip.core.config import ConfigError, RunConfig
from services.aggregator.stopping import TARGET_REACHED, TIME_BUDGET, stop_reason


def test_the_accuracy_target_stops_the_run_once():
    assert stop_reason(0.46, 0.45, False, 100.0, 0.0) == TARGET_REACHED
    assert stop_reason(0.44, 0.45, False, 100.0, 0.0) is None
    assert stop_reason(0.46, 0.45, True, 100.0, 0.0) is None  # reached before: no new stop


def test_a_perplexity_target_replaces_the_accuracy_target():
    ppl = {"target_perplexity": 10.5}
    # perplexity 10.4 <= 10.5: reached, whatever the accuracy
    assert stop_reason(0.1, 0.45, False, 1.0, 0.0, loss=math.log(10.4), **ppl) == TARGET_REACHED
    # perplexity 10.6 > 10.5: not reached, even with the accuracy above its target
    assert stop_reason(0.9, 0.45, False, 1.0, 0.0, loss=math.log(10.6), **ppl) is None


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), 1e6])
def test_a_diverged_loss_reaches_no_perplexity(loss):
    assert stop_reason(0.9, 0.45, False, 1.0, 0.0, loss=loss, target_perplexity=10.5) is None


def test_the_time_budget_still_stops_a_perplexity_run():
    reason = stop_reason(0.1, 0.45, False, 7200.0, 1.0, loss=math.log(20.0), target_perplexity=10.5)
    assert reason == TIME_BUDGET


@pytest.mark.parametrize("bad", [1.0, 0.5, -3.0])
def test_a_target_perplexity_of_one_or_less_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match="target_perplexity"):
        RunConfig(workload="shakespeare-lm", target_perplexity=bad).validate()


def test_runs_stored_before_the_setting_still_match():
    """A run directory from before target_perplexity existed has no such key: it counts as
    null, so reproduce does not redo every finished run."""
    from powertrip.core.config import experiment_differences

    wanted = RunConfig().to_dict()
    stored = {k: v for k, v in wanted.items() if k != "target_perplexity"}
    assert experiment_differences(stored, wanted) == []
    assert experiment_differences(stored, {**wanted, "target_perplexity": 9.0}) == [
        "target_perplexity"
    ]


def test_the_wall_budget_stops_a_run_once_its_hours_are_spent():
    from services.aggregator.stopping import WALL_BUDGET

    assert stop_reason(0.1, 0.45, False, 60.0, 0.0, wall_s=3600.0, max_wall_hours=1.0) == (
        WALL_BUDGET
    )
    assert stop_reason(0.1, 0.45, False, 60.0, 0.0, wall_s=3599.0, max_wall_hours=1.0) is None
    assert stop_reason(0.1, 0.45, False, 60.0, 0.0, wall_s=1e9, max_wall_hours=0.0) is None
    # the target reached in the same round is what the round reports
    assert stop_reason(0.5, 0.45, False, 60.0, 0.0, wall_s=1e9, max_wall_hours=1.0) == (
        TARGET_REACHED
    )


def test_max_wall_hours_is_a_run_limit_stored_runs_ran_without():
    from powertrip.core.config import LATER_SETTINGS, RUN_LIMITS

    assert "max_wall_hours" in RUN_LIMITS and LATER_SETTINGS["max_wall_hours"] == 0.0
    with pytest.raises(ConfigError, match=r"max_wall_hours: must be >= 0, got -1"):
        RunConfig(max_wall_hours=-1).validate()
