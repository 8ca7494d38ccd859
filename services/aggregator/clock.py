"""The run's two clocks' reading of a round.

Simulated: how long the time model says a selected round takes (paper §2-3). The work
model decides each site's steps and compute (workmodel.py); communication is Eq. 3 per
direction from `powertrip.core.timemodel.site_comm_s`, the same function the policy's site
table estimates with, so the two can only differ in the links they see.
Wall: what the round measurably took, from the timestamps its uploads left.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from powertrip.core.config import RunConfig
from powertrip.core.timemodel import RoundTime, SiteTime, round_time, site_comm_s
from services.aggregator.domain import Selection, SiteProfile
from services.aggregator.round import RoundInProgress
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
