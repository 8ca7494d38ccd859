"""The replay tier: every committed run in results/ is what today's code and its own config
say it is. A change to a policy that would move a committed run's decisions fails here (its
runs would then be stale: rerun them, or move them to the archive tag), and so does a run
that does not record what made it. Slow: every run is read (`make test-all`, CI)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from powertrip.app.experiments.replay import REPLAYABLE, first_departure, load_stored
from powertrip.core import runfiles
from powertrip.core.config import RunConfig
from powertrip.core.policies import REGISTRY
from powertrip.core.policies.adaptive import AdaptiveParams, probe_step
from powertrip.core.policies.floors import ceiling_floor, stall_floor

pytestmark = pytest.mark.replay

RUNS = Path(__file__).resolve().parents[2] / "results" / "reproduce" / "runs"
COMMITTED = sorted(p.parent for p in RUNS.glob("*/seed*/*/rounds.csv"))


def test_there_are_committed_runs():
    assert len(COMMITTED) >= 500, "results/reproduce/runs is not here"


@pytest.mark.parametrize("name", [runfiles.CONFIG, runfiles.REQUESTED_CONFIG])
def test_every_run_records_every_parameter_of_its_policy(name):
    """So that a default can move without making a run stale: its config names them all."""
    missing = []
    for run in COMMITTED:
        config = RunConfig.from_run(run / name)
        want, have = set(REGISTRY[config.policy].Params.names()), set(config.policy_params)
        if have != want:
            missing.append(f"{run}: lacks {sorted(want - have)}, unknown {sorted(have - want)}")
    assert not missing, "\n".join(missing[:20])


def test_every_replayable_run_replays_decision_for_decision():
    """powertrip, adaptive and static on uniform power: the policy, asked again with the
    run's own parameters and history, chooses every round's sites as written."""
    replayed, departed = 0, []
    for run in COMMITTED:
        config = yaml.safe_load((run / runfiles.CONFIG).read_text())
        if config["policy"] not in REPLAYABLE or config["power"] != "uniform":
            continue
        stored = load_stored(run)
        at = first_departure(stored)
        if at is not None:
            departed.append(f"{run}: round {at}")
        replayed += 1
    assert not departed, "\n".join(departed)
    assert replayed >= 300


def test_no_floor_of_adaptive_binds_on_a_committed_run():
    """Both floors only raise k, so a run whose every next k is at or above the floors its
    history gives is the run with them, decision for decision: this covers the runs a replay
    cannot (trace power, whose site table changes every round)."""
    checked = 0
    for run in COMMITTED:
        config = RunConfig.from_run(run / runfiles.CONFIG)
        if config.policy != "adaptive":
            continue
        with (run / runfiles.ROUNDS).open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        accuracies, ks = [float(r["accuracy"]) for r in rows], [int(r["k"]) for r in rows]
        p = AdaptiveParams.parse("adaptive", config.policy_params)
        assert p.ceiling_rounds is not None and p.stall_rounds is not None, run  # both on
        step, n = probe_step(p.probe_pct, config.num_sites), config.num_sites
        for r in range(1, len(rows)):
            ceiling, _ = ceiling_floor(
                accuracies[:r], ks[:r], config.target_accuracy, p.ceiling_rounds, step, n
            )
            stall, _ = stall_floor(accuracies[:r], ks[:r], p.stall_rounds, step, n)
            assert max(ceiling, stall) <= ks[r], f"{run}: round {r + 1}"
        checked += 1
    assert checked >= 40
