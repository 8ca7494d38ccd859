"""PowerTripStrategy keeps Flower's FedAvg contract (issue 61), run through Flower's own
`Strategy.start` loop over a stub Grid (tests/unit/flower_grid.py: Flower's Grid interface,
real ClientApps called in-process, nodes that connect after the ServerApp has started):

* round 1 waits for `min_available_nodes`, on every one of 10 repeats;
* `fraction_train` and `min_train_nodes` bound k, and values that cannot are refused;
* a node's duplicate or malformed profile drops that node for the round, not the run;
* a run whose accuracy never reaches the policy warns once, naming the key it reads;
* each round's INFO line carries k, the predicted round time and the policy's reason;
* decisions.jsonl is written, and an earlier run's is never overwritten;
* no FedAvg private method is called.

A real Flower simulation of the same (Ray): tests/integration/test_flower_example.py."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install -e '.[flower]'")

from flwr.app import MetricRecord  # noqa: E402

from powertrip.app.flower import PowerTripStrategy, SiteProfile, read_decisions  # noqa: E402
from powertrip.core.timemodel import prefix_round_time_estimates  # noqa: E402
from tests.unit.flower_grid import (  # noqa: E402
    FlowerLog,
    StubGrid,
    as_server_app,
    client_app,
    nodes,
    profile_from_index,
    tiny_arrays,
)

REPO = Path(__file__).resolve().parents[2]
TAU = 60.0  # the strategies' tau_s below


@pytest.fixture(autouse=True)
def server_identity():
    undo = as_server_app()
    yield
    undo()


@pytest.fixture
def flower_log():
    handler = FlowerLog()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def strategy(policy: str = "powertrip", params: dict | None = None, **options):
    made = PowerTripStrategy(policy, params, tau_s=TAU, fraction_evaluate=0.0, **options)
    made.node_poll_s = 0.005
    return made


def accuracy(server_round: int, _arrays) -> MetricRecord:
    return MetricRecord({"accuracy": 0.1 * server_round})


@pytest.mark.parametrize("repeat", range(10))
def test_round_one_waits_for_min_available_nodes_that_connect_late(repeat):
    """The nodes connect one by one after start() (as in the issue: 0 nodes at t = 0, all
    of them 0.5 s later). Round 1 asks all min_available_nodes of them for profiles and
    trains; with the `all` policy it trains exactly min_available_nodes nodes."""
    n = 6
    late = [0.01 * (i + 1) + 0.002 * repeat for i in range(n)]
    for policy, trained in (("powertrip", None), ("all", n)):
        grid = StubGrid(client_app(), nodes(n), online_after_s=late)
        assert list(grid.get_node_ids()) == []  # nothing connected when the ServerApp starts
        run = strategy(policy, min_available_nodes=n)
        run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
        first = run.rounds[0]
        assert first.round == 1 and len(first.profiles) == n and first.delivered >= 1
        assert len(grid.trained()) == (trained or len(first.site_ids))
        assert first.delivered == len(first.site_ids)


def test_fraction_train_caps_k_and_min_train_nodes_raises_it():
    n = 10
    # the `all` policy wants 10: fraction_train=0.3 caps it at 3, the first 3 of its ranking
    grid = StubGrid(client_app(), nodes(n))
    run = strategy("all", fraction_train=0.3, min_available_nodes=n)
    run.start(grid, tiny_arrays(), num_rounds=2, evaluate_fn=accuracy)
    assert [len(r.site_ids) for r in run.rounds] == [3, 3]
    assert len(grid.trained()) == 6
    assert "capped at 3 by fraction_train=0.3" in run.rounds[0].reason
    # static k=2 is raised to min_train_nodes=5 with the fastest remaining sites
    grid = StubGrid(client_app(), nodes(n))
    run = strategy("static", {"k": 2}, min_train_nodes=5, min_available_nodes=n)
    run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    first = run.rounds[0]
    assert len(first.site_ids) == 5 and "raised to 5 by min_train_nodes=5" in first.reason
    ctx = run.context(first.profiles, 1, model_bytes=60.0)  # tiny_arrays: 15 float32
    rows = ctx.table.rows_of(first.site_ids)
    # predicted = charged: the library's time model of the 5 (the simulated clock's charge)
    charge = prefix_round_time_estimates(
        TAU, ctx.table.power[rows], ctx.table.comm_s[rows], "clock", "local-steps"
    )[-1]
    assert first.predicted_round_time_s == pytest.approx(charge, rel=1e-12)
    assert first.round_time_s == pytest.approx(first.predicted_round_time_s, rel=1e-12)
    # the policy's own estimate (its estimator's T-hat) is kept beside it
    assert first.policy_estimate_s == pytest.approx(run.decide(ctx).predicted_round_time_s)
    # min_train_nodes wins over fraction_train, as in FedAvg
    grid = StubGrid(client_app(), nodes(n))
    run = strategy("all", fraction_train=0.1, min_train_nodes=4, min_available_nodes=n)
    run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    assert len(run.rounds[0].site_ids) == 4
    # within the bounds, the policy's k stands
    grid = StubGrid(client_app(), nodes(n))
    run = strategy("static", {"k": 3}, fraction_train=0.5, min_train_nodes=2)
    run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    assert len(run.rounds[0].site_ids) == 3 and "fraction_train" not in run.rounds[0].reason


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fraction_train": 1.5}, r"fraction_train must be in \[0, 1\], got 1.5"),
        ({"fraction_train": -0.1}, r"fraction_train must be in \[0, 1\]"),
        ({"min_train_nodes": 0}, "min_train_nodes must be a whole number >= 1, got 0"),
        ({"min_train_nodes": 2.5}, "min_train_nodes must be a whole number >= 1"),
        ({"min_available_nodes": -1}, "min_available_nodes must be a whole number >= 0"),
        ({"accuracy_key": ""}, "accuracy_key must name a MetricRecord key"),
    ],
)
def test_sampling_options_that_cannot_bound_k_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        PowerTripStrategy("powertrip", **options)


def test_min_available_nodes_defaults_to_fedavgs():
    from flwr.serverapp.strategy import FedAvg

    assert PowerTripStrategy().min_available_nodes == FedAvg().min_available_nodes == 2


def test_a_duplicate_site_id_drops_a_node_and_the_run_finishes(flower_log):
    """Every node runs one ClientApp; two of them claim the same site id (the README's old
    fixed `site_id="site-003"`). The lower node id keeps it; the other sits each round out
    with a warning, and the run goes on."""
    configs = nodes(5)
    configs[1]["site-id"] = configs[3]["site-id"] = "site-003"
    grid = StubGrid(client_app(), configs)
    run = strategy("all", min_available_nodes=5)
    result = run.start(grid, tiny_arrays(), num_rounds=2, evaluate_fn=accuracy)
    dup = grid.node_ids[3]
    assert len(result.train_metrics_clientapp) == 2
    for r in run.rounds:
        assert len(r.profiles) == 4 and dup not in r.node_ids
        assert r.dropped == {dup: f"site_id 'site-003' is node {grid.node_ids[1]}'s too"}
    warnings = flower_log.lines(logging.WARNING)
    assert f"PowerTrip: node {dup} sits out round 1: site_id 'site-003' is node" in warnings[-2]


def test_a_malformed_profile_or_a_failing_node_drops_only_that_node(flower_log):
    def profile(context):
        i = int(context.node_config["partition-id"])
        if i == 1:
            return SiteProfile(power_fraction=1.7, latency_s=0.01, bandwidth_bytes_per_s=1e8)
        if i == 2:
            raise RuntimeError("no power reading")
        return profile_from_index(context)

    grid = StubGrid(client_app(profile), nodes(4))
    run = strategy("all", min_available_nodes=4)
    run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    first = run.rounds[0]
    assert sorted(first.node_ids) == [grid.node_ids[0], grid.node_ids[3]]
    assert "power_fraction must be in [0, 1]" in first.dropped[grid.node_ids[1]]
    assert "no power reading" in first.dropped[grid.node_ids[2]]


def test_a_run_without_accuracy_warns_once_naming_the_key(flower_log):
    grid = StubGrid(client_app(), nodes(4))
    run = strategy("powertrip", min_available_nodes=4, accuracy_key="acc")
    run.start(grid, tiny_arrays(), num_rounds=3, evaluate_fn=accuracy)  # reports "accuracy"
    said = [line for line in flower_log.lines(logging.WARNING) if "no accuracy" in line]
    assert len(said) == 1
    assert "MetricRecord key 'acc'" in said[0] and "keys seen: accuracy" in said[0]
    # with the key it reads, no warning, and the policy's history has the accuracy
    flower_log.records.clear()
    grid = StubGrid(client_app(), nodes(4))
    run = strategy("powertrip", min_available_nodes=4)
    run.start(grid, tiny_arrays(), num_rounds=2, evaluate_fn=accuracy)
    assert not [line for line in flower_log.lines(logging.WARNING) if "no accuracy" in line]
    assert [r.accuracy for r in run.rounds] == pytest.approx([0.1, 0.2])


def test_the_info_line_and_decisions_jsonl_and_no_overwrite(tmp_path, flower_log):
    out = tmp_path / "run"
    grid = StubGrid(client_app(), nodes(5))
    run = strategy("powertrip", min_available_nodes=5, out_dir=out)
    run.start(grid, tiny_arrays(), num_rounds=3, evaluate_fn=accuracy)
    line = re.compile(
        r"configure_train: PowerTrip powertrip chose k=(\d+) of 5 nodes, predicted round "
        r"time [\d.]+ s \(the policy's paper estimate [\d.]+ s\), outer step fedavg \(the "
        r"average as is\): \S.*"
    )
    said = [m for m in map(line.fullmatch, flower_log.lines(logging.INFO)) if m]
    assert [int(m.group(1)) for m in said] == [len(r.site_ids) for r in run.rounds]
    decided = read_decisions(out / "decisions.jsonl")
    assert [d["round"] for d in decided] == [1, 2, 3]
    assert [d["accuracy"] for d in decided] == pytest.approx([0.1, 0.2, 0.3])
    assert all(d["reason"] and d["k"] == len(d["site_ids"]) for d in decided)
    assert decided[2]["history"][1]["site_ids"] == decided[1]["site_ids"]
    assert (out / "rounds.csv").read_text().count("\n") == 4
    assert all(d["outer_step"] == {"optimizer": "fedavg", "lr": 0.7, "momentum": 0.9}
               for d in decided)  # fmt: skip
    header, first_row = (out / "rounds.csv").read_text().splitlines()[:2]
    assert header.endswith("outer_optimizer,outer_lr,outer_momentum")
    assert first_row.endswith(",fedavg,0.7,0.9")
    json.loads((out / "decisions.jsonl").read_text().splitlines()[0])  # strict JSON
    # a second run into the same directory is refused before round 1, files untouched
    before = (out / "decisions.jsonl").read_text()
    grid = StubGrid(client_app(), nodes(5))
    again = strategy("powertrip", min_available_nodes=5, out_dir=out)
    with pytest.raises(FileExistsError, match="already holds decisions.jsonl"):
        again.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    assert grid.sent == [] and (out / "decisions.jsonl").read_text() == before


def test_no_private_fedavg_method_is_called():
    """Only Flower's public API: no `_construct_messages`, `_check_and_log_replies`, ..."""
    source = "\n".join(p.read_text() for p in (REPO / "powertrip").rglob("*.py"))
    flower = "\n".join(p.read_text() for p in (REPO / "powertrip/app/flower").rglob("*.py"))
    assert "_construct_messages" not in source
    assert not re.search(r"super\(\)\._(?!_)|self\._check_and_log_replies", flower)


