"""The round loop: ask the policy, dispatch, collect, FedAvg, evaluate, advance the clock.

Runs in its own thread beside the gRPC handlers and talks to the profiler and the policy
only through its ControlClient. Time comes from the model (paper §2-3) on the simulated
clock, or from real elapsed time on the wall clock: the run's Clock (clock.py) decides
everything that differs between the two. When to stop is decided in stopping.py alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from powertrip.core import provenance, runfiles
from powertrip.core.footprint import RoundFootprint
from powertrip.core.outer import outer_of, outer_update
from powertrip.core.workloads import get_workload
from services.aggregator.accounting import Accounting
from services.aggregator.audit import DeltaAudit
from services.aggregator.checkpoint_store import CheckpointStore, restore_site_ids
from services.aggregator.clock import ModelRound, clock_of
from services.aggregator.config import AggregatorConfig
from services.aggregator.control_client import ControlClient
from services.aggregator.domain import Profiles, Selection, SiteProfile
from services.aggregator.errors import EmptyRound, RunFailed
from services.aggregator.evaluator import Evaluator, initial_weights
from services.aggregator.metrics import AggregatorMetrics
from services.aggregator.records import RunRecorder, WallTimes
from services.aggregator.report import FinishedRound, round_files, run_summary
from services.aggregator.round import RoundInProgress, open_round
from services.aggregator.run_result import CheckpointRecord, LoopResult
from services.aggregator.state import AggregatorState
from services.aggregator.stopping import MAX_ROUNDS, TARGET_REACHED, stop_reason

log = logging.getLogger("aggregator")
#: consecutive empty rounds before the run gives up (each one marks its sites dead first)
MAX_EMPTY_ROUNDS = 3


@dataclass
class TrainedRound:
    """A round's new model and its evaluation, with the wall-clock seconds of each step
    (those of the phases are in the round's WallTimes)."""

    progress: RoundInProgress
    weights: dict[str, np.ndarray]
    accuracy: float
    loss: float
    collected_at: float  # time.monotonic() once every delta was in or the deadline passed
    wall_aggregation_s: float  # FedAvg's result applied (what the wall clock's rows show)


class RoundLoop:
    def __init__(
        self, config: AggregatorConfig, state: AggregatorState, metrics: AggregatorMetrics
    ):
        self.config = config
        self.run = config.run
        self.clock = clock_of(self.run)
        self.state = state
        self.metrics = metrics
        self.workload = get_workload(self.run.workload, self.run.peft)
        self.evaluator = Evaluator(self.workload, self.run)
        self.control = ControlClient(self.run, metrics)
        self.checkpoints = CheckpointStore(config.out_dir, self.run)
        self.accounting = Accounting(self.run)
        self.audit = DeltaAudit(config.audit_dir) if config.audit_dir else None
        #: the outer optimizer and its buffer (powertrip/core/outer.py; None for fedavg, and
        #: before the first round): loop state, so the checkpoint carries it
        self.outer = outer_of(self.run)
        self.outer_buffer: dict[str, np.ndarray] | None = None
        self.recorder: RunRecorder | None = None
        self.result = LoopResult()
        self.start_round = 1
        self.wall_started = time.monotonic()  # max_wall_hours counts from run_rounds

    # ---- set-up ------------------------------------------------------------------------
    def prepare(self) -> None:
        """Load held-out data and the initial model before any worker is served."""
        self.evaluator.load()
        initial = initial_weights(self.workload, self.run.seed)
        resumed = self.checkpoints.load(initial) if self.config.resume else None
        if resumed is None:
            if self.config.resume:
                log.warning(
                    "--resume: no checkpoint in %s; starting from round 1", self.config.out_dir
                )
            self.recorder = RunRecorder(self.config.out_dir, clock=self.clock.name)
            self.state.model.install(initial, version=0)
            if self.audit is not None:
                self.audit.start(initial, self.outer)
        else:
            self._resume(resumed)
        self.run.write_yaml(self.config.out_dir / runfiles.CONFIG, made_by=provenance.collect())

    def _resume(self, record: CheckpointRecord) -> None:
        """Continue from a checkpoint: same model bytes, same loop state, same files."""
        self.result = record.result
        self.start_round = record.round + 1
        self.recorder = RunRecorder(
            self.config.out_dir, keep_rounds=record.round, clock=self.clock.name
        )
        restore_site_ids(self.result, self.config.out_dir)
        self.outer_buffer = record.outer_buffer
        self.state.restore_checkpoint(record)
        self.control.restore_checkpoint(record)
        log.info(
            "resumed from the checkpoint of round %d (simulated time %.1fs)",
            self.result.rounds,
            self.result.sim_time_s,
        )

    def wait_for_sites(self) -> None:
        """Wait until enough sites are hosted: all of them, or `--min-sites`. With fewer,
        the rest join the ranking from the round after they register."""
        needed = self.config.min_sites or self.run.num_sites
        deadline = time.monotonic() + self.config.register_timeout_s
        # say every 30 s who is missing: with remote sites (POWERTRIP_LOCAL_SITES below
        # POWERTRIP_SITES) the run waits for workers started elsewhere
        while not self.state.registry.wait_registered(
            needed, min(deadline, time.monotonic() + 30.0)
        ):
            if time.monotonic() >= deadline:
                break
            log.info(
                "waiting for sites: %d of %d registered (%d needed to start)",
                self.state.registry.registered_count(), self.run.num_sites, needed,
            )  # fmt: skip
        hosted = self.state.registry.registered_count()
        if hosted < needed:
            least = "" if needed == self.run.num_sites else f" (--min-sites {needed})"
            raise RunFailed(
                f"only {hosted} of {self.run.num_sites} sites registered "
                f"within {self.config.register_timeout_s:.0f}s{least}"
            )
        if hosted < self.run.num_sites:
            log.info(
                "starting with %d of %d sites (--min-sites %d); the others join the ranking "
                "from the round after their worker registers",
                hosted, self.run.num_sites, needed,
            )  # fmt: skip

    # ---- one round ---------------------------------------------------------------------
    def dispatch(
        self,
        round_no: int,
        selection: Selection,
        steps: dict[str, int] | None = None,
        batches: dict[str, int] | None = None,
    ) -> RoundInProgress:
        """Hand each selected site its task and open the round for uploads (round.open_round
        says what a round holds)."""
        progress = open_round(
            self.run, round_no, selection, self.state.model.version, self.state.model.weights,
            steps or {}, batches, self.audit,
        )  # fmt: skip
        self.state.queue.install_round(progress)
        return progress

    def collect(self, progress: RoundInProgress) -> None:
        """Wait for every delta or the deadline; sites that miss it are skipped, not waited on."""
        deadline = time.monotonic() + self.run.round_deadline_s
        missing, dead_now = self.state.queue.close_round(progress, deadline)
        if missing:
            log.warning(
                "round %d: %d site(s) missed the deadline: %s",
                progress.round,
                len(missing),
                ", ".join(missing[:5]),
                extra={"round": progress.round},
            )
        self.metrics.show_collected(missed=len(missing), dead=dead_now)
        if not progress.received:
            raise EmptyRound(f"round {progress.round}: no site returned a delta")

    def run_round(self, round_no: int) -> bool:
        """One synchronous round; returns True when the run should stop."""
        wall, wall_start = WallTimes(), time.monotonic()
        with wall.phase("profiles"):
            profiles = self._profiles()
        with wall.phase("select"):
            selection, profiles_by_id = self._select(round_no, profiles)
            planned = self.clock.plan(selection, profiles_by_id)
        reason = self.clock.stop_before(self.result.sim_time_s, planned)
        if reason:
            self.result.stopped_reason = reason
            return True
        trained = self._train(round_no, selection, planned, wall)
        wall.train_s = trained.collected_at - wall_start
        wall_round_s = wall.round_s = time.monotonic() - wall_start
        with wall.phase("record"):
            footprint = self.accounting.round(
                selection, planned, profiles_by_id, trained.progress, self.state.model.nbytes,
                self.result.sim_time_s,
            )  # fmt: skip
            done = self._advance(round_no, selection, planned, trained, wall_round_s, footprint)
            self._record(done)
            stop = self._stop_after(done.accuracy, done.loss)
            if self.run.checkpoint:
                self.save_checkpoint(round_no, trained.weights, trained.progress.model_version + 1)
        # last: a crash just before leaves a round without its wall.csv row, never a row for
        # a round the files do not have (a resume drops rows after its checkpoint's round)
        self.recorder.add_wall(round_no, wall)
        log.info(
            "round %d: k=%d acc=%.4f %s time=%.1fs (+%.1fs, wall %.1fs)",
            round_no,
            done.k,
            done.accuracy,
            self.clock.name,
            self.result.sim_time_s,
            done.round_s,
            wall_round_s,
            extra={"round": round_no},
        )
        return stop

    def _profiles(self) -> Profiles:
        """The profiles at the run's time, dead sites marked unavailable."""
        return self.state.registry.hide_dead(self.control.profiles(self.result.sim_time_s))

    def _select(
        self, round_no: int, profiles: Profiles
    ) -> tuple[Selection, Mapping[str, SiteProfile]]:
        """The policy's selection on `profiles`, and the selected sites' profiles."""
        selection = self.control.select(round_no, profiles, self.result.history)
        if not selection.site_ids:
            raise RunFailed(f"policy {self.run.policy} selected no site in round {round_no}")
        return selection, profiles.selected(selection.site_ids)

    def _train(
        self, round_no: int, selection: Selection, planned: ModelRound, wall: WallTimes
    ) -> TrainedRound:
        """Dispatch, collect, average, evaluate, and install the new model; each phase's
        seconds go to `wall`."""
        with wall.phase("dispatch"):
            progress = self.dispatch(round_no, selection, planned.steps, planned.batches)
        with wall.phase("collect"):
            self.collect(progress)
        collected_at = time.monotonic()
        with wall.phase("aggregate"):
            new_weights, outer_buffer = outer_update(
                self.state.model.weights, progress.fedavg.result(), self.outer_buffer, self.outer
            )
        wall_aggregation_s = wall.aggregate_s  # FedAvg alone, before the evaluation
        with wall.phase("eval"):
            accuracy, loss = self.evaluator.evaluate(new_weights)
        with wall.phase("aggregate"):
            self.state.model.install(new_weights, version=progress.model_version + 1)
            self.outer_buffer = outer_buffer
            progress.fedavg.commit_audit()
        return TrainedRound(
            progress=progress,
            weights=new_weights,
            accuracy=accuracy,
            loss=loss,
            collected_at=collected_at,
            wall_aggregation_s=wall_aggregation_s,
        )

    def _advance(
        self,
        round_no: int,
        selection: Selection,
        planned: ModelRound,
        trained: TrainedRound,
        wall_round_s: float,
        footprint: RoundFootprint,
    ) -> FinishedRound:
        """Advance the run's clock, result and footprint by the round just trained."""
        result = self.result
        measured = self.clock.measure(
            planned, selection, trained.progress, trained.collected_at,
            trained.wall_aggregation_s, wall_round_s,
        )  # fmt: skip
        result.book(footprint, trained.progress.encoding_error)
        result.sim_time_s += measured.round_s
        result.rounds = round_no
        result.accuracy = trained.accuracy
        result.best_accuracy = max(result.best_accuracy, trained.accuracy)
        return FinishedRound(
            round_no=round_no,
            selection=selection,
            progress=trained.progress,
            steps=planned.steps,
            accuracy=trained.accuracy,
            loss=trained.loss,
            round_s=measured.round_s,
            model_round_s=planned.round_s,
            timing=measured.timing,
            predicted_s=measured.predicted_s,
            sim_time_s=result.sim_time_s,
            model_bytes=self.state.model.nbytes,
            dead_sites=self.state.registry.dead_sites(),
            footprint=footprint,
            site_durations=measured.site_durations,
        )

    def _record(self, done: FinishedRound) -> None:
        """Write the round's row and decision, add it to the history, publish it."""
        files = round_files(self.run, self.clock, done)
        self.recorder.add_round(files.row, files.decision)
        self.result.history.append(files.history)
        self.metrics.show_round(files.row)
        self.state.status.publish_round(files.history)

    def _stop_after(self, accuracy: float, loss: float) -> bool:
        result = self.result
        reason = stop_reason(
            accuracy,
            self.run.target_accuracy,
            result.time_to_target_s is not None,
            result.sim_time_s,
            self.run.max_sim_hours,
            loss=loss,
            target_perplexity=self.run.target_perplexity,
            wall_s=time.monotonic() - self.wall_started,
            max_wall_hours=self.run.max_wall_hours,
        )
        if reason == TARGET_REACHED:
            result.time_to_target_s = result.sim_time_s
            if result.footprint is not None:
                result.footprint_at_target = result.footprint.summary()
        if reason:
            result.stopped_reason = reason
        return reason is not None

    def save_checkpoint(
        self, round_no: int, weights: dict[str, np.ndarray], model_version: int
    ) -> None:
        """Model plus every piece of loop state the following rounds depend on."""
        record = CheckpointRecord(
            round_no, model_version, weights, self.result, outer_buffer=self.outer_buffer
        )
        self.checkpoints.save(record, self.state, self.control)

    # ---- the whole run -----------------------------------------------------------------
    def execute(self) -> LoopResult:
        """Run to the target, the round limit or the time budget; always write a summary."""
        status, message = "done", ""
        config = self.config
        with self.control.connected(config.profiler, config.policy, config.credentials):
            try:
                self.wait_for_sites()
                self.state.status.start_running(self.run.max_rounds)
                self.metrics.show_state("running")
                if not self.result.stopped_reason:  # a resumed run may already be over
                    self.run_rounds(self.start_round)
            except (RunFailed, ValueError) as exc:
                status, message = "failed", str(exc)
                self.result.stopped_reason = "failed"
                log.error("run failed: %s", exc)
            finally:
                try:
                    self.checkpoints.flush()  # the summary comes after the last checkpoint
                except OSError as exc:
                    status, message = "failed", f"checkpoint: {exc}"
                    log.error("run failed: %s", message)
                self.write_summary(status, message)
                self.state.finish(status, message)
                self.metrics.show_state(status)
        return self.result

    def run_rounds(self, first: int) -> None:
        """Rounds `first`..max_rounds. A round in which no site delivered is redone (its
        sites are now marked dead, so the policy picks others); the run fails only after
        MAX_EMPTY_ROUNDS of them in a row."""
        self.wall_started = time.monotonic()
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
                if not self.state.registry.wait_any_alive(self.run.round_deadline_s):
                    raise RunFailed(f"{exc}, and no site came back within the deadline") from None
                continue
            empty = 0
            if stop:
                return
            round_no += 1
        self.result.stopped_reason = MAX_ROUNDS

    def write_summary(self, status: str, message: str) -> None:
        sites = self.control.site_table()
        meters = dict(self.state.registry.energy_meters)
        summary = run_summary(self.run, self.result, status, message, sites, meters)
        self.recorder.write_summary(summary)


__all__ = ["MAX_EMPTY_ROUNDS", "RoundLoop"]
