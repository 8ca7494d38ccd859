"""How much each selected site trains in a round, and how long its compute takes.

Two work models (DESIGN.md §2), chosen by `RunConfig.work_model`:

* ``local-steps`` (default, the paper's experiments): every selected site runs the
  workload's `local_steps`, which takes `tau / p_i`. More sites = more work per round.
* ``data-parallel`` (the reading of paper Eq. 7): the round has a fixed total work of
  W = `local_steps` x DP_REFERENCE_SITES site-steps, split among the selected sites in
  proportion to their power. Site i trains n_i = max(1, round(W p_i / sum p)) steps at
  tau_step / p_i each (tau_step = tau / local_steps), so every site computes for about
  W tau_step / sum p: adding power shortens compute instead of adding work.

Also the wall clock's measured round breakdown, so rounds.csv says what happened there.
Pure functions, no I/O: the round loop and the unit tests call them directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from powertrip.timemodel import DP_REFERENCE_SITES, RoundTime, compute_time_s


@dataclass(frozen=True)
class SiteWork:
    """One selected site's share of a round: the local steps it trains and their
    modelled compute seconds."""

    site_id: str
    steps: int
    compute_s: float


def data_parallel_total_steps(local_steps: int, reference_sites: int = DP_REFERENCE_SITES) -> int:
    """W, the data-parallel round's fixed total work in site-steps."""
    if local_steps < 1 or reference_sites < 1:
        raise ValueError("local_steps and reference_sites must be >= 1")
    return local_steps * reference_sites


def data_parallel_split(
    site_ids: Sequence[str],
    powers: Sequence[float],
    *,
    local_steps: int,
    tau_s: float,
    reference_sites: int = DP_REFERENCE_SITES,
) -> list[SiteWork]:
    """W split in proportion to power: n_i = max(1, round(W p_i / sum p)) steps, computing
    for n_i tau_step / p_i, in the order given. Rounding (half up) and the one-step floor make
    sum n_i differ from W by at most about one step per site; a site so weak that its floor
    of one step outlasts W tau_step / sum p is what the model says, and becomes the straggler."""
    if len(site_ids) != len(powers):
        raise ValueError("site_ids and powers differ in length")
    if not site_ids:
        raise ValueError("a round needs at least one site")
    if any(p <= 0 for p in powers):
        raise ValueError("every selected site needs power > 0")
    total_power = float(sum(powers))
    total_steps = data_parallel_total_steps(local_steps, reference_sites)
    step_s = tau_s / local_steps
    out = []
    for site, power in zip(site_ids, powers, strict=True):
        steps = max(1, math.floor(total_steps * power / total_power + 0.5))
        out.append(SiteWork(site, steps, steps * step_s / power))
    return out


def local_steps_split(
    site_ids: Sequence[str], powers: Sequence[float], *, local_steps: int, tau_s: float
) -> list[SiteWork]:
    """The default model: every site trains `local_steps`, computing for tau / p_i."""
    return [
        SiteWork(site, local_steps, compute_time_s(tau_s, power))
        for site, power in zip(site_ids, powers, strict=True)
    ]


def split_work(
    work_model: str,
    site_ids: Sequence[str],
    powers: Sequence[float],
    *,
    local_steps: int,
    tau_s: float,
) -> list[SiteWork]:
    """Each site's steps and modelled compute under `work_model`."""
    if work_model == "local-steps":
        return local_steps_split(site_ids, powers, local_steps=local_steps, tau_s=tau_s)
    if work_model == "data-parallel":
        return data_parallel_split(site_ids, powers, local_steps=local_steps, tau_s=tau_s)
    raise ValueError(f"work_model must be 'local-steps' or 'data-parallel', got {work_model!r}")


def measured_breakdown(
    finished_s: Mapping[str, float],
    compute_wall_s: Mapping[str, float],
    collected_s: float,
    aggregation_s: float,
    round_time_s: float,
) -> RoundTime:
    """The wall clock's round, as measured rather than modelled.

    Times are seconds since the round's tasks were handed out. `finished_s` is when each
    delivering site's delta was accepted, `compute_wall_s` its worker's measured local
    training time, `collected_s` when the loop stopped waiting (the last delta or the
    deadline). The straggler is the site that finished last; its compute is its measured
    training and its comm everything else it spent (download, upload, waiting its turn on a
    worker that hosts several sites). wait is the mean over the delivering sites of
    collected_s - finish: sites that missed the deadline never finished and are left out.
    """
    if not finished_s:
        raise ValueError("no site delivered")
    straggler = max(finished_s, key=lambda s: (finished_s[s], s))
    finish = finished_s[straggler]
    compute = min(max(compute_wall_s.get(straggler, 0.0), 0.0), finish)
    waits = [max(collected_s - t, 0.0) for t in finished_s.values()]
    return RoundTime(
        round_time_s=round_time_s,
        compute_s=compute,
        comm_s=finish - compute,
        wait_s=sum(waits) / len(waits),
        straggler=straggler,
        aggregation_s=aggregation_s,
    )