def test_site_ids_default_per_node_and_profiles_come_from_node_config():
    def bare(context):  # a profile without a site id, as the README's snippet gives it
        return SiteProfile(power_fraction=0.5, latency_s=0.01, bandwidth_bytes_per_s=1e8)

    grid = StubGrid(client_app(bare), nodes(4))
    run = strategy("all", min_available_nodes=4)
    run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    # a simulation's nodes are named by their partition, the same in every run
    assert sorted(p.site_id for p in run.rounds[0].profiles) == [f"site-{i:03d}" for i in range(4)]
    from powertrip.app.flower.profiles import node_site_id

    bare_node = SimpleNamespace(node_id=4242, node_config={})  # deployed, no site-id given
    assert node_site_id(bare_node) == "node-4242"
    named = SimpleNamespace(node_id=1, node_config={"site-id": "lyon", "partition-id": 3})
    assert node_site_id(named) == "lyon"
    wide = SimpleNamespace(node_id=1, node_config={"partition-id": 7, "num-partitions": 1000})
    assert node_site_id(wide) == "site-007"
    config = {"site-id": "lyon", "power-fraction": 0.4, "latency-s": 0.007,
              "bandwidth-bytes-per-s": 1.5e8, "alive": "false"}  # fmt: skip
    profile = SiteProfile.from_node_config(config)
    assert (profile.site_id, profile.power_fraction, profile.alive) == ("lyon", 0.4, False)
    assert profile.distance_miles == pytest.approx(0.007 * 2.99792458e8 * 2 / 3 / 1609.344)
    with pytest.raises(ValueError, match="node_config: profile lacks latency_s"):
        SiteProfile.from_node_config({"power-fraction": 0.4, "bandwidth-bytes-per-s": 1e8})
    # serve_profile() alone reads node_config; a node without it sits out, named
    configs = nodes(3)
    configs[0].update({"power-fraction": 0.9, "latency-s": 0.001, "bandwidth-bytes-per-s": 1e9})
    configs[1].update({"power-fraction": 0.5, "latency-s": 0.02, "bandwidth-bytes-per-s": 1e8})
    grid = StubGrid(client_app(None), configs)
    run = strategy("all", min_available_nodes=3)
    run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    assert len(run.rounds[0].profiles) == 2
    assert "needs power-fraction, latency-s" in run.rounds[0].dropped[grid.node_ids[2]]


