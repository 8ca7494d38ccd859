"""One default per setting: the Flower strategy's keywords named like run settings and
configs/reproduce.yaml agree with RunConfig, except where a declared row says why."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from powertrip.core.config import PAPER_VALUES, RunConfig

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = {f.name: RunConfig().__getattribute__(f.name) for f in fields(RunConfig)}


def strategy_defaults() -> dict[str, object]:
    flower = pytest.importorskip("powertrip.app.flower.strategy")
    signature = inspect.signature(flower.PowerTripStrategy.__init__)
    return {  # None for a mapping means an empty one (policy_params)
        name: {} if p.default is None and isinstance(DEFAULTS[name], dict) else p.default
        for name, p in signature.parameters.items()
        if name in DEFAULTS and p.default is not inspect.Parameter.empty
    }


def test_the_flower_strategy_takes_the_services_defaults_but_where_a_row_says_why():
    from powertrip.app.flower.strategy import DEFAULTS_THAT_DIFFER

    theirs = strategy_defaults()
    assert {"comm_directions", "outer_optimizer", "outer_lr", "tau_s"} <= set(theirs)
    unexplained = {
        name: (value, DEFAULTS[name])
        for name, value in theirs.items()
        if value != DEFAULTS[name] and name not in DEFAULTS_THAT_DIFFER
        and DEFAULTS[name] is not None  # None: the workload's, which a Flower app has not
    }  # fmt: skip
    assert not unexplained, f"strategy default vs RunConfig's, no row says why: {unexplained}"
    stale = [n for n in DEFAULTS_THAT_DIFFER if theirs.get(n) == DEFAULTS.get(n)]
    assert not stale, f"rows for defaults that no longer differ: {stale}"


def test_reproduce_yaml_runs_the_papers_values():
    reproduce = yaml.safe_load((ROOT / "configs" / "reproduce.yaml").read_text())
    wrong = {k: (reproduce.get(k, DEFAULTS[k]), v) for k, v in PAPER_VALUES.items()
             if reproduce.get(k, DEFAULTS[k]) != v}  # fmt: skip
    assert not wrong, f"configs/reproduce.yaml differs from the paper's values: {wrong}"


def test_a_paper_value_names_a_setting():
    assert set(PAPER_VALUES) <= set(DEFAULTS)


def test_the_outer_step_has_no_default_of_its_own():
    from powertrip.core.outer import STORED, OuterStep, outer_of

    with pytest.raises(TypeError):
        OuterStep()  # type: ignore[call-arg]
    assert outer_of(RunConfig()).optimizer == DEFAULTS["outer_optimizer"]
    assert outer_of(object()) == STORED and STORED.optimizer == "fedavg"
