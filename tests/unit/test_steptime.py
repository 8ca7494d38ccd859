"""tau_source (issue #36): tau as given (fixed, the default) or measured from the workload's
real steps (powertrip/core/steptime.py, services/aggregator/tau.py); timers are injected."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import yaml

from powertrip.core.config import LATER_SETTINGS, ConfigError, RunConfig, experiment_differences
from powertrip.core.steptime import measured_tau_s, time_steps
from powertrip.core.workloads import get_workload
from services.aggregator.report import run_summary
from services.aggregator.run_result import LoopResult
from services.aggregator.tau import run_with_tau


def fake_timer(durations):
    """A clock that reads 0 first, then advances by each duration in turn, one per call."""
    stamps = itertools.accumulate(itertools.chain([0.0], durations))
    return lambda: next(stamps)


# ---- the pure function -------------------------------------------------------------------
def test_tau_is_the_median_step_time_times_the_local_steps():
    assert measured_tau_s([0.02, 0.05, 0.03], 10) == pytest.approx(0.3)
    assert measured_tau_s([0.02, 0.04], 5) == pytest.approx(0.15)  # even count: the mean pair
    assert measured_tau_s([1.5], 1) == 1.5


@pytest.mark.parametrize(
    ("times", "steps", "words"),
    [([], 10, "no step times"), ([0.1, 0.0], 10, "> 0"), ([0.1], 0, "local_steps")],
)
def test_tau_refuses_what_it_cannot_measure_from(times, steps, words):
    with pytest.raises(ValueError, match=words):
        measured_tau_s(times, steps)


# ---- the measuring call ------------------------------------------------------------------
@pytest.mark.parametrize("workload_name", ["synthetic", "femnist"])
def test_time_steps_times_each_step_of_the_real_training_after_warm_up(workload_name):
    workload = get_workload(workload_name)
    train = workload.load(None, 0).train
    torch.manual_seed(0)
    model = workload.build_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    warmup, timed = [9.0, 8.0], [0.04, 0.01, 0.03, 0.02, 0.05]
    steps = time_steps(
        workload,
        model,
        train.x,
        train.y,
        lr=workload.defaults.lr,
        batch_size=workload.defaults.batch_size,
        warmup=len(warmup),
        steps=len(timed),
        timer=fake_timer([*warmup, *timed]),
    )
    assert steps == pytest.approx(timed)  # the warm-up steps are not counted
    local = workload.defaults.local_steps
    assert measured_tau_s(steps, local) == pytest.approx(0.03 * local)
    after = model.state_dict()  # the model is left as it was
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_the_aggregator_measures_tau_from_the_run_and_records_it(tmp_path):
    run = RunConfig(workload="synthetic", tau_source="measured").validate()
    run = run.resolved(get_workload("synthetic").defaults)
    assert run.tau_s is None and run.local_steps == 5
    timed = [0.2] * 3 + [0.011, 0.013, 0.012] * 6 + [0.5, 0.9]  # 3 warm-up, 20 timed
    measured = run_with_tau(run, tmp_path, device="cpu", timer=fake_timer(timed))
    assert measured.tau_s == pytest.approx(0.012 * 5)
    assert measured.tau_source == "measured" and run.tau_s is None  # a copy
    # a resumed run keeps what its config.yaml recorded, measures nothing
    measured.write_yaml(tmp_path / "config.yaml")
    resumed = run_with_tau(run, tmp_path, resume=True, timer=lambda: pytest.fail("timed"))
    assert resumed.tau_s == measured.tau_s
    summary = run_summary(measured, LoopResult(), "done", "", [])
    assert (summary["tau_source"], summary["tau_s"]) == ("measured", measured.tau_s)


# ---- fixed, the default, is unchanged ---------------------------------------------------
def test_fixed_tau_is_the_given_one_and_nothing_is_measured(tmp_path):
    run = RunConfig(workload="synthetic").validate().resolved(get_workload("synthetic").defaults)
    assert run.tau_source == "fixed" and run.tau_s == 30.0
    assert run_with_tau(run, tmp_path, timer=lambda: pytest.fail("timed")) is run
    summary = run_summary(run, LoopResult(), "done", "", [])
    assert "tau_source" not in summary and "tau_s" not in summary
    given = RunConfig(tau_s=12.5).resolved(get_workload("femnist").defaults)
    assert given.tau_s == 12.5
    # a run stored before the setting existed ran with fixed tau
    assert LATER_SETTINGS["tau_source"] == "fixed" == RunConfig().tau_source
    stored = {k: v for k, v in RunConfig().to_dict().items() if k != "tau_source"}
    assert experiment_differences(stored, RunConfig().to_dict()) == []
    assert experiment_differences(stored, RunConfig(tau_source="measured").to_dict()) == [
        "tau_source"
    ]


def test_a_bad_tau_source_names_the_allowed_values():
    with pytest.raises(ConfigError, match="tau_source must be one of fixed, measured"):
        RunConfig.from_mapping({"tau_source": "guessed"})
    with pytest.raises(ConfigError, match="tau_source must be one of fixed, measured"):
        RunConfig(tau_source="guessed").validate()
    with pytest.raises(ConfigError, match="tau_source must be one of fixed, measured"):
        RunConfig().with_settings(["tau_source=median"])


def test_measured_tau_with_a_given_tau_s_is_refused():
    with pytest.raises(ConfigError, match="tau_s: is 60 but tau_source measured"):
        RunConfig(tau_source="measured", tau_s=60.0).validate()
    config = yaml.safe_dump({"tau_source": "measured", "tau_s": None})
    assert RunConfig.from_mapping(yaml.safe_load(config)).validate().tau_s is None


def test_step_times_are_positive_on_this_machine():
    """The real timer: a few real steps of the synthetic MLP take some time."""
    workload = get_workload("synthetic")
    train = workload.load(None, 0).train
    model = workload.build_model()
    steps = time_steps(workload, model, train.x, train.y, lr=0.05, batch_size=20, steps=3)
    assert len(steps) == 3 and all(np.isfinite(t) and t > 0 for t in steps)
