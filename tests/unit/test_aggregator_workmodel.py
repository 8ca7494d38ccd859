"""The aggregator's work models, its measured wall-clock breakdown and its round records:
hand-computed numbers, and the invariants the data-parallel split promises (DESIGN.md §2)."""

from __future__ import annotations

import csv

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powertrip.runfiles import ROUND_COLUMNS, round_columns
from powertrip.v1 import common_pb2
from services.aggregator.checkpoint_store import restore_site_ids
from services.aggregator.records import (
    RoundRow,
    RunRecorder,
    WallTimes,
    round_sites,
)
from services.aggregator.run_result import LoopResult
from services.aggregator.workmodel import (
    DP_REFERENCE_SITES,
    data_parallel_split,
    data_parallel_total_steps,
    local_steps_split,
    measured_breakdown,
    split_work,
)


# ---- data-parallel split ---------------------------------------------------------------
def test_data_parallel_split_by_hand():
    # W = 5 x 10 = 50 site-steps, tau_step = 30 / 5 = 6 s, sum p = 1.75
    # n = round(50 x [1, .5, .25] / 1.75) = round(28.57, 14.29, 7.14) = 29, 14, 7
    work = data_parallel_split(["a", "b", "c"], [1.0, 0.5, 0.25], local_steps=5, tau_s=30.0)
    assert DP_REFERENCE_SITES == 10 and data_parallel_total_steps(5) == 50
    assert [w.site_id for w in work] == ["a", "b", "c"]
    assert [w.steps for w in work] == [29, 14, 7]
    assert [w.compute_s for w in work] == pytest.approx([29 * 6 / 1.0, 14 * 6 / 0.5, 7 * 6 / 0.25])
    # every site computes for about W tau_step / sum p = 300 / 1.75 = 171.4 s
    for w in work:
        assert w.compute_s == pytest.approx(50 * 6 / 1.75, rel=0.03)


def test_data_parallel_compute_falls_as_power_is_added():
    one = data_parallel_split(["a"], [0.5], local_steps=10, tau_s=60.0)
    assert one[0].steps == 100 and one[0].compute_s == pytest.approx(100 * 6 / 0.5)
    more = data_parallel_split(["a", "b", "c"], [0.5, 0.5, 1.0], local_steps=10, tau_s=60.0)
    assert max(w.compute_s for w in more) < one[0].compute_s / 3.5  # sum p: 0.5 -> 2.0


def test_data_parallel_weak_site_gets_at_least_one_step():
    work = data_parallel_split(["a", "b"], [1.0, 0.001], local_steps=1, tau_s=10.0)
    assert [w.steps for w in work] == [10, 1]
    # its one step at power 0.001 outlasts the rest: the model says it straggles
    assert work[1].compute_s == pytest.approx(10.0 / 0.001)


@settings(max_examples=200, deadline=None)
@given(
    powers=st.lists(st.floats(0.1, 1.0), min_size=1, max_size=40),
    local_steps=st.integers(1, 20),
    tau_s=st.floats(1.0, 600.0),
)
def test_data_parallel_invariants(powers, local_steps, tau_s):
    ids = [f"site-{i:03d}" for i in range(len(powers))]
    work = data_parallel_split(ids, powers, local_steps=local_steps, tau_s=tau_s)
    total = data_parallel_total_steps(local_steps)
    step_s = tau_s / local_steps
    ideal = total * step_s / sum(powers)
    # rounding moves each share by at most half a step, the one-step floor by at most one
    assert abs(sum(w.steps for w in work) - total) <= len(powers)
    for w, p in zip(work, powers, strict=True):
        assert w.steps >= 1
        assert w.compute_s == pytest.approx(w.steps * step_s / p)
        if w.steps > 1:  # off the floor: within half a step (at its power) of W tau_step/sum p
            assert abs(w.compute_s - ideal) <= 0.5 * step_s / p + 1e-9 * ideal


def test_local_steps_model_is_unchanged():
    work = split_work("local-steps", ["a", "b"], [1.0, 0.25], local_steps=7, tau_s=30.0)
    assert [(w.steps, w.compute_s) for w in work] == [(7, 30.0), (7, 120.0)]
    assert work == local_steps_split(["a", "b"], [1.0, 0.25], local_steps=7, tau_s=30.0)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="work_model"):
        split_work("magic", ["a"], [1.0], local_steps=1, tau_s=1.0)
    with pytest.raises(ValueError, match="power"):
        data_parallel_split(["a"], [0.0], local_steps=1, tau_s=1.0)
    with pytest.raises(ValueError, match="at least one"):
        data_parallel_split([], [], local_steps=1, tau_s=1.0)


