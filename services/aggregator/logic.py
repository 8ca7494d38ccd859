"""The round loop: ask the policy, dispatch, collect, FedAvg, evaluate, advance the clock.

Runs in its own thread beside the gRPC handlers; talks to the profiler and the policy
only over gRPC. Time comes from the model (paper §2-3) on the simulated clock, or from
real elapsed time on the wall clock.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
import torch

from powertrip.fedavg import StreamingFedAvg, apply_delta
from powertrip.profiles import site_id as make_site_id
from powertrip.profiles import site_index
from powertrip.rpc.channels import open_channel
from powertrip.sitecolumns import (
    ColumnsError,
    columns_from_profiles,
    num_sites,
    profile_at,
    row_of,
)
from powertrip.timemodel import RoundTime, SiteTime, comm_time_from_latency_s, round_time
from powertrip.training import eval_subset, evaluate, site_seed
from powertrip.v1 import (
    aggregator_pb2,
    common_pb2,
    policy_pb2,
    policy_pb2_grpc,
    profiler_pb2,
    profiler_pb2_grpc,
)
from powertrip.workloads import get_workload
from services.aggregator.config import AggregatorConfig
from services.aggregator.records import (
    CheckpointError,
    RoundRow,
    RunRecorder,
    load_checkpoint,
    round_sites,
)
from services.aggregator.servicer import AggregatorMetrics
from services.aggregator.state import AggregatorState, RoundInProgress
from services.aggregator.workmodel import measured_breakdown, split_work

log = logging.getLogger("aggregator")
RPC_RETRIES = 5
#: Settings that may differ between a run and its resumption: they change how the run is
#: executed, not what it computes.
RESUMABLE_CHANGES = frozenset(
    {
        "workers",
        "threads_per_worker",
        "round_deadline_s",
        "max_rounds",
        "max_sim_hours",
        "checkpoint",
        "data_dir",
    }
)


class RunFailed(RuntimeError):
    pass


class EmptyRound(RunFailed):
    """Every selected site missed the deadline: the round is redone, the model unchanged."""


#: consecutive empty rounds before the run gives up (each one marks its sites dead first)
MAX_EMPTY_ROUNDS = 3


class DependencyDown(RunFailed):
    """The profiler or policy stayed unreachable through every retry."""


@dataclass
class LoopResult:
    rounds: int = 0
    sim_time_s: float = 0.0
    accuracy: float = 0.0
    best_accuracy: float = 0.0
    time_to_target_s: float | None = None
    stopped_reason: str = ""
    history: list[common_pb2.RoundRecord] = field(default_factory=list)

    def to_json(self) -> dict:
        """Everything the next round depends on; floats survive JSON exactly (repr)."""
        return {
            "rounds": self.rounds,
            "sim_time_s": self.sim_time_s,
            "accuracy": self.accuracy,
            "best_accuracy": self.best_accuracy,
            "time_to_target_s": self.time_to_target_s,
            "stopped_reason": self.stopped_reason,
            "history": [
                {
                    "round": h.round,
                    "k": h.k,
                    "accuracy": h.accuracy,
                    "round_time_s": h.round_time_s,
                    "predicted_round_time_s": h.predicted_round_time_s,
                    "sim_time_s": h.sim_time_s,
                    "site_ids": list(h.site_ids),
                }
                for h in self.history
            ],
        }

    @classmethod
    def from_json(cls, data: dict) -> LoopResult:
        return cls(
            rounds=int(data["rounds"]),
            sim_time_s=float(data["sim_time_s"]),
            accuracy=float(data["accuracy"]),
            best_accuracy=float(data["best_accuracy"]),
            time_to_target_s=data["time_to_target_s"],
            stopped_reason=str(data["stopped_reason"]),
            history=[common_pb2.RoundRecord(**h) for h in data["history"]],
        )


def run_spec(config: AggregatorConfig) -> aggregator_pb2.RunSpec:
    run = config.run
    return aggregator_pb2.RunSpec(
        run_id=config.out_dir.name,
        workload=run.workload,
        num_sites=run.num_sites,
        seed=run.seed,
        lr=run.lr,
        batch_size=run.batch_size,
        local_steps=run.local_steps,
        data_dir=run.data_dir or "",
    )


def initial_weights(workload, seed: int) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    model = workload.build_model()
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def _retry(call, what: str, retries: int = RPC_RETRIES, on_retry=None):
    """Call a dependency with exponential backoff; the run never dies on one blip.

    A wrong request (INVALID_ARGUMENT, NOT_FOUND) fails at once: retrying cannot fix it.
    Anything else that outlasts the retries raises DependencyDown, which callers answer
    with their last good value.
    """
    delay = 0.2
    for attempt in range(retries):
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
                raise RunFailed(f"{what}: {exc.details()}") from None
            if on_retry:
                on_retry()
            if attempt == retries - 1:
                raise DependencyDown(
                    f"{what} unavailable after {retries} tries: {exc.code().name}"
                ) from None
            log.warning("%s failed (%s); retrying in %.1fs", what, exc.code().name, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


class RoundLoop:
    def __init__(
        self, config: AggregatorConfig, state: AggregatorState, metrics: AggregatorMetrics
    ):
        self.config = config
        self.run = config.run
        self.state = state
        self.metrics = metrics
        self.workload = get_workload(self.run.workload)
        self.recorder: RunRecorder | None = None
        self.result = LoopResult()
        self.start_round = 1
        # last good answers of the dependencies, reused while they are down
        self.last_profiles: common_pb2.SiteColumns | None = None
        self.last_selection: policy_pb2.Selection | None = None
        # Evaluation runs while the site workers wait for the next round, so it may use
        # every core the workers use between them.
        torch.set_num_threads(max(1, self.run.workers * self.run.threads_per_worker))

    # ---- set-up ------------------------------------------------------------------------
    def prepare(self) -> None:
        """Load held-out data and the initial model before any worker is served."""
        dataset = self.workload.load(self.run.data_dir, self.run.seed)
        ix = eval_subset(len(dataset.test), self.run.eval_samples, self.run.seed)
        self.eval_x, self.eval_y = dataset.test.x[ix], dataset.test.y[ix]
        self.model = self.workload.build_model()
        initial = initial_weights(self.workload, self.run.seed)
        checkpoint = load_checkpoint(self.config.out_dir) if self.config.resume else None
        if checkpoint is None:
            if self.config.resume:
                log.warning(
                    "--resume: no checkpoint in %s; starting from round 1", self.config.out_dir
                )
            self.recorder = RunRecorder(self.config.out_dir, clock=self.run.clock)
            self.state.set_model(initial, version=0)
        else:
            self._restore(initial, *checkpoint)
        self.run.write_yaml(self.config.out_dir / "config.yaml")

    def _restore(self, initial: dict[str, np.ndarray], weights: dict, saved: dict) -> None:
        """Continue from a checkpoint: same model bytes, same loop state, same files."""
        where = self.config.out_dir / "checkpoint" / "state.json"
        differ = sorted(
            k
            for k, v in self.run.to_dict().items()
            if k not in RESUMABLE_CHANGES and saved.get("config", {}).get(k) != v
        )
        if differ:
            raise CheckpointError(
                f"{where}: the run configuration differs from the checkpoint's in "
                f"{', '.join(differ)}; resume with the run's own configuration"
            )
        if list(weights) != list(initial) or any(
            weights[k].shape != initial[k].shape or weights[k].dtype != initial[k].dtype
            for k in initial
        ):
            raise CheckpointError(f"{where}: the checkpointed model does not match the workload")
        self.result = LoopResult.from_json(saved["result"])
        self.start_round = int(saved["round"]) + 1
        self.recorder = RunRecorder(
            self.config.out_dir, keep_rounds=int(saved["round"]), clock=self.run.clock
        )
        self._restore_site_ids()
        self.state.set_model(weights, version=int(saved["model_version"]))
        self.state.restore_dead(saved.get("dead_sites", []))
        if saved.get("last_selection"):
            self.last_selection = policy_pb2.Selection.FromString(
                base64.b64decode(saved["last_selection"])
            )
        if saved.get("last_profiles"):
            self.last_profiles = _columns_of(
                profiler_pb2.GetProfilesResponse.FromString(
                    base64.b64decode(saved["last_profiles"])
                )
            )
        if self.result.history:
            with self.state.lock:
                self.state.status.last.CopyFrom(self.result.history[-1])
                self.state.status.round = self.result.rounds
        log.info(
            "resumed from the checkpoint of round %d (simulated time %.1fs)",
            self.result.rounds,
            self.result.sim_time_s,
        )

    def _restore_site_ids(self) -> None:
        """Checkpoints written before RoundRecord.site_ids existed have history without it
        (a policy such as static-k reads round 1's set from it): take each round's sites
        from rounds.csv, already trimmed to the checkpoint's round."""
        missing = [h for h in self.result.history if not h.site_ids]
        if not missing:
            return
        sites = round_sites(self.config.out_dir)
        for record in missing:
            record.site_ids.extend(sites.get(record.round, []))

    def wait_for_sites(self) -> None:
        deadline = time.monotonic() + self.config.register_timeout_s
        with self.state.lock:
            ok = self.state.changed.wait_for(
                lambda: len(self.state.site_owner) >= self.run.num_sites,
                timeout=max(0.0, deadline - time.monotonic()),
            )
        if not ok:
            raise RunFailed(
                f"only {self.state.registered_count()} of {self.run.num_sites} sites registered "
                f"within {self.config.register_timeout_s:.0f}s"
            )

    # ---- one round ---------------------------------------------------------------------
    def select(self, round_no: int, profiles: common_pb2.SiteColumns) -> policy_pb2.Selection:
        request = policy_pb2.SelectSitesRequest(
            policy=self.run.policy,
            params=self.run.policy_params,
            site_columns=profiles,
            history=self.result.history,
            update_size_bytes=self.run.update_size_bytes,
            tau_s=self.run.tau_s,
            target_accuracy=self.run.target_accuracy,
            seed=self.run.seed,
            round=round_no,
            comm_directions=self.run.comm_directions,
            shadow=self.run.shadow,
            estimator=self.run.estimator,
            work_model=self.run.work_model,
        )
        try:
            selection = _retry(
                lambda: self.policy.SelectSites(request, timeout=30),
                "policy.SelectSites",
                on_retry=lambda: self.metrics.dependency_retries.labels("policy").inc(),
            )
        except DependencyDown as exc:
            return self._fallback_selection(round_no, profiles, exc)
        self.last_selection = selection
        return selection

    def _fallback_selection(self, round_no: int, profiles, exc) -> policy_pb2.Selection:
        """The policy is down: reuse its last good selection, minus sites now dead."""
        alive = {site for site, ok in zip(profiles.site_id, profiles.alive, strict=True) if ok}
        last = self.last_selection
        if last is None or not alive.intersection(last.site_ids):
            raise RunFailed(f"{exc}; no earlier selection to fall back on") from None
        selection = policy_pb2.Selection()
        selection.CopyFrom(last)
        del selection.site_ids[:]
        selection.site_ids.extend(s for s in last.site_ids if s in alive)
        selection.k = len(selection.site_ids)
        del selection.shadows[:]
        selection.explanation = json.dumps(
            {"fallback": "last good selection", "reason": str(exc), "from_round": round_no - 1}
        )
        self.metrics.policy_fallbacks.inc()
        log.error(
            "round %d: %s; reusing the last good selection (k=%d)", round_no, exc, selection.k
        )
        return selection

    def profiles(self, at_s: float) -> common_pb2.SiteColumns:
        """Profiles at `at_s` as columns with dead sites marked; the last good ones if the
        profiler is down."""
        try:
            columns = _columns_of(
                _retry(
                    lambda: self.profiler.GetProfiles(
                        profiler_pb2.GetProfilesRequest(at_s=at_s, columnar=True), timeout=30
                    ),
                    "profiler.GetProfiles",
                    on_retry=lambda: self.metrics.dependency_retries.labels("profiler").inc(),
                )
            )
            self.last_profiles = columns
        except DependencyDown as exc:
            if self.last_profiles is None:
                raise RunFailed(f"{exc}; no earlier profiles to fall back on") from None
            self.metrics.profiler_fallbacks.inc()
            log.error("%s; reusing the last good profiles", exc)
            columns = self.last_profiles
        out = common_pb2.SiteColumns()
        out.CopyFrom(columns)
        dead = self.state.dead_sites()
        if dead:
            for row, site in enumerate(out.site_id):
                if site in dead:
                    out.alive[row] = False
        return out

    def dispatch(
        self, round_no: int, selection: policy_pb2.Selection, steps: dict[str, int] | None = None
    ) -> RoundInProgress:
        """Hand each selected site its task; `steps` gives a site's local steps where the
        work model varies them (data-parallel), else every site runs the run's local_steps."""
        steps = steps or {}
        version = self.state.model_version
        pooled = selection.mode == policy_pb2.SELECTION_MODE_CENTRALIZED
        tasks = {}
        for site in selection.site_ids:
            task_id = f"r{round_no}-{site}"
            tasks[task_id] = aggregator_pb2.Task(
                task_id=task_id,
                round=round_no,
                site_id=site,
                model_version=version,
                local_steps=steps.get(site, self.run.local_steps),
                lr=self.run.lr,
                batch_size=self.run.batch_size,
                seed=site_seed(self.run.seed, round_no, site_index(site)),
                data_scope=(
                    aggregator_pb2.DATA_SCOPE_POOLED if pooled else aggregator_pb2.DATA_SCOPE_SITE
                ),
                deadline_s=self.run.round_deadline_s,
            )
        progress = RoundInProgress(
            round=round_no,
            model_version=version,
            tasks=tasks,
            fedavg=StreamingFedAvg(list(selection.site_ids), self.state.weights),
        )
        self.state.install_round(progress)
        return progress

    def collect(self, progress: RoundInProgress) -> None:
        """Wait for every delta or the deadline; sites that miss it are skipped, not waited on."""
        deadline = time.monotonic() + self.run.round_deadline_s
        with self.state.lock:
            finished = self.state.changed.wait_for(
                progress.complete, timeout=max(0.0, deadline - time.monotonic())
            )
            if not finished:
                missing = sorted(progress.expected - progress.received)
                log.warning(
                    "round %d: %d site(s) missed the deadline: %s",
                    progress.round,
                    len(missing),
                    ", ".join(missing[:5]),
                )
                for site in missing:
                    progress.failed.add(site)
                    progress.fedavg.skip(site)
                self.state.mark_dead_locked(missing)
                self.metrics.site_failures.inc(len(missing))
            self.metrics.dead_sites.set(len(self.state.dead))
            self.state.current = None
        if not progress.received:
            raise EmptyRound(f"round {progress.round}: no site returned a delta")

    def simulated_time(
        self, selection: policy_pb2.Selection, profiles_by_id: dict
    ) -> tuple[float, RoundTime, list[SiteTime], dict[str, int]]:
        """The time model's round for `selection`: (round seconds, breakdown, per-site times,
        per-site local steps). The work model decides each site's steps and compute (see
        services/aggregator/workmodel.py); comm is Eq. 3 per direction, as ever."""
        run = self.run
        if selection.mode == policy_pb2.SELECTION_MODE_CENTRALIZED:
            # one site, power-capped, training on the pooled data; no link to cross
            site = selection.site_ids[0]
            work = split_work(
                run.work_model,
                [site],
                [selection.power_cap],
                local_steps=run.local_steps,
                tau_s=run.tau_s,
            )
            comm = [0.0]
        else:
            profs = [profiles_by_id[site] for site in selection.site_ids]
            work = split_work(
                run.work_model,
                list(selection.site_ids),
                [prof.power_fraction for prof in profs],
                local_steps=run.local_steps,
                tau_s=run.tau_s,
            )
            comm = [
                run.comm_directions
                * comm_time_from_latency_s(
                    prof.latency_s, prof.bandwidth_bytes_per_s, run.update_size_bytes
                )
                for prof in profs
            ]
        times = [SiteTime(w.site_id, w.compute_s, c) for w, c in zip(work, comm, strict=True)]
        timing = round_time(times, aggregation_s=run.aggregation_s)
        return timing.round_time_s, timing, times, {w.site_id: w.steps for w in work}

    def run_round(self, round_no: int) -> bool:
        """One synchronous round; returns True when the run should stop."""
        run, result = self.run, self.result
        wall_start = time.monotonic()
        profiles = self.profiles(result.sim_time_s)
        selection = self.select(round_no, profiles)
        if not selection.site_ids:
            raise RunFailed(f"policy {run.policy} selected no site in round {round_no}")
        rows = row_of(profiles)
        profiles_by_id = {
            site: profile_at(profiles, rows[site]) for site in selection.site_ids if site in rows
        }
        sim_round_s, timing, _, steps = self.simulated_time(selection, profiles_by_id)
        if run.clock == "simulated" and run.max_sim_hours:
            # On the simulated clock the round's length is known before it runs: do not
            # train a round that would end after the time budget.
            if result.sim_time_s + sim_round_s > run.max_sim_hours * 3600:
                result.stopped_reason = "time_budget"
                return True
        progress = self.dispatch(round_no, selection, steps)
        self.collect(progress)
        collected_at = time.monotonic()
        wall_train = collected_at - wall_start

        delta = progress.fedavg.result()
        new_weights = apply_delta(self.state.weights, delta)
        eval_start = time.monotonic()
        wall_aggregation = eval_start - collected_at
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in new_weights.items()})
        accuracy, loss = evaluate(self.workload, self.model, self.eval_x, self.eval_y)
        wall_eval = time.monotonic() - eval_start
        self.state.set_model(new_weights, version=progress.model_version + 1)

        wall_round_s = time.monotonic() - wall_start
        round_s = sim_round_s if run.clock == "simulated" else wall_round_s
        predicted: float | None = selection.predicted_round_time_s
        if run.clock == "wall":
            # What happened, not what the model says: the straggler's measured training
            # and the rest of its round, the sites' measured idle time, the measured FedAvg.
            # The policy predicts from tau_s and the profiles, i.e. in the time model's
            # seconds, so its prediction is left empty here (it stays in decisions.jsonl)
            # and the model's own round time goes to model_round_time_s.
            timing = measured_breakdown(
                {s: t - progress.started_at for s, t in progress.finished_at.items()},
                progress.compute_wall_s,
                collected_at - progress.started_at,
                aggregation_s=wall_aggregation,
                round_time_s=wall_round_s,
            )
            predicted = None
        result.sim_time_s += round_s
        result.rounds = round_no
        result.accuracy = accuracy
        result.best_accuracy = max(result.best_accuracy, accuracy)
        k = len(selection.site_ids)
        contributed = progress.fedavg.contributors
        row = RoundRow(
            round=round_no,
            sim_time_s=result.sim_time_s,
            round_time_s=round_s,
            k=k,
            sites=";".join(selection.site_ids),
            accuracy=accuracy,
            loss=loss,
            compute_s=timing.compute_s,
            comm_s=timing.comm_s,
            wait_s=timing.wait_s,
            aggregation_s=timing.aggregation_s,
            predicted_round_time_s=predicted,
            bytes_up=progress.bytes_up,
            bytes_down=len(contributed) * self.state.model_bytes,
            emulated_bytes=run.comm_directions * run.update_size_bytes * k,
            straggler=timing.straggler,
            mode=policy_pb2.SelectionMode.Name(selection.mode).split("_")[-1].lower(),
            train_loss=float(np.mean([progress.train_loss[s] for s in contributed])),
            clock=run.clock,
            model_round_time_s=sim_round_s if run.clock == "wall" else None,
        )
        decision = {
            "policy": selection.policy,
            "k": k,
            "predicted_round_time_s": selection.predicted_round_time_s,
            "actual_round_time_s": round_s,
            "explanation": _json_or_text(selection.explanation),
            "failed_sites": sorted(progress.failed),
            "dead_sites": sorted(self.state.dead_sites()),
            "shadows": [
                {"policy": s.policy, "k": s.k, "predicted_round_time_s": s.predicted_round_time_s}
                for s in selection.shadows
            ],
        }
        if run.work_model == "data-parallel":
            # each site's share of W, as asked and as its worker reports having trained
            decision["local_steps"] = steps
            decision["trained_steps"] = {s: progress.steps[s] for s in sorted(progress.steps)}
        if run.clock == "wall":
            decision["model_round_time_s"] = sim_round_s
        self.recorder.add_round(row, decision, (wall_round_s, wall_train, wall_eval))
        result.history.append(
            common_pb2.RoundRecord(
                round=round_no,
                k=k,
                accuracy=accuracy,
                round_time_s=round_s,
                predicted_round_time_s=selection.predicted_round_time_s,
                sim_time_s=result.sim_time_s,
                site_ids=selection.site_ids,
            )
        )
        self._publish(row)
        stop = False
        if accuracy >= run.target_accuracy and result.time_to_target_s is None:
            result.time_to_target_s = result.sim_time_s
            result.stopped_reason = "target_reached"
            stop = True
        elif run.max_sim_hours and result.sim_time_s >= run.max_sim_hours * 3600:
            result.stopped_reason = "time_budget"
            stop = True
        if run.checkpoint:
            self.save_checkpoint(round_no, new_weights, progress.model_version + 1)
        log.info(
            "round %d: k=%d acc=%.4f %s time=%.1fs (+%.1fs, wall %.1fs)",
            round_no,
            k,
            accuracy,
            run.clock,
            result.sim_time_s,
            round_s,
            wall_round_s,
        )
        return stop

    def save_checkpoint(self, round_no: int, weights, model_version: int) -> None:
        """Model plus every piece of loop state the following rounds depend on."""
        state = {
            "round": round_no,
            "model_version": model_version,
            "sim_time_s": self.result.sim_time_s,
            "result": self.result.to_json(),
            "dead_sites": sorted(self.state.dead_sites()),
            "config": self.run.to_dict(),
        }
        if self.last_selection is not None:
            state["last_selection"] = base64.b64encode(
                self.last_selection.SerializeToString(deterministic=True)
            ).decode()
        if self.last_profiles is not None:
            state["last_profiles"] = base64.b64encode(
                profiler_pb2.GetProfilesResponse(columns=self.last_profiles).SerializeToString(
                    deterministic=True
                )
            ).decode()
        self.recorder.checkpoint(weights, state)

    def _publish(self, row: RoundRow) -> None:
        m = self.metrics
        m.round.set(row.round)
        m.selected.set(row.k)
        m.accuracy.set(row.accuracy)
        m.round_duration.labels(row.clock).observe(row.round_time_s)
        m.sim_time.labels(row.clock).set(row.sim_time_s)
        m.round_part.labels("compute").set(row.compute_s)
        m.round_part.labels("comm").set(row.comm_s)
        m.round_part.labels("wait").set(row.wait_s)
        with self.state.lock:
            s = self.state.status
            s.state, s.round, s.accuracy, s.sim_time_s, s.k = (
                "running",
                row.round,
                row.accuracy,
                row.sim_time_s,
                row.k,
            )
            s.last.CopyFrom(self.result.history[-1])

    # ---- the whole run -----------------------------------------------------------------
    def execute(self) -> LoopResult:
        """Run to the target, the round limit or the time budget; always write a summary."""
        run = self.run
        status = "done"
        message = ""
        creds = self.config.credentials
        with (
            open_channel(self.config.profiler, creds) as pch,
            open_channel(self.config.policy, creds) as ych,
        ):
            self.profiler = profiler_pb2_grpc.ProfilerStub(pch)
            self.policy = policy_pb2_grpc.PolicyStub(ych)
            try:
                self.wait_for_sites()
                with self.state.lock:
                    self.state.status.state = "running"
                    self.state.status.max_rounds = run.max_rounds
                if not self.result.stopped_reason:  # a resumed run may already be over
                    self.run_rounds(self.start_round)
            except (RunFailed, ValueError) as exc:
                status, message = "failed", str(exc)
                self.result.stopped_reason = "failed"
                log.error("run failed: %s", exc)
            finally:
                self.write_summary(status, message)
                with self.state.lock:
                    self.state.status.state = status
                    self.state.status.message = message
                self.state.finish()
        return self.result

    def run_rounds(self, first: int) -> None:
        """Rounds `first`..max_rounds. A round in which no site delivered is redone (its
        sites are now marked dead, so the policy picks others); the run fails only after
        MAX_EMPTY_ROUNDS of them in a row."""
        round_no, empty = first, 0
        while round_no <= self.run.max_rounds:
            try:
                stop = self.run_round(round_no)
            except EmptyRound as exc:
                empty += 1
                self.metrics.empty_rounds.inc()
                if empty >= MAX_EMPTY_ROUNDS:
                    raise RunFailed(f"{exc} ({empty} times in a row)") from None
                log.error("%s; redoing the round without the dead sites", exc)
                # every site may be dead now: give a slow worker one deadline to poll again
                if not self.state.wait_any_alive(self.run.round_deadline_s):
                    raise RunFailed(f"{exc}, and no site came back within the deadline") from None
                continue
            empty = 0
            if stop:
                return
            round_no += 1
        self.result.stopped_reason = "max_rounds"

    def write_summary(self, status: str, message: str) -> None:
        run, result = self.run, self.result
        rounds_k = [r.k for r in result.history]
        summary = {
            "policy": run.policy,
            "workload": run.workload,
            "clock": run.clock,
            "work_model": run.work_model,
            "estimator": run.estimator,
            "status": status,
            "message": message,
            "num_sites": run.num_sites,
            "seed": run.seed,
            "rounds": result.rounds,
            "target_accuracy": run.target_accuracy,
            "final_accuracy": result.accuracy,
            "best_accuracy": result.best_accuracy,
            "time_to_target_s": result.time_to_target_s,
            "time_to_target_h": None
            if result.time_to_target_s is None
            else result.time_to_target_s / 3600,
            "sim_time_s": result.sim_time_s,
            "stopped_reason": result.stopped_reason,
            "mean_k": float(np.mean(rounds_k)) if rounds_k else 0.0,
            "update_size_gb": run.update_size_gb,
            "sites": self._site_table(),
        }
        if run.clock == "simulated":
            summary["clock_note"] = (
                "simulated clock: real training and accuracy, time from the model"
            )
        else:
            summary["clock_note"] = (
                "wall clock: round times and their compute/comm/wait/aggregation breakdown "
                "are measured; predicted_round_time_s is empty because the policy predicts "
                "in the time model's seconds, which model_round_time_s records"
            )
        self.recorder.write_summary(summary)

    def _site_table(self) -> list[dict]:
        try:
            profiles = self.profiler.GetProfiles(
                profiler_pb2.GetProfilesRequest(at_s=0), timeout=10
            ).sites
        except (grpc.RpcError, AttributeError):
            return []
        return [
            {
                "site_id": p.site_id,
                "power_fraction": p.power_fraction,
                "distance_miles": p.distance_miles,
                "bandwidth_bytes_per_s": p.bandwidth_bytes_per_s,
            }
            for p in profiles
        ]


def _columns_of(reply: profiler_pb2.GetProfilesResponse) -> common_pb2.SiteColumns:
    """The reply's sites as columns, whichever form it carries: a profiler from before
    `columnar` (and checkpoints written then) answers with one message per site."""
    if reply.HasField("columns"):
        try:
            num_sites(reply.columns)
        except ColumnsError as exc:
            raise RunFailed(f"profiler sent malformed profiles: {exc}") from None
        return reply.columns
    return columns_from_profiles(reply.sites)


def _json_or_text(text: str):
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {"text": text}


def all_site_ids(num_sites: int) -> list[str]:
    return [make_site_id(i) for i in range(num_sites)]


__all__ = ["RoundLoop", "RunFailed", "all_site_ids", "initial_weights", "run_spec"]
