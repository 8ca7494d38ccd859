"""PowerTripStrategy (powertrip/app/flower) against the policy service's own decision path:
for every federated policy, the same profiles and history give the same sites, whether the
strategy decides or services/policy/selection.py does from the SelectSitesRequest the
service would get. Also: profiles cross as Flower ConfigRecords and bad ones are refused,
centralized policies are refused, an unknown policy name lists the valid ones. FedAvg's
contract (waiting for nodes, k's bounds, a node's faults, the output):
tests/unit/test_flower_fedavg_contract.py.
The same comparison over a real Flower simulation and a real policy service process:
tests/integration/test_flower_simulation.py."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install -e '.[flower]'")

from flwr.app import ArrayRecord, ConfigRecord  # noqa: E402

from powertrip.app.flower import PowerTripStrategy, RoundLog, SiteProfile  # noqa: E402
from powertrip.core.policies import ALIASES, REGISTRY, PolicyError  # noqa: E402
from powertrip.rpc.runsettings import settings_of  # noqa: E402
from powertrip.v1 import common_pb2, policy_pb2  # noqa: E402
from services.policy.config import PolicyConfig  # noqa: E402
from services.policy.selection import select  # noqa: E402
from tests.unit.flower_grid import as_server_app  # noqa: E402

TAU_S, M, SEED = 60.0, 1.5e9, 3
#: the policies that train one site on pooled data: a Flower federation has none
CENTRALIZED = {"centralized", "centralized-green", *ALIASES}


@pytest.fixture
def server_identity():
    """The process identity a ServerApp has (Flower's Message() needs it)."""
    undo = as_server_app()
    yield
    undo()


def select_request(
    policy: str, params: dict, profiles: list[dict], history: list[dict], *, server_round: int,
    update_size_bytes: float, tau_s: float, seed: int, target_accuracy: float = 0.0,
) -> policy_pb2.SelectSitesRequest:  # fmt: skip
    """The SelectSitesRequest the policy service would get for what the strategy saw."""
    return policy_pb2.SelectSitesRequest(
        policy=policy,
        params={k: float(v) for k, v in params.items()},
        sites=[
            common_pb2.SiteProfile(
                site_id=p["site_id"],
                power_fraction=p["power_fraction"],
                distance_miles=p["distance_miles"],
                latency_s=p["latency_s"],
                bandwidth_bytes_per_s=p["bandwidth_bytes_per_s"],
                alive=p.get("alive", True),
                carbon_g_per_kwh=p.get("carbon_g_per_kwh") or 0.0,
            )  # fmt: skip
            for p in profiles
        ],
        history=[
            common_pb2.RoundRecord(
                round=h["round"],
                k=h["k"],
                accuracy=h["accuracy"],
                round_time_s=h["round_time_s"],
                site_ids=h["site_ids"],
                reported_site_ids=h["reported_site_ids"],
                site_train_loss=h["site_train_loss"],
                site_num_samples=h["site_num_samples"],
                site_duration_s=h["site_duration_s"],
            )  # fmt: skip
            for h in history
        ],
        update_size_bytes=update_size_bytes,
        round=server_round,
        settings=settings_of({
            "tau_s": tau_s, "target_accuracy": target_accuracy or None, "seed": seed,
            "comm_directions": 2, "estimator": "paper", "work_model": "local-steps",
        }),
    )  # fmt: skip


def _profiles(n: int = 30, seed: int = 1) -> list[SiteProfile]:
    rng = np.random.default_rng(seed)
    distance = rng.uniform(100, 10_000, n)
    return [
        SiteProfile(
            site_id=f"site-{i:03d}",
            power_fraction=float(rng.uniform(0.1, 1.0)),
            distance_miles=float(distance[i]),
            latency_s=float(distance[i] * 8e-6),
            bandwidth_bytes_per_s=float(1.25e11 / distance[i]),
            alive=bool(i != 7),
            carbon_g_per_kwh=float(rng.uniform(2, 720)),  # what lowcarb ranks by
        )  # fmt: skip
        for i in range(n)
    ]


def _history(profiles: list[SiteProfile], rounds: int = 3) -> list[RoundLog]:
    """Made-up finished rounds, with what each site reported (Oort reads it)."""
    rng = np.random.default_rng(5)
    out = []
    for r in range(1, rounds + 1):
        chosen = [p.site_id for p in profiles[r : r + 4 + r]]
        out.append(RoundLog(
            round=r, site_ids=chosen, node_ids=list(range(len(chosen))),
            predicted_round_time_s=100.0, explanation={}, round_time_s=90.0 + 20 * r,
            accuracy=0.1 * r, reported_site_ids=chosen,
            site_train_loss=rng.uniform(0.5, 3.0, len(chosen)).tolist(),
            site_num_samples=rng.integers(100, 900, len(chosen)).tolist(),
            site_duration_s=rng.uniform(50, 150, len(chosen)).tolist(),
        ))  # fmt: skip
    return out


def _as_dicts(history: list[RoundLog]) -> list[dict]:
    keys = ("round", "accuracy", "round_time_s", "site_ids", "reported_site_ids",
            "site_train_loss", "site_num_samples", "site_duration_s")  # fmt: skip
    return [{"k": len(h.site_ids), **{k: getattr(h, k) for k in keys}} for h in history]


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - CENTRALIZED))
def test_every_federated_policy_chooses_as_the_policy_service_does(name):
    profiles, history = _profiles(), _history(_profiles())
    strategy = PowerTripStrategy(name, tau_s=TAU_S, update_size_bytes=M, seed=SEED)
    strategy.rounds = history
    ctx = strategy.context(profiles, server_round=4, model_bytes=1.0)
    mine = ctx.table.ids[strategy.decide(ctx).order].tolist()
    request = select_request(
        name, {}, [vars(p) for p in profiles], _as_dicts(history), server_round=4,
        update_size_bytes=M, tau_s=TAU_S, seed=SEED,
    )  # fmt: skip
    chosen = select(request, PolicyConfig())
    assert mine == chosen.site_ids(chosen.decision.order)
    assert "site-007" not in mine  # a profile that says it is not alive is never chosen