# ---- wall-clock breakdown --------------------------------------------------------------
def test_measured_breakdown_by_hand():
    # seconds since dispatch: a finished at 1.0 (0.4 of it training), b at 3.0 (0.5 training)
    timing = measured_breakdown(
        {"a": 1.0, "b": 3.0}, {"a": 0.4, "b": 0.5}, 3.25, aggregation_s=0.01, round_time_s=3.5
    )
    assert timing.straggler == "b"
    assert timing.compute_s == 0.5 and timing.comm_s == pytest.approx(2.5)
    assert timing.wait_s == pytest.approx(((3.25 - 1.0) + (3.25 - 3.0)) / 2)
    assert (timing.round_time_s, timing.aggregation_s) == (3.5, 0.01)
    assert timing.compute_s + timing.comm_s <= timing.round_time_s


def test_measured_breakdown_never_charges_more_compute_than_the_round():
    timing = measured_breakdown({"a": 0.2}, {"a": 0.9}, 0.2, aggregation_s=0.0, round_time_s=0.3)
    assert (timing.compute_s, timing.comm_s) == (0.2, 0.0)


# ---- round files and history -----------------------------------------------------------
def _row(n: int, clock: str) -> RoundRow:
    return RoundRow(
        round=n, sim_time_s=2.0 * n, round_time_s=2.0, k=2, sites="site-003;site-001",
        accuracy=0.5, loss=1.0, compute_s=0.5, comm_s=1.0, wait_s=0.1, aggregation_s=0.01,
        predicted_round_time_s=None if clock == "wall" else 9.5, bytes_up=1, bytes_down=2,
        emulated_bytes=3e9, straggler="site-001", mode="federated", train_loss=0.5,
        clock=clock, model_round_time_s=60.0 if clock == "wall" else None,
    )  # fmt: skip


def test_simulated_columns_are_the_old_ones_and_wall_adds_the_model_time():
    old = "round,sim_time_s,round_time_s,k,sites,accuracy,loss,compute_s,comm_s,wait_s,"
    old += "aggregation_s,predicted_round_time_s,bytes_up,bytes_down,emulated_bytes,straggler,"
    old += "mode,train_loss,clock"
    footprint = ["energy_j", "idle_energy_j", "egress_gb", "egress_usd", "carbon_g"]
    assert ",".join(ROUND_COLUMNS) == old
    # the footprint's columns come last on either clock: older files are a prefix
    assert round_columns("simulated") == [*ROUND_COLUMNS, *footprint]
    assert round_columns("wall") == [*ROUND_COLUMNS, "model_round_time_s", *footprint]


def test_wall_rows_leave_the_prediction_empty_and_resume_keeps_the_column(tmp_path):
    rec = RunRecorder(tmp_path, clock="wall")
    for n in (1, 2):
        rec.add_round(_row(n, "wall"), {}, WallTimes(2.0, 1.9, 0.1))
    RunRecorder(tmp_path, keep_rounds=1, clock="wall")
    rows = list(csv.DictReader((tmp_path / "rounds.csv").open()))
    assert len(rows) == 1
    assert rows[0]["predicted_round_time_s"] == "" and rows[0]["model_round_time_s"] == "60.0"


def test_history_site_ids_survive_a_checkpoint_and_old_ones_come_from_rounds_csv(tmp_path):
    record = common_pb2.RoundRecord(round=1, k=2, site_ids=["site-003", "site-001"])
    again = LoopResult.from_json(LoopResult(history=[record]).to_json())
    assert list(again.history[0].site_ids) == ["site-003", "site-001"]

    rec = RunRecorder(tmp_path)
    for n in (1, 2):
        rec.add_round(_row(n, "simulated"), {}, WallTimes(2.0, 1.9, 0.1))
    assert round_sites(tmp_path) == {1: ["site-003", "site-001"], 2: ["site-003", "site-001"]}
    # a checkpoint from before RoundRecord.site_ids: its history has none
    old = {"round": 1, "k": 2, "accuracy": 0.5, "round_time_s": 2.0,
           "predicted_round_time_s": 9.5, "sim_time_s": 2.0}  # fmt: skip
    result = LoopResult.from_json(
        {"rounds": 1, "sim_time_s": 2.0, "accuracy": 0.5, "best_accuracy": 0.5,
         "time_to_target_s": None, "stopped_reason": "", "history": [old]}
    )  # fmt: skip
    restore_site_ids(result, tmp_path)
    assert list(result.history[0].site_ids) == ["site-003", "site-001"]


def test_resuming_a_file_without_the_footprint_columns_pads_its_rows(tmp_path):
    old_columns = ",".join(ROUND_COLUMNS)
    row = "1,2.0,2.0,2,site-003;site-001,0.5,1.0,0.5,1.0,0.1,0.01,9.5,1,2,3e9,site-001,"
    row += "federated,0.5,simulated"
    (tmp_path / "rounds.csv").write_text(f"{old_columns}\r\n{row}\r\n", newline="")
    RunRecorder(tmp_path, keep_rounds=1)
    rows = list(csv.DictReader((tmp_path / "rounds.csv").open(newline="")))
    assert list(rows[0]) == round_columns("simulated")
    assert rows[0]["clock"] == "simulated" and rows[0]["energy_j"] == ""
