"""A round's energy, egress cost and carbon, from the facts the round loop holds.

The formulas are `powertrip.core.footprint`'s (pure, unit-tested); this module only says what a
round on each clock used: which sites, how many effective GPUs, for how many seconds of
compute out of how many held, and how many bytes crossed their links.

* Simulated clock: the time model's per-site compute and the straggler's finish; effective
  GPUs p_i x N_max,i; the bytes the time model charges (comm_directions x M per site).
  A centralized round is one co-located site at its power cap, with no link to cross.
* Wall clock: each delivering site's measured compute, held until the last delta arrived,
  NVML's joules where its worker measured them (DeltaHeader.energy_j), and the bytes the
  wire carried (the model down and the delta up). OUR CHOICE: a site that missed the
  deadline is not charged (nothing of it was measured).
"""

from __future__ import annotations

from collections.abc import Mapping

from powertrip.core.config import RunConfig
from powertrip.core.footprint import (
    FootprintSpec,
    RoundFootprint,
    SiteUse,
    round_footprint,
    spec_of,
)
from services.aggregator.clock import ModelRound, clock_of
from services.aggregator.domain import Selection, SiteProfile
from services.aggregator.round import RoundInProgress


class Accounting:
    """The run's footprint settings (carbon trace read once) and each round's footprint."""

    def __init__(self, run: RunConfig):
        self.run = run
        self.spec: FootprintSpec = spec_of(run)
        self.clock = clock_of(run)

    def _max_gpus(self, profile: SiteProfile | None) -> int:
        """N_max, the GPUs a power fraction is a fraction of. A profile's gpus_available is
        N_avail: N_max unless the run draws fewer (gpus_available_min/max_fraction below 1),
        and then N_max is the run's gpus_per_site."""
        run = self.run
        if (run.gpus_available_min_fraction, run.gpus_available_max_fraction) != (1.0, 1.0):
            return run.gpus_per_site
        if profile is not None and profile.gpus_available > 0:
            return int(profile.gpus_available)
        return self.run.gpus_per_site

    def _gpus(self, selection: Selection, profile: SiteProfile | None) -> float:
        """Effective GPUs p x N_max of a selected site; a centralized round runs at the cap."""
        if selection.centralized:
            power = selection.power_cap
        else:
            power = profile.power_fraction if profile is not None else 0.0
        return power * self._max_gpus(profile)

    def simulated_uses(
        self,
        selection: Selection,
        planned: ModelRound,
        profiles_by_id: Mapping[str, SiteProfile],
    ) -> list[SiteUse]:
        """What the time model says each selected site used."""
        held = planned.timing.round_time_s - planned.timing.aggregation_s
        if selection.centralized:
            site = selection.site_ids[0]
            gpus = self._gpus(selection, profiles_by_id.get(site))
            return [SiteUse(site, gpus, planned.times[0].compute_s, held, 0.0)]
        per_site = self.run.comm_directions * self.run.update_size_bytes
        return [
            SiteUse(
                t.site_id,
                self._gpus(selection, profiles_by_id.get(t.site_id)),
                t.compute_s,
                held,
                per_site,
            )
            for t in planned.times
        ]

    def measured_uses(
        self,
        selection: Selection,
        progress: RoundInProgress,
        profiles_by_id: Mapping[str, SiteProfile],
        model_bytes: int,
    ) -> list[SiteUse]:
        """What the wall clock measured of each site that delivered."""
        if not progress.finished_at:
            return []
        held = max(progress.finished_at.values()) - progress.started_at
        centralized = selection.centralized
        uses = []
        for site in selection.site_ids:
            if site not in progress.finished_at:
                continue
            measured = progress.energy_j.get(site) or None
            uses.append(
                SiteUse(
                    site,
                    self._gpus(selection, profiles_by_id.get(site)),
                    progress.compute_wall_s.get(site, 0.0),
                    held,
                    0.0 if centralized else 2.0 * model_bytes,
                    measured,
                )
            )
        return uses

    def round(
        self,
        selection: Selection,
        planned: ModelRound,
        profiles_by_id: Mapping[str, SiteProfile],
        progress: RoundInProgress,
        model_bytes: int,
        start_s: float,
    ) -> RoundFootprint:
        """The round's footprint on the run's clock; `start_s` is when it started (the
        carbon trace's time)."""
        if self.clock.measured:
            uses = self.measured_uses(selection, progress, profiles_by_id, model_bytes)
        else:
            uses = self.simulated_uses(selection, planned, profiles_by_id)
        return round_footprint(uses, self.spec, start_s)
