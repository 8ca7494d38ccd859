"""`PowerTripStrategy`: Flower's FedAvg with PowerTrip choosing which nodes train each round.

Each round it
1. asks every connected node for its site profile (a `query` message, profiles.py): power,
   distance, latency, bandwidth;
2. builds the same `Context` the policy service builds from a SelectSites request (the site
   table with Eq. 3's communication times for update size M, tau, the history of finished
   rounds) and calls the named policy's `select`: the library code the service runs, not a
   copy, so the choice equals the service's for the same profiles and history (tested);
3. sends the train messages to the chosen nodes only, and FedAvg-aggregates their replies;
4. records the round for the policy's history: k, the sites in rank order, the round time
   and the accuracy (a centralized `evaluate_fn`'s, else the federated evaluation's).

The round time the policy learns from is, with `clock="simulated"` (the default), the
PowerTrip time model's charge for the chosen sites, as the services' simulated clock charges
it (local-steps work model: max over the chosen sites of tau / p_i + T_comm,i, Eq. 3), so a
simulation run gives time-to-accuracy curves in the same terms as `powertrip compare`. With
`clock="wall"` it is the measured time from configure_train to aggregate_train (a Flower
deployment whose nodes really are far apart). Where the two differ from the services: no
deadline (a node that does not answer is Flower's failure, not a missed deadline), no dead
sites (a profile's `alive` says it), and evaluation is whatever the ServerApp gives.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.server import Grid
from flwr.serverapp.strategy import FedAvg

from powertrip.app.flower.profiles import PROFILE_KEY, PROFILE_QUERY, SiteProfile
from powertrip.core.policies import CENTRALIZED, Context, Decision, PastRound, SiteTable
from powertrip.core.policies import get_policy as _get_policy
from powertrip.core.policies.base import ESTIMATORS, param_number
from powertrip.core.timemodel import WORK_MODELS

CLOCKS = ("simulated", "wall")


@dataclass
class RoundLog:
    """One round as the strategy saw it: what the policy decided and what came of it."""

    round: int
    site_ids: list[str]  # the chosen sites, in the policy's rank order
    node_ids: list[int]
    predicted_round_time_s: float
    explanation: dict
    round_time_s: float = math.nan
    sim_time_s: float = math.nan  # cumulative, on the strategy's clock
    accuracy: float = math.nan
    delivered: int = 0
    profiles: list[SiteProfile] = field(default_factory=list)  # what the policy saw
    #: each chosen site's own time on the time model, in rank order (`site_times_s`)
    site_time_s: list[float] = field(default_factory=list)
    # what each site that delivered reported (the services' RoundRecord; Oort reads them)
    reported_site_ids: list[str] = field(default_factory=list)
    site_train_loss: list[float] = field(default_factory=list)
    site_num_samples: list[int] = field(default_factory=list)
    site_duration_s: list[float] = field(default_factory=list)

    def past_round(self) -> PastRound:
        return PastRound(
            round=self.round,
            k=len(self.site_ids),
            accuracy=0.0 if math.isnan(self.accuracy) else self.accuracy,
            round_time_s=self.round_time_s,
            site_ids=tuple(self.site_ids),
            reported_site_ids=tuple(self.reported_site_ids),
            site_train_loss=tuple(self.site_train_loss),
            site_num_samples=tuple(self.site_num_samples),
            site_duration_s=tuple(self.site_duration_s),
        )


class PowerTripStrategy(FedAvg):
    """FedAvg whose train sample is a PowerTrip policy's choice (see the module docstring).

    Parameters beyond FedAvg's:
      policy: a PowerTrip policy by name (`powertrip policies`); centralized ones are refused
        (they train one site on pooled data, which a Flower federation does not have).
      policy_params: its parameters, e.g. {"k": 5} or {"gain": "separable"}.
      tau_s: modelled local work at full power (seconds), the policy's tau.
      update_size_bytes: M in Eq. 3; default: the bytes of the model's arrays.
      comm_directions: 2 (model down and update up, the services' default) or 1.
      estimator, work_model: as the services' (`paper`/`clock`; `local-steps`, ...).
      seed: the policy's seed (random-k and Oort draw from (seed, round)).
      clock: `simulated` (the time model's charge) or `wall` (measured).
      accuracy_key: the MetricRecord key that holds accuracy (centralized evaluation first).
      loss_key: the train reply's MetricRecord key with the node's mean training loss (Oort's
        utility reads it, with the FedAvg weight `weighted_by_key`).
      target_accuracy: reported to the policy as the services do (it never stops the run).
    """

    def __init__(
        self,
        policy: str = "powertrip",
        policy_params: Mapping[str, float | str] | None = None,
        *,
        tau_s: float = 60.0,
        update_size_bytes: float | None = None,
        comm_directions: int = 2,
        estimator: str = "paper",
        work_model: str = "local-steps",
        seed: int = 0,
        clock: str = "simulated",
        accuracy_key: str = "accuracy",
        loss_key: str = "train_loss",
        target_accuracy: float = math.inf,
        profile_timeout_s: float = 60.0,
        **fedavg_options,
    ) -> None:
        fedavg_options.setdefault("min_train_nodes", 1)
        fedavg_options.setdefault("min_available_nodes", 1)
        super().__init__(**fedavg_options)
        self.policy = _get_policy(policy)  # an unknown name fails here, listing the valid ones
        self.policy_name = policy
        self.params = {k: param_number(k, v) for k, v in (policy_params or {}).items()}
        if not (math.isfinite(tau_s) and tau_s > 0):
            raise ValueError(f"tau_s must be > 0, got {tau_s}")
        if comm_directions not in (1, 2):
            raise ValueError(f"comm_directions must be 1 or 2, got {comm_directions}")
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator {estimator!r} is not one of {', '.join(ESTIMATORS)}")
        if work_model not in WORK_MODELS:
            raise ValueError(f"work_model {work_model!r} is not one of {', '.join(WORK_MODELS)}")
        if clock not in CLOCKS:
            raise ValueError(f"clock {clock!r} is not one of {', '.join(CLOCKS)}")
        self.tau_s = float(tau_s)
        self.update_size_bytes = update_size_bytes
        self.comm_directions = comm_directions
        self.estimator = estimator
        self.work_model = work_model
        self.seed = int(seed)
        self.clock = clock
        self.accuracy_key = accuracy_key
        self.loss_key = loss_key
        self.target_accuracy = target_accuracy
        self.profile_timeout_s = profile_timeout_s
        self.rounds: list[RoundLog] = []
        self._round_started = 0.0

    # ---- the decision ----------------------------------------------------------------
    def summary(self) -> None:
        super().summary()
        log(INFO, "\t└──> PowerTrip: policy %s %s, clock %s, tau %.3g s",
            self.policy_name, self.params or "", self.clock, self.tau_s)  # fmt: skip

    def profiles(self, grid: Grid) -> dict[int, SiteProfile]:
        """Every connected node's profile, asked now (node id -> profile)."""
        node_ids = sorted(grid.get_node_ids())
        query = [Message(RecordDict(), dst_node_id=n, message_type=PROFILE_QUERY) for n in node_ids]
        found: dict[int, SiteProfile] = {}
        for reply in grid.send_and_receive(query, timeout=self.profile_timeout_s):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log(INFO, "PowerTrip: node %d gave no profile: %s", node, reply.error.reason)
                continue
            try:
                found[node] = SiteProfile.from_record(reply.content[PROFILE_KEY])
            except (KeyError, ValueError) as exc:
                log(INFO, "PowerTrip: node %d sent a bad profile: %s", node, exc)
        sites = [p.site_id for p in found.values()]
        if len(set(sites)) != len(sites):
            raise ValueError(f"two nodes report the same site_id: {sorted(sites)}")
        return found

    def context(self, profiles: list[SiteProfile], server_round: int, model_bytes: float):
        """The policy's Context, as services/policy/selection.py builds it from a request."""
        size = model_bytes if self.update_size_bytes is None else self.update_size_bytes
        table = SiteTable.build(
            ids=[p.site_id for p in profiles],
            power=[p.power_fraction for p in profiles],
            distance_miles=[p.distance_miles for p in profiles],
            latency_s=[p.latency_s for p in profiles],
            bandwidth_bytes_per_s=[p.bandwidth_bytes_per_s for p in profiles],
            update_size_bytes=size,
            directions=self.comm_directions,
            alive=[p.alive for p in profiles],
        )
        return Context(
            table=table,
            update_size_bytes=size,
            tau_s=self.tau_s,
            history=tuple(r.past_round() for r in self.rounds),
            target_accuracy=self.target_accuracy,
            seed=self.seed,
            round=server_round,
            estimator=self.estimator,
            params=self.params,
            work_model=self.work_model,
        )

    def decide(self, ctx: Context) -> Decision:
        decision = self.policy.select(ctx)
        if decision.mode == CENTRALIZED:
            raise ValueError(
                f"policy {self.policy_name!r} trains one site on pooled data (centralized): "
                "a Flower federation has no pooled data; choose a federated policy"
            )
        return decision

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        by_node = self.profiles(grid)
        if not by_node:
            log(INFO, "PowerTrip: no node reported a profile within %.0f s; no training in "
                "round %d", self.profile_timeout_s, server_round)  # fmt: skip
            return []
        nodes = sorted(by_node, key=lambda n: by_node[n].site_id)
        profiles = [by_node[n] for n in nodes]
        model_bytes = float(sum(a.numpy().nbytes for a in arrays.values()))
        ctx = self.context(profiles, server_round, model_bytes)
        decision = self.decide(ctx)
        chosen = [nodes[i] for i in decision.order.tolist()]
        self.rounds.append(RoundLog(
            round=server_round,
            site_ids=[by_node[n].site_id for n in chosen],
            node_ids=chosen,
            predicted_round_time_s=decision.predicted_round_time_s,
            explanation=decision.explanation,
            profiles=profiles,
            site_time_s=self.site_times_s(ctx, decision.order),
        ))  # fmt: skip
        log(INFO, "configure_train: PowerTrip %s chose k=%d of %d sites: %s",
            self.policy_name, len(chosen), len(nodes),
            ", ".join(self.rounds[-1].site_ids[:10]))  # fmt: skip
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        self._round_started = time.monotonic()
        return self._construct_messages(record, chosen, MessageType.TRAIN)

    # ---- what came of it -------------------------------------------------------------
    def site_times_s(self, ctx: Context, order: np.ndarray) -> list[float]:
        """Each chosen site's own time on the time model (local-steps: tau / p_i +
        T_comm,i, Eq. 3), in rank order; the round's charge is their maximum, the
        straggler's, as the services' simulated clock charges a round (no aggregation)."""
        t, order = ctx.table, np.asarray(order, dtype=np.int64)
        return (self.tau_s / t.power[order] + t.comm_s[order]).tolist()

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        elapsed = time.monotonic() - self._round_started
        arrays, metrics = super().aggregate_train(server_round, replies)
        last = self._round_log(server_round)
        if last is None:
            # configure_train sent nothing this round (no node reported a profile in time):
            # Flower still asks for an aggregate; there is none, and no round to log
            return arrays, metrics
        site_of = dict(zip(last.node_ids, last.site_ids, strict=True))
        own_time = dict(zip(last.site_ids, last.site_time_s, strict=True))
        for reply in replies:
            if reply.has_error() or reply.metadata.src_node_id not in site_of:
                continue
            site = site_of[reply.metadata.src_node_id]
            reported = next(iter(reply.content.metric_records.values()), {})
            last.reported_site_ids.append(site)
            last.site_train_loss.append(float(reported.get(self.loss_key, 0.0)))
            last.site_num_samples.append(int(reported.get(self.weighted_by_key, 0)))
            last.site_duration_s.append(own_time[site] if self.clock == "simulated" else elapsed)
        last.delivered = len(last.reported_site_ids)
        if self.clock == "simulated":
            last.round_time_s = max(last.site_time_s)
        else:
            last.round_time_s = elapsed
        before = self.rounds[-2].sim_time_s if len(self.rounds) > 1 else 0.0
        last.sim_time_s = before + last.round_time_s
        return arrays, metrics

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        metrics = super().aggregate_evaluate(server_round, replies)
        logged = self._round_log(server_round)
        if metrics is not None and self.accuracy_key in metrics and logged is not None:
            if math.isnan(logged.accuracy):  # a centralized evaluation wins
                logged.accuracy = float(metrics[self.accuracy_key])
        return metrics

    def _round_log(self, server_round: int) -> RoundLog | None:
        """This round's log; None when the round trained nothing (no node reported a
        profile in time), so its evaluation is not written into an earlier round's."""
        last = self.rounds[-1] if self.rounds else None
        return last if last is not None and last.round == server_round else None

    def start(self, grid, initial_arrays, num_rounds=3, timeout=3600, train_config=None,
              evaluate_config=None, evaluate_fn=None):  # fmt: skip
        """Flower's loop, with a centralized `evaluate_fn`'s accuracy kept for the history."""

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            metrics = evaluate_fn(server_round, arrays)
            logged = self._round_log(server_round)
            if metrics is not None and self.accuracy_key in metrics and logged is not None:
                logged.accuracy = float(metrics[self.accuracy_key])
            return metrics

        return super().start(
            grid, initial_arrays, num_rounds=num_rounds, timeout=timeout,
            train_config=train_config, evaluate_config=evaluate_config,
            evaluate_fn=evaluate if evaluate_fn else None,
        )  # fmt: skip

    def write_rounds(self, path: str | Path) -> Path:
        """rounds.csv in the services' column names (round, k, sites, round_time_s,
        sim_time_s, accuracy, predicted_round_time_s): a time-to-accuracy curve."""
        path = Path(path)
        with path.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["round", "k", "sites", "round_time_s", "sim_time_s", "accuracy",
                             "predicted_round_time_s", "delivered"])  # fmt: skip
            for r in self.rounds:
                writer.writerow([r.round, len(r.site_ids), ";".join(r.site_ids),
                                 f"{r.round_time_s:.6f}", f"{r.sim_time_s:.6f}",
                                 f"{r.accuracy:.6f}", f"{r.predicted_round_time_s:.6f}",
                                 r.delivered])  # fmt: skip
        return path