def test_policy_parameters_reach_the_policy_and_text_that_is_no_number_is_refused():
    profiles = _profiles()
    for params in ({"k": 5}, {"k": 9}):
        strategy = PowerTripStrategy("static", params, tau_s=TAU_S, update_size_bytes=M)
        ctx = strategy.context(profiles, server_round=1, model_bytes=1.0)
        assert strategy.decide(ctx).k == params["k"]
    strategy = PowerTripStrategy("adaptive", {"probe_cost": "0.2"}, update_size_bytes=M)
    assert strategy.params == {"probe_cost": 0.2}
    with pytest.raises(ValueError, match="probe_cost: 'cheap' is not a number"):
        PowerTripStrategy("adaptive", {"probe_cost": "cheap"}, update_size_bytes=M)


def test_a_profile_crosses_as_a_config_record_and_a_bad_one_is_refused():
    profile = _profiles(1)[0]
    assert SiteProfile.from_record(profile.to_record()) == profile
    record = profile.to_record()
    record["power_fraction"] = 1.5
    with pytest.raises(ValueError, match="power_fraction must be in"):
        SiteProfile.from_record(record)
    record = profile.to_record()
    del record["bandwidth_bytes_per_s"]
    with pytest.raises(ValueError, match="lacks bandwidth_bytes_per_s"):
        SiteProfile.from_record(record)


def test_centralized_and_unknown_policies_are_refused_by_name_at_construction():
    """Before any node connects (they used to surface in round 1, after the wait)."""
    for name in ("centralized", "centralized-25", "centralized-green"):
        with pytest.raises(ValueError, match="pooled data.*federated policy: powertrip, adaptive"):
            PowerTripStrategy(name)
    with pytest.raises(PolicyError, match="powertrip"):
        PowerTripStrategy("no-such-policy")


def test_a_mistyped_or_out_of_range_parameter_is_refused_at_construction():
    """With the words `powertrip run` and the policy service use."""
    with pytest.raises(
        PolicyError,
        match=r"policy 'powertrip': unknown parameter\(s\) k_0; "
        r"allowed: below_share, k0, m_ref_gb",
    ):
        PowerTripStrategy("powertrip", {"k_0": 4})
    with pytest.raises(PolicyError, match="policy 'static': k must be a whole number"):
        PowerTripStrategy("static", {"k": 2.5})
    PowerTripStrategy("static", {"k": 3})  # a valid one is taken
    with pytest.raises(ValueError, match="clock 'sundial' is not one of simulated, wall"):
        PowerTripStrategy(clock="sundial")