@pytest.mark.parametrize("optimizer", ["fedavg", "nesterov", "fedavgm"])
def test_the_outer_step_moves_the_model_by_the_averaged_delta(optimizer):
    """Every node adds its index to the model, so each round's averaged delta is the
    sample-weighted mean index d. FedAvg moves the model by d a round; Nesterov (lr 0.7,
    momentum 0.9) by lr x (d + mu x b_t), with b_t = d (1 + mu + ... + mu^(t-1)); FedAvgM
    by lr x b_t."""
    n, rounds, lr, mu = 4, 3, 0.7, 0.9
    grid = StubGrid(client_app(), nodes(n))
    run = strategy("all", min_available_nodes=n, outer_optimizer=optimizer)
    result = run.start(grid, tiny_arrays(), num_rounds=rounds, evaluate_fn=accuracy)
    d = sum(i * (10 + i) for i in range(n)) / sum(10 + i for i in range(n))
    if optimizer == "fedavg":
        expected = rounds * d
    else:
        expected, buffer = 0.0, 0.0
        for _ in range(rounds):
            buffer = mu * buffer + d
            expected += lr * (d + mu * buffer if optimizer == "nesterov" else buffer)
    for array in result.arrays.to_numpy_ndarrays():
        np.testing.assert_allclose(array, expected, rtol=1e-5)


