"""The aggregator's work models, its measured wall-clock breakdown and its round records:
hand-computed numbers, and the invariants the data-parallel split promises (DESIGN.md §2)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powertrip.core.config import ConfigError, RunConfig
from powertrip.core.runfiles import ROUND_COLUMNS, round_columns
from powertrip.core.timemodel import WORK_MODELS, prefix_round_time_estimates, site_comm_s
from powertrip.v1 import aggregator_pb2
from services.aggregator.accumulator import RoundAccumulator
from services.aggregator.checkpoint_store import restore_site_ids
from services.aggregator.clock import simulated_time
from services.aggregator.domain import Selection, SiteProfile
from services.aggregator.records import (
    RoundRow,
    RunRecorder,
    WallTimes,
    round_sites,
)
from services.aggregator.round import RoundInProgress
from services.aggregator.run_result import LoopResult, RoundRecord
from services.aggregator.state import AggregatorState
from services.aggregator.tasks import round_tasks
from services.aggregator.uploads import DeltaReceiver
from services.aggregator.workmodel import (
    DP_REFERENCE_SITES,
    data_parallel_split,
    data_parallel_total_steps,
    fedavg_weights,
    local_steps_split,
    measured_breakdown,
    power_split,
    power_split_global_batch,
    split_batch,
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


# ---- power-split (Eq. 7 as a split of the global batch) -------------------------------
def test_power_split_by_hand():
    # B = 20 x 10 = 200, sum p = 2: b = 200 x [1, .5, .25, .25] / 2 = 100, 50, 25, 25 exactly;
    # tau_B = 10 x 30 = 300 s, so every site computes for 300 / 2 = 150 s
    ids = ["a", "b", "c", "d"]
    work = power_split(ids, [1.0, 0.5, 0.25, 0.25], local_steps=5, tau_s=30.0, batch_size=20)
    assert power_split_global_batch(20) == 200
    assert [(w.site_id, w.steps, w.batch_size) for w in work] == [
        ("a", 5, 100), ("b", 5, 50), ("c", 5, 25), ("d", 5, 25),
    ]  # fmt: skip
    assert [w.compute_s for w in work] == pytest.approx([150.0] * 4)
    # 10 full-power sites: each gets batch_size and computes for tau, as under local-steps
    ten = power_split([f"s{i}" for i in range(10)], [1.0] * 10, local_steps=5, tau_s=30.0,
                      batch_size=20)  # fmt: skip
    assert [w.batch_size for w in ten] == [20] * 10
    assert [w.compute_s for w in ten] == pytest.approx([30.0] * 10)


def test_power_split_compute_falls_as_power_is_added():
    computes = []
    for powers in ([0.5], [0.5, 0.5], [0.5, 0.5, 1.0], [1.0] * 8):
        ids = [f"s{i}" for i in range(len(powers))]
        work = power_split(ids, powers, local_steps=10, tau_s=60.0, batch_size=20)
        assert all(w.steps == 10 for w in work)  # every site runs H steps, whatever k
        computes.append(max(w.compute_s for w in work))
        assert computes[-1] == pytest.approx(10 * 60.0 / sum(powers))  # tau_B / sum p
    assert computes == sorted(computes, reverse=True) and len(set(computes)) == len(computes)


def test_split_batch_rounding():
    # quotas 200 x [.5, .3, .2] ... = exact; 10 x [1, 1, 1] / 3 = 3.33 each: 4, 3, 3 (ties: first)
    assert split_batch(10, [1.0, 1.0, 1.0]) == [4, 3, 3]
    # largest remainder: quotas 7 x [.6, .25, .15] = 4.2, 1.75, 1.05 -> 4, 2, 1
    assert split_batch(7, [0.6, 0.25, 0.15]) == [4, 2, 1]
    # a weak site's quota below 1 is floored to 1 and the rest re-shared among the others
    assert split_batch(10, [1.0, 1.0, 0.01]) == [5, 4, 1]
    # k >= B: one sample each (sum k; B is out of reach when k > B)
    assert split_batch(3, [1.0, 0.5, 0.1]) == [1, 1, 1]
    assert split_batch(2, [1.0, 0.5, 0.1]) == [1, 1, 1]
    with pytest.raises(ValueError, match="power"):
        split_batch(10, [1.0, 0.0])
    with pytest.raises(ValueError, match="at least one"):
        split_batch(10, [])


@settings(max_examples=300, deadline=None)
@given(
    powers=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=60),
    global_batch=st.integers(1, 400),
)
def test_split_batch_invariants(powers, global_batch):
    b = split_batch(global_batch, powers)
    assert len(b) == len(powers) and all(isinstance(x, int) and x >= 1 for x in b)
    if len(powers) <= global_batch:
        assert sum(b) == global_batch
    else:
        assert b == [1] * len(powers)
    # batches follow the power shares: a stronger site never gets less, and a site off the
    # floor is within one sample of its quota among the sites off the floor
    by_power = sorted(range(len(b)), key=lambda i: powers[i])
    for weaker, stronger in zip(by_power, by_power[1:], strict=False):
        if powers[stronger] > powers[weaker]:
            assert b[stronger] >= b[weaker]
    off = [i for i in range(len(b)) if b[i] > 1]
    if off:
        left = global_batch - (len(b) - len(off))
        total = sum(powers[i] for i in off)
        for i in off:
            assert abs(b[i] - left * powers[i] / total) < 1 + 1e-9


def _run(work_model: str) -> RunConfig:
    return RunConfig(work_model=work_model, update_size_gb=1.5, lr=0.1, batch_size=20,
                     local_steps=5, tau_s=30.0, eval_samples=100)  # fmt: skip


def _profiles(powers, latencies, bandwidths):
    return {
        f"site-{i:03d}": SiteProfile(
            site_id=f"site-{i:03d}", power_fraction=p, latency_s=lat, bandwidth_bytes_per_s=bw
        )
        for i, (p, lat, bw) in enumerate(zip(powers, latencies, bandwidths, strict=True))
    }


def test_power_split_estimate_matches_the_clock_for_exact_shares():
    """The policy's prefix estimate (compute tau_B / sum p_top-k + running max comm) is what
    the aggregator's clock charges when b_i / B = p_i / sum p exactly."""
    run = _run("power-split")
    # B = 200; the shares of the first 1, 2, 3, 5 sites are whole (200, 100+100, 80+80+40,
    # 50+50+25+25+50); those of the first 4 (sum p 3) are not
    powers = [1.0, 1.0, 0.5, 0.5, 1.0]
    lat, bw = [0.01, 0.02, 0.005, 0.03, 0.04], [1e9, 2e8, 5e8, 1e8, 3e8]
    profiles = _profiles(powers, lat, bw)
    _, comm = site_comm_s(lat, bw, run.update_size_bytes, run.comm_directions)
    estimate = prefix_round_time_estimates(
        run.tau_s, np.array(powers), comm, "paper", work_model="power-split"
    )
    tau_b, batch = DP_REFERENCE_SITES * run.tau_s, power_split_global_batch(run.batch_size)
    for k in range(1, len(powers) + 1):
        ids = list(profiles)[:k]
        planned = simulated_time(run, Selection(site_ids=tuple(ids)), profiles)
        charged = planned.round_s - run.aggregation_s  # the straggler's compute + comm
        assert planned.steps == dict.fromkeys(ids, run.local_steps)
        assert sum(planned.batches.values()) == batch
        if k != 4:
            assert charged == pytest.approx(estimate[k - 1])
            assert planned.timing.compute_s == pytest.approx(tau_b / sum(powers[:k]))
        else:  # rounding to whole samples: off by at most one sample at the site's power
            assert abs(charged - estimate[k - 1]) <= tau_b / batch / min(powers[:k])
    # every selected site computes for tau_B / sum p, whichever estimator the policy uses
    assert prefix_round_time_estimates(
        run.tau_s, np.array(powers), comm, "clock", work_model="power-split"
    ) == pytest.approx(estimate)  # fmt: skip