def test_the_simulated_clock_charges_the_straggler_of_the_time_model():
    profiles = _profiles()
    strategy = PowerTripStrategy("static", {"k": 4}, tau_s=TAU_S, update_size_bytes=M)
    ctx = strategy.context(profiles, 1, 1.0)
    decision = strategy.decide(ctx)
    chosen = [profiles[i] for i in decision.order]
    expected = max(
        TAU_S / p.power_fraction + 2 * (p.latency_s + M / p.bandwidth_bytes_per_s) for p in chosen
    )
    charged = max(strategy.site_times_s(ctx, decision.order))
    assert math.isclose(charged, expected, rel_tol=1e-12)


def test_a_round_with_no_profiles_is_recorded_with_its_reason_and_is_no_policy_round(
    server_identity,
):
    """The nodes are connected but none answers the profile query in time (a loaded
    machine): after the start-up wait configure_train sends no message, Flower's
    aggregate_train for that round must not fail, and the round is recorded (k 0, its
    reason) without counting as a round of the policy's."""

    class SilentNodes:
        asked = 0

        def get_node_ids(self):
            return [1, 2]

        def push_messages(self, messages):
            SilentNodes.asked += 1
            return [f"{SilentNodes.asked}-{i}" for i, _ in enumerate(messages)]

        def pull_messages(self, message_ids):
            return []

    strategy = PowerTripStrategy(
        "powertrip", tau_s=TAU_S, update_size_bytes=M, profile_timeout_s=0.02,
        startup_timeout_s=0.2,
    )  # fmt: skip
    started = time.monotonic()
    assert list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), SilentNodes())) == []
    assert time.monotonic() - started >= 0.2  # the start-up wait, for the same query
    assert strategy.aggregate_train(1, []) == (None, None)
    assert strategy.aggregate_evaluate(1, []) is None
    [idle] = strategy.rounds
    assert idle.site_ids == [] and idle.reason == "no training: no node gave a usable profile"
    assert set(idle.dropped) == {1, 2} and strategy.trained_rounds == []
    assert strategy.context(_profiles(), 2, 1.0).round == 1  # the policy's first round still
    # a round that trained, then a silent one: the policy's history is the trained one
    strategy.rounds.append(
        RoundLog(round=2, site_ids=["s"], node_ids=[7], predicted_round_time_s=1.0, explanation={},
                 round_time_s=5.0, sim_time_s=5.0)
    )  # fmt: skip
    assert list(strategy.configure_train(3, ArrayRecord(), ConfigRecord(), SilentNodes())) == []
    assert strategy.aggregate_train(3, []) == (None, None)
    assert [r.round for r in strategy.trained_rounds] == [2]
    assert strategy.rounds[-1].sim_time_s == 5.0 and strategy.rounds[-1].round_time_s == 0.0
    ctx = strategy.context(_profiles(), 4, 1.0)
    assert ctx.round == 2 and [h.round for h in ctx.history] == [2]


def test_an_estimator_the_policy_would_not_use_is_refused_at_construction():
    """adaptive times its rounds with the clock's estimator whatever it is given: unset, the
    strategy takes the policy's own; named otherwise, it says so rather than ignore it."""
    assert PowerTripStrategy("adaptive", update_size_bytes=M).estimator == "clock"
    assert PowerTripStrategy("adaptive", estimator="clock").estimator == "clock"
    with pytest.raises(
        ValueError,
        match="policy 'adaptive' estimates round times with the 'clock' estimator whatever it "
        "is given, so estimator 'paper' would not be used",
    ):
        PowerTripStrategy("adaptive", estimator="paper", update_size_bytes=M)
    assert PowerTripStrategy("powertrip").estimator == "paper"  # the services' default
    assert PowerTripStrategy("powertrip", estimator="clock").estimator == "clock"
    with pytest.raises(ValueError, match="estimator 'guess' is not one of paper, clock"):
        PowerTripStrategy("adaptive", estimator="guess")
