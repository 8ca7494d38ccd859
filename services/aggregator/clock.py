"""The run's two clocks, and each one's reading of a round.

Simulated: how long the time model says a selected round takes (paper §2-3). The work
model decides each site's steps and compute (workmodel.py); communication is Eq. 3 per
direction from `powertrip.core.timemodel.site_comm_s`, the same function the policy's site
table estimates with, so the two can only differ in the links they see.
Wall: what the round measurably took, from the timestamps its uploads left.

`clock_of(run)` picks the run's clock once; `SimulatedClock` and `WallClock` own all that
differs between the two (planning is the same: both record the time model's round): the
time-budget check before a round, the round's measure, its footprint's source, and the
fields each clock writes to rounds.csv, decisions.jsonl and summary.json. Nothing else in
the aggregator asks which clock the run is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, NamedTuple

from powertrip.core.clocks import SIMULATED, WALL
from powertrip.core.config import RunConfig
from powertrip.core.timemodel import RoundTime, SiteTime, round_time, site_comm_s
from services.aggregator.domain import Selection, SiteProfile
from services.aggregator.round import RoundInProgress
from services.aggregator.stopping import stop_before_round
from services.aggregator.workmodel import measured_breakdown, split_work


class ModelRound(NamedTuple):
    """A selection's round on the time model."""

    round_s: float
    timing: RoundTime
    times: list[SiteTime]
    steps: dict[str, int]  # each site's local steps
    #: each site's batch where the work model sets it (power-split); None: the run's
    batches: dict[str, int] | None = None


def simulated_time(
    run: RunConfig,
    selection: Selection,
    profiles_by_id: Mapping[str, SiteProfile],
) -> ModelRound:
    """The time model's round for `selection`, from the selected sites' profiles."""
    if selection.centralized:
        # one site, power-capped, training on the pooled data; no link to cross
        site = selection.site_ids[0]
        work = split_work(
            run.work_model,
            [site],
            [selection.power_cap],
            local_steps=run.local_steps,
            tau_s=run.tau_s,
            batch_size=run.batch_size,
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
            batch_size=run.batch_size,
        )
        _, comm_s = site_comm_s(
            [prof.latency_s for prof in profs],
            [prof.bandwidth_bytes_per_s for prof in profs],
            run.update_size_bytes,
            run.comm_directions,
        )
        comm = comm_s.tolist()  # Python floats, as the records have always held
    times = [SiteTime(w.site_id, w.compute_s, c) for w, c in zip(work, comm, strict=True)]
    timing = round_time(times, aggregation_s=run.aggregation_s)
    batches = {w.site_id: w.batch_size for w in work if w.batch_size is not None}
    return ModelRound(
        timing.round_time_s,
        timing,
        times,
        {w.site_id: w.steps for w in work},
        batches or None,
    )


def measured_time(
    progress: RoundInProgress, collected_at: float, aggregation_s: float, round_s: float
) -> RoundTime:
    """What happened, not what the model says: the straggler's measured training and the
    rest of its round, the sites' measured idle time, the measured FedAvg (`aggregation_s`).
    `collected_at` is the time.monotonic() at which the round stopped collecting."""
    return measured_breakdown(
        {s: t - progress.started_at for s, t in progress.finished_at.items()},
        progress.compute_wall_s,
        collected_at - progress.started_at,
        aggregation_s=aggregation_s,
        round_time_s=round_s,
    )


class MeasuredRound(NamedTuple):
    """A trained round on the run's clock."""

    round_s: float  # the round's length on the run's clock
    timing: RoundTime  # the model's breakdown, or the measured one on the wall clock
    predicted_s: float | None  # the policy's prediction; None on the wall clock
    #: each delivering site's own duration on the run's clock (compute + communication)
    site_durations: dict[str, float]


class Clock:
    """What a run's clock decides; `clock_of` picks the subclass for the run."""

    #: the run's `clock` setting, as rounds.csv's `clock` column and summary.json write it
    name: ClassVar[str]
    #: whether a round's footprint is what was measured (else what the time model says)
    measured: ClassVar[bool]
    #: summary.json's clock_note
    note: ClassVar[str]

    def __init__(self, run: RunConfig):
        self.run = run

    def plan(self, selection: Selection, profiles_by_id: Mapping[str, SiteProfile]) -> ModelRound:
        """The time model's round for `selection` (on either clock: the wall clock records
        it beside what it measures)."""
        return simulated_time(self.run, selection, profiles_by_id)

    def stop_before(self, sim_time_s: float, planned: ModelRound) -> str | None:
        """Why the run stops before training the planned round, or None."""
        return None

    def measure(
        self,
        planned: ModelRound,
        selection: Selection,
        progress: RoundInProgress,
        collected_at: float,
        aggregation_s: float,
        wall_round_s: float,
    ) -> MeasuredRound:
        """The trained round on this clock. `collected_at` is the time.monotonic() at which
        the round stopped collecting, `aggregation_s` the wall seconds of FedAvg and
        `wall_round_s` the round's real length."""
        raise NotImplementedError

    def row_fields(self, model_round_s: float) -> dict[str, object]:
        """The round's rounds.csv cells that depend on the clock."""
        return {"clock": self.name, "model_round_time_s": None}

    def decision_fields(self, model_round_s: float) -> dict[str, object]:
        """The round's decisions.jsonl keys that depend on the clock."""
        return {}


class SimulatedClock(Clock):
    """Real training and accuracy, time from the model."""

    name = SIMULATED.name
    measured = SIMULATED.measured
    note = SIMULATED.summary_note

    def stop_before(self, sim_time_s: float, planned: ModelRound) -> str | None:
        """A round's length is known before it runs: do not train one that would end after
        the time budget."""
        return stop_before_round(sim_time_s, planned.round_s, self.run.max_sim_hours)

    def measure(
        self,
        planned: ModelRound,
        selection: Selection,
        progress: RoundInProgress,
        collected_at: float,
        aggregation_s: float,
        wall_round_s: float,
    ) -> MeasuredRound:
        return MeasuredRound(
            planned.round_s,
            planned.timing,
            selection.predicted_round_time_s,
            {t.site_id: t.total_s for t in planned.times},
        )


class WallClock(Clock):
    """Round times and their breakdown as measured."""

    name = WALL.name
    measured = WALL.measured
    note = WALL.summary_note

    def measure(
        self,
        planned: ModelRound,
        selection: Selection,
        progress: RoundInProgress,
        collected_at: float,
        aggregation_s: float,
        wall_round_s: float,
    ) -> MeasuredRound:
        # the policy predicts in the time model's seconds: no prediction on this clock
        return MeasuredRound(
            wall_round_s,
            measured_time(progress, collected_at, aggregation_s, wall_round_s),
            None,
            {s: t - progress.started_at for s, t in progress.finished_at.items()},
        )

    def row_fields(self, model_round_s: float) -> dict[str, object]:
        return {"clock": self.name, "model_round_time_s": model_round_s}

    def decision_fields(self, model_round_s: float) -> dict[str, object]:
        return {"model_round_time_s": model_round_s}


CLOCK_CLASSES: dict[str, type[Clock]] = {c.name: c for c in (SimulatedClock, WallClock)}


def clock_of(run: RunConfig) -> Clock:
    """The run's clock, from its `clock` setting."""
    try:
        return CLOCK_CLASSES[run.clock](run)
    except KeyError:
        raise ValueError(f"unknown clock {run.clock!r}; known: {sorted(CLOCK_CLASSES)}") from None
