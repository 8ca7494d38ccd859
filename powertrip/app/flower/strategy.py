"""`PowerTripStrategy`: Flower's FedAvg with PowerTrip choosing which nodes train each round.

Each round it
1. waits, as FedAvg does, until `min_available_nodes` nodes are connected, then asks every
   connected node for its site profile (a `query` message, profiles.py): power, latency,
   bandwidth. A node that does not answer, or answers with a malformed profile or another
   node's site id, sits the round out (a warning says why);
2. builds the same `Context` the policy service builds from a SelectSites request (the site
   table with Eq. 3's communication times for update size M, tau, the history of finished
   rounds) and calls the named policy's `select`: the library code the service runs, not a
   copy, so the choice equals the service's for the same profiles and history (tested);
3. bounds k as FedAvg bounds its sample: at most `fraction_train` of the nodes that
   answered, at least `min_train_nodes` (which wins, as in FedAvg);
4. sends the train messages to the chosen nodes only, FedAvg-aggregates their replies and
   applies the outer step (`outer_optimizer`: FedAvg's average, or DiLoCo's Nesterov step);
5. records the round for the policy's history (k, the sites in rank order, the round time,
   the accuracy under `accuracy_key`: a centralized `evaluate_fn`'s, else the federated
   evaluation's), and writes it to `out_dir`'s decisions.jsonl.

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

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from logging import DEBUG, INFO, WARNING
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from powertrip.app.flower.outerstep import outer_arrays
from powertrip.app.flower.profiles import PROFILE_KEY, PROFILE_QUERY, SiteProfile, carbon_column
from powertrip.app.flower.rounds import RoundLog, RunOutput, write_rounds_csv
from powertrip.core.clocks import CLOCKS
from powertrip.core.outer import OuterStep
from powertrip.core.policies import REGISTRY, Context, Decision, SiteTable
from powertrip.core.policies import get_policy as _get_policy
from powertrip.core.policies.base import ESTIMATORS, Policy
from powertrip.core.settings import flower_default, flower_defaults_that_differ
from powertrip.core.timemodel import WORK_MODELS, site_times_s

#: the strategy's defaults that are meant to differ from the services' (RunConfig's), and why,
#: from the settings table's rows (powertrip/core/settings.py); every other keyword named
#: like a run setting takes RunConfig's default (tests/unit/test_default_agreement.py)
DEFAULTS_THAT_DIFFER: dict[str, str] = flower_defaults_that_differ()


class PowerTripStrategy(FedAvg):
    """FedAvg whose train sample is a PowerTrip policy's choice (see the module docstring).

    Parameters beyond FedAvg's:
      policy: a PowerTrip policy by name (`powertrip policies`); centralized ones are refused
        (they train one site on pooled data, which a Flower federation does not have).
      policy_params: its parameters, e.g. {"k": 5} or {"probe_cost": 0.2}.
      tau_s: the seconds one round's local work takes a site at full power (p = 1): the
        policy's tau; a site at power fraction p takes tau / p.
      update_size_bytes: M in Eq. 3; default: the bytes of the model's arrays.
      comm_directions: 2 (model down and update up; the services charge 1, the upload:
        `DEFAULTS_THAT_DIFFER` says why) or 1.
      estimator, work_model: as the services' (`paper`/`clock`; `local-steps`, ...); the
        estimator unset is the policy's own where it has one (`adaptive`: clock), else paper,
        and one the policy does not use is refused.
      seed: the policy's seed (random-k and Oort draw from (seed, round)).
      clock: `simulated` (the time model's charge) or `wall` (measured).
      accuracy_key: the MetricRecord key read for accuracy (centralized evaluation first);
        when no round's metrics carry it, a warning says so once.
      loss_key: the train reply's MetricRecord key with the node's mean training loss (Oort's
        utility reads it, with the FedAvg weight `weighted_by_key`).
      target_accuracy: reported to the policy as the services do (it never stops the run).
      profile_timeout_s: how long each round's profile query waits for the nodes. A node
        that missed it once is not waited for again while the others have answered: it
        trains on its last profile while that is at most `profile_max_age_rounds` rounds
        old, else sits out, until it answers in time again.
      startup_timeout_s: how long the first round's profile query waits, past
        `profile_timeout_s`, until `min_available_nodes` nodes have given a usable profile
        (a cold start: Ray's workers take seconds to come up); then it goes on with what
        it has.
      profile_max_age_rounds: how many rounds a node's last profile stands in for one it
        did not send in time (0: never; power changes from round to round, §3.1).
      outer_optimizer, outer_lr, outer_momentum: the services' settings (core/outer.py):
        "fedavg" (here the default; the services' is "nesterov": `DEFAULTS_THAT_DIFFER`),
        the average as is, "nesterov", DiLoCo's step on the averaged delta, or "fedavgm",
        FedAvg with server (heavy-ball) momentum.
      out_dir: where decisions.jsonl and rounds.csv go (None: nowhere); `start` refuses a
        directory that holds an earlier run's.

    FedAvg's sampling options keep their meaning: `min_available_nodes` (default 2, as
    FedAvg's) nodes must be connected before a round's profile query; `fraction_train` caps k
    at that share of the nodes that answered and `min_train_nodes` raises k to at least that
    many (the fastest sites on the time model fill it up). `min_train_nodes` defaults to 1,
    not FedAvg's 2, so that by default k is the policy's alone.
    """

    #: seconds between two looks at the connected nodes while too few are (FedAvg's: 1 s)
    node_poll_s: float = 1.0

    def __init__(
        self,
        policy: str = flower_default("policy"),
        policy_params: Mapping[str, float | str] | None = None,
        *,
        tau_s: float = 60.0,
        update_size_bytes: float | None = None,
        comm_directions: int = flower_default("comm_directions"),
        estimator: str | None = flower_default("estimator"),
        work_model: str = flower_default("work_model"),
        seed: int = flower_default("seed"),
        clock: str = flower_default("clock"),
        accuracy_key: str = "accuracy",
        loss_key: str = "train_loss",
        target_accuracy: float = math.inf,
        profile_timeout_s: float = 60.0,
        startup_timeout_s: float = 300.0,
        profile_max_age_rounds: int = 3,
        outer_optimizer: str = flower_default("outer_optimizer"),
        outer_lr: float = flower_default("outer_lr"),
        outer_momentum: float = flower_default("outer_momentum"),
        out_dir: str | Path | None = None,
        fraction_train: float = 1.0,
        min_train_nodes: int = 1,
        min_available_nodes: int = 2,
        **fedavg_options,
    ) -> None:
        _check_sampling(fraction_train, min_train_nodes, min_available_nodes)
        super().__init__(
            fraction_train=fraction_train, min_train_nodes=min_train_nodes,
            min_available_nodes=min_available_nodes, **fedavg_options,
        )  # fmt: skip
        # an unknown name or a bad parameter fails here, named as `powertrip run` names it
        self.policy = _get_policy(policy, policy_params)
        self.policy_name = policy
        if self.policy.centralized:
            federated = ", ".join(n for n, cls in REGISTRY.items() if not cls.centralized)
            raise ValueError(
                f"policy {policy!r} trains one site on pooled data (centralized): a Flower "
                f"federation has no pooled data; choose a federated policy: {federated}"
            )
        # the given parameters as the policy read them (it holds them as its defaults)
        self.params = {name: getattr(self.policy.defaults, name) for name in policy_params or {}}
        if not (math.isfinite(tau_s) and tau_s > 0):
            raise ValueError(f"tau_s must be > 0, got {tau_s}")
        if comm_directions not in (1, 2):
            raise ValueError(f"comm_directions must be 1 or 2, got {comm_directions}")
        if estimator is not None and estimator not in ESTIMATORS:
            raise ValueError(f"estimator {estimator!r} is not one of {', '.join(ESTIMATORS)}")
        estimator = _estimator(self.policy, estimator)
        if work_model not in WORK_MODELS:
            raise ValueError(f"work_model {work_model!r} is not one of {', '.join(WORK_MODELS)}")
        if clock not in CLOCKS:
            raise ValueError(f"clock {clock!r} is not one of {', '.join(CLOCKS)}")
        if not accuracy_key:
            raise ValueError("accuracy_key must name a MetricRecord key")
        self.outer = OuterStep(outer_optimizer, float(outer_lr), float(outer_momentum))
        if self.outer.problems():
            raise ValueError(self.outer.problems()[0])
        self._outer_buffer: dict[str, np.ndarray] | None = None
        self._sent_arrays: ArrayRecord | None = None
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
        self.startup_timeout_s = float(startup_timeout_s)
        _check_whole("profile_max_age_rounds", profile_max_age_rounds, 0)
        self.profile_max_age_rounds = profile_max_age_rounds
        #: node id -> (the round of its last usable profile, that profile)
        self._profile_cache: dict[int, tuple[int, SiteProfile]] = {}
        #: nodes that missed the last profile deadline: not waited for while others answered
        self._slow: set[int] = set()
        self.output = RunOutput(out_dir) if out_dir is not None else None
        self.rounds: list[RoundLog] = []
        self._round_started = 0.0
        self._metric_keys_seen: set[str] = set()
        self._warned_no_accuracy = False
        self._output_open = False

    def summary(self) -> None:
        super().summary()
        log(INFO, "\t└──> PowerTrip: policy %s%s, clock %s, tau %.3g s, outer step %s, "
            "accuracy from MetricRecord key '%s', output %s", self.policy_name,
            f" {self.params}" if self.params else "", self.clock, self.tau_s, self.outer_text,
            self.accuracy_key, self.output.directory if self.output else "none")  # fmt: skip

    # ---- the nodes and their profiles ------------------------------------------------
    def wait_for_nodes(self, grid: Grid) -> list[int]:
        """The connected nodes, once there are `min_available_nodes` (and `min_train_nodes`)
        of them: FedAvg's wait, so round 1 does not start before the nodes have."""
        need = max(self.min_available_nodes, self.min_train_nodes)
        said = -1.0
        while len(nodes := sorted(grid.get_node_ids())) < need:
            if time.monotonic() - said >= 10.0 or said < 0:
                log(INFO, "PowerTrip: waiting for nodes to connect: %d connected (minimum "
                    "required: %d)", len(nodes), need)  # fmt: skip
                said = time.monotonic()
            time.sleep(self.node_poll_s)
        return nodes

    def profiles(
        self,
        grid: Grid,
        node_ids: Iterable[int] | None = None,
        server_round: int = 0,
        at_least: int = 0,
    ) -> tuple[dict[int, SiteProfile], dict[int, str]]:
        """Each node's profile, asked now: ({node id: profile}, {node id: why it is out}).

        The query waits `profile_timeout_s`, and past it, while fewer than `at_least` nodes
        gave a usable profile, up to `startup_timeout_s` (a cold start). It ends early once
        every node has answered but those that missed the last round's deadline. A node
        that does not answer in time, answers with an error or a malformed profile, or
        reports a site id a lower node id already reported, is out for this round, unless
        it only missed the deadline and its last usable profile is at most
        `profile_max_age_rounds` rounds old (then that one stands in, and says so)."""
        asked = sorted(grid.get_node_ids() if node_ids is None else node_ids)
        query = [Message(RecordDict(), dst_node_id=n, message_type=PROFILE_QUERY) for n in asked]
        found: dict[int, SiteProfile] = {}
        dropped: dict[int, str] = {}
        pending = dict(zip(grid.push_messages(query), asked, strict=True))
        start = time.monotonic()
        deadline = start + self.profile_timeout_s
        startup = start + max(self.profile_timeout_s, self.startup_timeout_s)
        said = start
        while pending:
            for reply in grid.pull_messages(list(pending)):
                node = reply.metadata.src_node_id
                pending = {m: n for m, n in pending.items() if n != node}
                if reply.has_error():
                    dropped[node] = f"no profile: {reply.error.reason}"
                    continue
                try:
                    record = reply.content.config_records[PROFILE_KEY]
                    profile = SiteProfile.from_values(record).named(f"node-{node}").check()
                except (KeyError, TypeError, ValueError) as exc:
                    dropped[node] = f"malformed profile: {exc}"
                    continue
                found[node] = profile
            now = time.monotonic()
            waiting_for = set(pending.values()) - (self._slow if found else set())
            if not waiting_for or now >= startup or (now >= deadline and len(found) >= at_least):
                break
            if now >= deadline and now - said >= 10.0:
                log(INFO, "PowerTrip: %d of %d nodes gave a usable profile; waiting for the "
                    "rest (start-up, %.0f of %.0f s)", len(found), at_least, now - start,
                    self.startup_timeout_s)  # fmt: skip
                said = now
            time.sleep(self.node_poll_s / 20)
        for node in asked:
            if node in found or node in dropped:
                self._slow.discard(node)
                continue
            self._slow.add(node)
            kept = self._profile_cache.get(node)
            if kept and server_round - kept[0] <= self.profile_max_age_rounds:
                found[node] = kept[1]
                log(INFO, "PowerTrip: node %d sent no profile within %g s; its profile of "
                    "round %d stands in", node, self.profile_timeout_s, kept[0])  # fmt: skip
            else:
                dropped[node] = f"no profile within {self.profile_timeout_s:g} s"
        for node, profile in found.items():
            if node not in self._slow:
                self._profile_cache[node] = (server_round, profile)
        owner: dict[str, int] = {}
        for node in sorted(found):
            site = found[node].site_id
            if site in owner:
                dropped[node] = f"site_id {site!r} is node {owner[site]}'s too"
                del found[node]
            else:
                owner[site] = node
        return found, dropped

    def gather_profiles(
        self, grid: Grid, server_round: int
    ) -> tuple[dict[int, SiteProfile], dict[int, str]]:
        """This round's usable profiles; until a round has trained, the query waits for
        `min_available_nodes` of them up to `startup_timeout_s`, so round 1 is not lost to
        nodes still starting."""
        need = 0 if self.trained_rounds else max(self.min_available_nodes, self.min_train_nodes)
        return self.profiles(grid, self.wait_for_nodes(grid), server_round, at_least=need)

    @property
    def trained_rounds(self) -> list[RoundLog]:
        """The rounds that trained: the policy's history (a round without training is
        recorded, but is no round of the policy's)."""
        return [r for r in self.rounds if r.site_ids]

    # ---- the decision ----------------------------------------------------------------
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
            carbon_g_per_kwh=carbon_column(profiles),
        )
        return Context(
            table=table,
            update_size_bytes=size,
            tau_s=self.tau_s,
            history=tuple(r.past_round() for r in self.trained_rounds),
            target_accuracy=self.target_accuracy,
            seed=self.seed,
            round=len(self.trained_rounds) + 1,  # a round that trained nothing is no round
            estimator=self.estimator,
            work_model=self.work_model,
        )

    def decide(self, ctx: Context) -> Decision:
        """The policy's own choice, unbounded (what the policy service would answer; a
        centralized policy was refused at construction)."""
        return self.policy.select(ctx)

    def bound(self, ctx: Context, order: np.ndarray) -> tuple[np.ndarray, str]:
        """The policy's ranked sites with k within FedAvg's bounds, and what was changed:
        at most int(fraction_train x the sites), at least min_train_nodes (which wins, as in
        FedAvg; never more than the sites that are alive). Sites added to reach the minimum
        are the fastest left on the time model (tau / p_i + T_comm,i), ties by site id."""
        t, order = ctx.table, np.asarray(order, dtype=np.int64)
        lower = min(self.min_train_nodes, t.num_alive)
        upper = max(int(len(t) * self.fraction_train), lower)
        if len(order) > upper:
            note = f"k {len(order)} capped at {upper} by fraction_train={self.fraction_train:g}"
            return order[:upper], note
        if len(order) < lower:
            rest = t.alive_by_id[~np.isin(t.alive_by_id, order)]
            times = self.tau_s / t.power[rest] + t.comm_s[rest]
            extra = rest[np.argsort(times, kind="stable")][: lower - len(order)]
            note = f"k {len(order)} raised to {lower} by min_train_nodes={self.min_train_nodes}"
            return np.concatenate([order, extra]), note
        return order, ""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.fraction_train == 0.0:  # FedAvg's meaning (it warned at construction)
            return []
        self._finish_rounds_before(server_round)
        by_node, dropped = self.gather_profiles(grid, server_round)
        for node, why in sorted(dropped.items()):
            log(WARNING, "PowerTrip: node %d sits out round %d: %s", node, server_round,
                one_line(why))  # fmt: skip
            log(DEBUG, "PowerTrip: node %d's whole answer in round %d: %s", node,
                server_round, why)  # fmt: skip
        if not by_node:
            log(WARNING, "PowerTrip: no node gave a usable profile; no training in round %d",
                server_round)  # fmt: skip
            self._record_idle_round(server_round, dropped, "no node gave a usable profile")
            return []
        nodes = sorted(by_node, key=lambda n: by_node[n].site_id)
        profiles = [by_node[n] for n in nodes]
        model_bytes = float(sum(a.numpy().nbytes for a in arrays.values()))
        ctx = self.context(profiles, server_round, model_bytes)
        decision = self.decide(ctx)
        order, bounded = self.bound(ctx, decision.order)
        if len(order) == 0:
            log(WARNING, "PowerTrip: no alive site to train in round %d", server_round)
            self._record_idle_round(server_round, dropped, "no alive site", profiles)
            return []
        site_time_s = self.site_times_s(ctx, order)
        predicted = max(site_time_s)  # the time model's charge (the simulated clock's)
        why = decision.explanation  # the policy's own reason for its k, else its rule
        reason = "; ".join(
            r for r in (str(why.get("reason") or why.get("rule") or ""), bounded) if r
        )
        chosen = [nodes[i] for i in order.tolist()]
        estimate = decision.predicted_round_time_s  # the policy's own, by its estimator
        self.rounds.append(RoundLog(
            round=server_round, site_ids=[by_node[n].site_id for n in chosen], node_ids=chosen,
            predicted_round_time_s=predicted, explanation=decision.explanation, reason=reason,
            profiles=profiles, dropped={n: one_line(w) for n, w in dropped.items()},
            site_time_s=site_time_s, policy_estimate_s=estimate, outer_step=self.outer.to_json(),
        ))  # fmt: skip
        log(INFO, "configure_train: PowerTrip %s chose k=%d of %d nodes, predicted round "
            "time %.1f s (the policy's %s estimate %.1f s), outer step %s: %s",
            self.policy_name, len(chosen), len(nodes), predicted, self.estimator, estimate,
            self.outer_text, reason or "(no reason given)")  # fmt: skip
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        self._round_started = time.monotonic()
        self._sent_arrays = arrays
        return [Message(record, dst_node_id=n, message_type=MessageType.TRAIN) for n in chosen]

    def _record_idle_round(
        self,
        server_round: int,
        dropped: Mapping[int, str],
        why: str,
        profiles: list[SiteProfile] | None = None,
    ) -> None:
        """A round that trains nothing, in decisions.jsonl and rounds.csv with its reason
        (k 0, no time on the clock); not a round of the policy's (`trained_rounds`)."""
        before = self.rounds[-1].sim_time_s if self.rounds else 0.0
        self.rounds.append(RoundLog(
            round=server_round, site_ids=[], node_ids=[], predicted_round_time_s=0.0,
            explanation={}, reason=f"no training: {why}", round_time_s=0.0,
            sim_time_s=before, profiles=list(profiles or []),
            dropped={n: one_line(w) for n, w in dropped.items()},
            outer_step=self.outer.to_json(),
        ))  # fmt: skip

    # ---- what came of it -------------------------------------------------------------
    def site_times_s(self, ctx: Context, order: np.ndarray) -> list[float]:
        """Each chosen site's own time on the library's time model (`timemodel.site_times_s`,
        the run's work_model), in rank order; the round's charge is their maximum, the
        straggler's, as the services' simulated clock charges a round (no aggregation)."""
        t, order = ctx.table, np.asarray(order, dtype=np.int64)
        return site_times_s(self.tau_s, t.power[order], t.comm_s[order], self.work_model).tolist()

    @property
    def outer_text(self) -> str:
        step = self.outer
        if step.optimizer == "fedavg":
            return "fedavg (the average as is)"
        return f"{step.optimizer} (lr {step.lr:g}, momentum {step.momentum:g})"

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        elapsed = time.monotonic() - self._round_started
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is not None and self._sent_arrays is not None:
            arrays, self._outer_buffer = outer_arrays(
                self._sent_arrays, arrays, self._outer_buffer, self.outer
            )
        last = self._round_log(server_round)
        if last is None or not last.site_ids:
            # configure_train sent nothing this round (recorded with its reason, or
            # fraction_train 0): Flower still asks for an aggregate; there is none
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
        self._keep_accuracy(server_round, metrics, centralized=False)
        return metrics

    def _keep_accuracy(self, server_round: int, metrics, centralized: bool) -> None:
        """This round's accuracy for the policy's history: a centralized evaluation's
        overrides the federated one's."""
        if metrics is None:
            return
        self._metric_keys_seen.update(metrics)
        logged = self._round_log(server_round)
        if logged is not None and self.accuracy_key in metrics:
            if centralized or math.isnan(logged.accuracy):
                logged.accuracy = float(metrics[self.accuracy_key])

    def _round_log(self, server_round: int) -> RoundLog | None:
        """This round's log (one that trained nothing too: its evaluation is its own); None
        before configure_train made it, so an evaluation never lands in an earlier round's."""
        last = self.rounds[-1] if self.rounds else None
        return last if last is not None and last.round == server_round else None

    def _finish_rounds_before(self, server_round: int) -> None:
        """The rounds before this one are complete: warn if accuracy did not reach the
        policy, and write them out."""
        done = [r for r in self.rounds if r.round < server_round]
        missing = [r.round for r in done if r.site_ids and math.isnan(r.accuracy)]
        if missing and not self._warned_no_accuracy:
            self._warned_no_accuracy = True
            seen = ", ".join(sorted(self._metric_keys_seen)) or "none"
            log(WARNING, "PowerTrip: no accuracy reached the policy for round %d: it reads "
                "the MetricRecord key '%s' from evaluate_fn's result or the federated "
                "evaluation (keys seen: %s), and reads a missing one as 0, so an "
                "accuracy-driven policy keeps k where it is. Give start() an evaluate_fn, "
                "or set accuracy_key to the key your evaluation reports. (Said once.)",
                missing[0], self.accuracy_key, seen)  # fmt: skip
        if self.output is not None and done:
            self._open_output().write(done)

    def _open_output(self) -> RunOutput:
        assert self.output is not None
        if not self._output_open:
            self.output.open()
            self._output_open = True
            log(INFO, "PowerTrip: decisions.jsonl and rounds.csv go to %s",
                self.output.directory)  # fmt: skip
        return self.output

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's loop, unchanged, with three additions that need the whole run: the
        output directory is claimed before round 1 (an earlier run's is refused, not
        overwritten), a centralized `evaluate_fn`'s accuracy reaches the policy's history,
        and the last round is written out when the loop ends."""
        if self.output is not None:
            self._open_output()

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            metrics = evaluate_fn(server_round, arrays)
            self._keep_accuracy(server_round, metrics, centralized=True)
            return metrics

        result = super().start(
            grid, initial_arrays, num_rounds=num_rounds, timeout=timeout,
            train_config=train_config, evaluate_config=evaluate_config,
            evaluate_fn=evaluate if evaluate_fn else None,
        )  # fmt: skip
        self._finish_rounds_before(num_rounds + 1)
        return result

    def write_rounds(self, path: str | Path) -> Path:
        """rounds.csv at `path` (out_dir writes it too): a time-to-accuracy curve."""
        return write_rounds_csv(self.rounds, path)


#: the last line of a Python traceback: `ValueError: message`
ERROR_LINE = re.compile(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b")


def one_line(why: str, limit: int = 240) -> str:
    """A node's error as one line: a reason that carries a traceback (Ray's does, 1.5-2 kB)
    is cut to its last `Type: message` line, after what the strategy said of it."""
    lines = [line.strip() for line in str(why).splitlines() if line.strip()]
    if len(lines) <= 1:
        text = lines[0] if lines else ""
    else:
        head = lines[0].split(":", 1)[0]
        errors = [line for line in lines if ERROR_LINE.match(line)]
        text = f"{head}: {(errors or lines)[-1].rstrip(chr(39) + '>')}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_sampling(fraction_train: float, min_train_nodes: int, min_available_nodes: int):
    """FedAvg takes these unchecked; here each bounds k, so a value that cannot is refused."""
    if not (isinstance(fraction_train, int | float) and 0.0 <= fraction_train <= 1.0):
        raise ValueError(f"fraction_train must be in [0, 1], got {fraction_train!r}")
    _check_whole("min_train_nodes", min_train_nodes, 1)
    _check_whole("min_available_nodes", min_available_nodes, 0)


def _estimator(policy: Policy, given: str | None) -> str:
    """The round-time estimator for `policy`: `given`, or unset the policy's own (else the
    services' default, paper); one the policy would not use is refused, not ignored."""
    own = policy.estimator
    if given is not None and own is not None and given != own:
        raise ValueError(
            f"policy {policy.name!r} estimates round times with the {own!r} estimator "
            f"whatever it is given, so estimator {given!r} would not be used; leave it unset"
        )
    return given if given is not None else own or "paper"


def _check_whole(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