def test_a_bad_outer_setting_is_refused_by_name():
    with pytest.raises(ValueError, match="must be one of fedavg, nesterov, fedavgm"):
        strategy(outer_optimizer="adam")
    with pytest.raises(ValueError, match=r"outer_momentum: must be in \[0, 1\)"):
        strategy(outer_optimizer="nesterov", outer_momentum=1.0)


RAY_TRACEBACK = (  # what a ClientApp's exception looks like through Ray's actor, 1.5-2 kB
    "\nException ClientAppException occurred. Message: Traceback (most recent call last):\n"
    + '  File "/site-packages/flwr/simulation/ray_transport/ray_actor.py", line 63, in run\n'
    + "    out_message = app(message=message, context=context)\n" * 20
    + '  File "app.py", line 12, in profile\n'
    + "RuntimeError: power meter unreachable\n"
)


def test_a_node_that_fails_is_one_warning_line_and_its_traceback_goes_to_debug(
    tmp_path, flower_log
):
    def flaky(context):
        if int(context.node_config["partition-id"]) in (1, 2):
            raise RuntimeError(RAY_TRACEBACK)
        return profile_from_index(context)

    grid = StubGrid(client_app(flaky), nodes(6))
    run = strategy("powertrip", min_available_nodes=6, out_dir=tmp_path / "run")
    run.start(grid, tiny_arrays(), num_rounds=4, evaluate_fn=accuracy)
    warned = [line for line in flower_log.lines(logging.WARNING) if "sits out" in line]
    assert len(warned) == 8  # two nodes, four rounds
    assert all("\n" not in w and len(w) < 200 for w in warned)
    assert warned[0].endswith("no profile: RuntimeError: power meter unreachable")
    debug = [r.getMessage() for r in flower_log.records if r.levelno == logging.DEBUG]
    assert any("ray_actor.py" in line for line in debug)  # the whole answer, at DEBUG
    decided = read_decisions(tmp_path / "run" / "decisions.jsonl")
    assert all(len(why) < 200 for d in decided for why in d["dropped"].values())
    info_lines = sum(m.count("\n") + 1 for m in flower_log.lines(logging.INFO))
    assert info_lines < 100, info_lines


