"""The FedAvg audit trail (services/aggregator/audit.py): a replay equals the aggregator's
own arithmetic, and every way the record can disagree with the sum is caught."""

from __future__ import annotations

import json

import numpy as np
import pytest

from powertrip.core.fedavg import apply_delta
from services.aggregator.accumulator import RoundAccumulator
from services.aggregator.audit import MANIFEST, AuditError, DeltaAudit, replay

SITES = ["site-000", "site-001", "site-002", "site-003"]


def _model(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.normal(size=(7, 5)).astype(np.float32),
        "b": rng.normal(size=5).astype(np.float32),
    }


def _run(root, rounds: int = 3, missing: str = "site-002") -> dict[str, np.ndarray]:
    """Rounds as the round loop drives them: open, add (out of order), skip, commit."""
    audit = DeltaAudit(root)
    weights = _model(0)
    audit.start(weights)
    for r in range(1, rounds + 1):
        acc = RoundAccumulator(SITES, weights, audit.open_round(r, SITES, r - 1))
        for i, site in reversed(list(enumerate(SITES))):
            if site != missing:
                acc.add(site, _model(100 * r + i), weight=10.0 + i)
        acc.skip([missing])
        weights = apply_delta(weights, acc.result())
        acc.commit_audit()
    return weights


def test_replay_is_bit_identical_to_the_aggregators_sum(tmp_path):
    final = _run(tmp_path)
    replayed, rounds = replay(tmp_path)
    assert rounds == 3
    for key in final:
        assert np.array_equal(final[key], replayed[key])
    manifest = json.loads((tmp_path / "round-000002" / MANIFEST).read_text())
    assert manifest["contributors"] == ["site-000", "site-001", "site-003"]
    assert not (tmp_path / "round-000002" / "site-002.npz").exists()


def test_a_changed_delta_changes_the_replay(tmp_path):
    final = _run(tmp_path)
    path = tmp_path / "round-000002" / "site-001.npz"
    with np.load(path) as npz:
        delta = {k: npz[k] for k in npz.files}
    delta["w"][0, 0] += 1e-3
    np.savez(path, **delta)
    replayed, _ = replay(tmp_path)
    assert not np.array_equal(final["w"], replayed["w"])


def test_a_missing_delta_or_round_is_an_error(tmp_path):
    _run(tmp_path)
    (tmp_path / "round-000003" / "site-000.npz").unlink()
    with pytest.raises(FileNotFoundError):
        replay(tmp_path)
    (tmp_path / "round-000002" / MANIFEST).unlink()
    with pytest.raises(FileNotFoundError):
        replay(tmp_path)


def test_a_gap_in_the_rounds_is_an_error(tmp_path):
    _run(tmp_path)
    (tmp_path / "round-000002").rename(tmp_path / "round-000009")
    with pytest.raises(AuditError, match="expected round 2"):
        replay(tmp_path)


def test_a_redone_round_replaces_the_earlier_attempt_and_partials_do_not_count(tmp_path):
    audit = DeltaAudit(tmp_path)
    weights = _model(0)
    audit.start(weights)
    first = audit.open_round(1, SITES, 0)
    first.record("site-000", _model(9), 5.0)  # accepted, then the aggregator died
    assert replay(tmp_path)[1] == 0  # an uncommitted round is not replayed
    acc = RoundAccumulator(SITES, weights, audit.open_round(1, SITES, 0))
    acc.add("site-001", _model(1), 3.0)
    acc.skip(["site-000", "site-002", "site-003"])
    expected = apply_delta(weights, acc.result())
    acc.commit_audit()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "initial.npz",
        "outer.json",
        "round-000001",
    ]
    replayed, rounds = replay(tmp_path)
    assert rounds == 1 and np.array_equal(replayed["w"], expected["w"])


def test_commit_refuses_a_contributor_without_a_recorded_delta(tmp_path):
    audit = DeltaAudit(tmp_path)
    audit.start(_model(0))
    record = audit.open_round(1, SITES, 0)
    with pytest.raises(AuditError, match="no recorded delta"):
        record.commit(["site-000"])


@pytest.mark.parametrize("optimizer", ["nesterov", "fedavgm"])
def test_replay_takes_the_runs_outer_step_and_its_momentum(tmp_path, optimizer):
    """A Nesterov (or FedAvgM) run's audit replays to the bit (outer.json names the step),
    and the momentum matters: the same deltas under FedAvg give another model."""
    from powertrip.core.outer import OuterStep, outer_update

    step = OuterStep(optimizer, 0.7, 0.9)
    audit = DeltaAudit(tmp_path)
    weights, buffer = _model(0), None
    audit.start(weights, step)
    for r in range(1, 4):
        acc = RoundAccumulator(SITES, weights, audit.open_round(r, SITES, r - 1))
        for i, site in enumerate(SITES):
            acc.add(site, _model(100 * r + i), weight=10.0 + i)
        weights, buffer = outer_update(weights, acc.result(), buffer, step)
        acc.commit_audit()
    replayed, rounds = replay(tmp_path)
    assert rounds == 3
    assert all(np.array_equal(weights[k], replayed[k]) for k in weights)
    (tmp_path / "outer.json").unlink()  # read as FedAvg, as audits before the outer step
    as_fedavg, _ = replay(tmp_path)
    assert not np.array_equal(as_fedavg["w"], weights["w"])
    other = "fedavgm" if optimizer == "nesterov" else "nesterov"  # the other momentum step
    (tmp_path / "outer.json").write_text(f'{{"optimizer": "{other}", "lr": 0.7, "momentum": 0.9}}')
    as_other, _ = replay(tmp_path)
    assert not np.array_equal(as_other["w"], weights["w"])
    (tmp_path / "outer.json").write_text('{"optimizer": "adam", "lr": 1, "momentum": 0}')
    with pytest.raises(AuditError, match="outer_optimizer must be one of"):
        replay(tmp_path)