def test_power_split_tasks_carry_batches_and_fedavg_follows_them():
    run = _run("power-split")
    profiles = _profiles([1.0, 0.5, 0.5], [0.01] * 3, [1e9] * 3)
    selection = Selection(site_ids=tuple(profiles))
    planned = simulated_time(run, selection, profiles)
    assert planned.batches == {"site-000": 100, "site-001": 50, "site-002": 50}
    tasks = round_tasks(run, 1, selection, 0, planned.steps, planned.batches)
    by_site = {t.site_id: t for t in tasks.values()}
    assert {s: (t.local_steps, t.batch_size) for s, t in by_site.items()} == {
        "site-000": (5, 100), "site-001": (5, 50), "site-002": (5, 50),
    }  # fmt: skip
    weights = fedavg_weights(tasks.values())
    assert weights == {"site-000": 500.0, "site-001": 250.0, "site-002": 250.0}
    # the weight the aggregator hands FedAvg is H b_i, not the num_samples the site reports
    state = AggregatorState(list(profiles))
    template = {"w": np.zeros(1, dtype=np.float32)}
    state.queue.current = RoundInProgress(
        round=1, model_version=0, tasks=tasks,
        fedavg=RoundAccumulator(list(profiles), template), fedavg_weights=weights,
    )  # fmt: skip
    receiver = DeltaReceiver(state.registry, state.uploads, metrics=None)
    for task, value in zip(tasks.values(), (1.0, 0.0, 0.0), strict=True):
        header = aggregator_pb2.DeltaHeader(
            task_id=task.task_id, site_id=task.site_id, round=1, num_samples=300, steps=5
        )
        receiver._accept(header, {"w": np.full(1, value, dtype=np.float32)}, received=4)
    # deltas 1, 0, 0 weighted 500, 250, 250 average to 0.5 (data sizes 300 each: 1/3)
    assert state.queue.current.fedavg.result()["w"][0] == pytest.approx(0.5)
    assert state.queue.current.num_samples == dict.fromkeys(profiles, 300)


def test_other_work_models_keep_the_run_batch_and_data_size_weights():
    for model in ("local-steps", "data-parallel"):
        run = _run(model)
        profiles = _profiles([1.0, 0.5], [0.01] * 2, [1e9] * 2)
        selection = Selection(site_ids=tuple(profiles))
        planned = simulated_time(run, selection, profiles)
        assert planned.batches is None
        tasks = round_tasks(run, 1, selection, 0, planned.steps, planned.batches)
        assert {t.batch_size for t in tasks.values()} == {20}


def test_work_model_choices_are_listed():
    assert WORK_MODELS == ("local-steps", "data-parallel", "power-split")
    RunConfig(work_model="power-split").validate()
    with pytest.raises(ConfigError, match="local-steps, data-parallel, power-split"):
        RunConfig(work_model="magic").validate()
    with pytest.raises(ValueError, match="local-steps.*data-parallel.*power-split"):
        prefix_round_time_estimates(1.0, np.ones(2), np.zeros(2), work_model="magic")
    with pytest.raises(ValueError, match="batch_size"):
        split_work("power-split", ["a"], [1.0], local_steps=1, tau_s=1.0)


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
    record = RoundRecord(round=1, k=2, site_ids=("site-003", "site-001"))
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