def test_a_cold_start_does_not_lose_round_one(tmp_path):
    """Nodes that take 0.3 s to answer their first profile query (Ray's workers starting)
    against a 0.1 s profile timeout: round 1 asks again until min_available_nodes have
    answered, and trains among all of them; decisions.jsonl has every round."""
    n = 4
    grid = StubGrid(client_app(), nodes(n), profile_delay_s=[0.3] * n)
    run = strategy("powertrip", min_available_nodes=n, profile_timeout_s=0.1,
                   startup_timeout_s=10.0, out_dir=tmp_path / "run")  # fmt: skip
    run.start(grid, tiny_arrays(), num_rounds=2, evaluate_fn=accuracy)
    assert [r.round for r in run.rounds] == [1, 2]
    assert len(run.rounds[0].profiles) == n and run.rounds[0].site_ids
    decided = read_decisions(tmp_path / "run" / "decisions.jsonl")
    assert [d["round"] for d in decided] == [1, 2]


def test_a_slow_node_trains_on_its_last_profile_and_is_not_waited_for_again():
    """Node 3 answers in time in round 1, then takes longer than the timeout: from round 2
    its round-1 profile stands in (at most profile_max_age_rounds old) and the strategy no
    longer waits the full timeout for it while the others have answered; past that age it
    sits out."""
    n = 4
    grid = StubGrid(client_app(), nodes(n))
    run = strategy("all", min_available_nodes=n, profile_timeout_s=0.5, profile_max_age_rounds=1)
    run.start(grid, tiny_arrays(), num_rounds=1, evaluate_fn=accuracy)
    slow = grid.node_ids[3]
    grid.profile_delay_s[slow] = 5.0
    started = time.monotonic()
    found, dropped = run.profiles(grid, grid.node_ids, server_round=2)
    assert slow in found and not dropped  # the round-1 profile stands in
    assert time.monotonic() - started < 1.0  # waited its 0.5 s once, at most
    started = time.monotonic()
    found, dropped = run.profiles(grid, grid.node_ids, server_round=3)
    assert time.monotonic() - started < 0.3  # not waited for: it missed the last deadline
    assert slow not in found and dropped[slow] == "no profile within 0.5 s"  # 2 rounds old
