"""How much each selected site trains in a round, and how long its compute takes.

Three work models (DESIGN.md §2), chosen by `RunConfig.work_model`:

* ``local-steps`` (default, the paper's experiments): every selected site runs the
  workload's `local_steps`, which takes `tau / p_i`. More sites = more work per round.
* ``data-parallel`` (the reading of paper Eq. 7): the round has a fixed total work of
  W = `local_steps` x DP_REFERENCE_SITES site-steps, split among the selected sites in
  proportion to their power. Site i trains n_i = max(1, round(W p_i / sum p)) steps at
  tau_step / p_i each (tau_step = tau / local_steps), so every site computes for about
  W tau_step / sum p: adding power shortens compute instead of adding work.
* ``power-split`` (paper Eq. 7 as a split of the global batch): every selected site runs
  the same H = `local_steps` steps, site i on its own batch b_i of the global batch
  B = `batch_size` x DP_REFERENCE_SITES (OUR CHOICE), b_i proportional to p_i (`split_batch`
  says how it rounds), and FedAvg weighs site i's delta by the H b_i samples it trained on
  (the aggregator's `fedavg_weights`, not the site's data size). A step's time is linear in
  its batch (OUR CHOICE: t_sample = tau / (H batch_size)), so site i computes for
  H b_i t_sample / p_i = tau_B (b_i / B) / p_i with tau_B = tau B / batch_size =
  DP_REFERENCE_SITES tau, which is tau_B / sum p for exact shares: more power, shorter
  compute, and every delta still moves H steps (data-parallel's deltas shrink with k).

Also the wall clock's measured round breakdown, so rounds.csv says what happened there.
Pure functions, no I/O: the round loop and the unit tests call them directly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from powertrip.core.timemodel import DP_REFERENCE_SITES, RoundTime, compute_time_s

if TYPE_CHECKING:
    from services.aggregator.tasks import Task


@dataclass(frozen=True)
class SiteWork:
    """One selected site's share of a round: the local steps it trains, their modelled
    compute seconds, and its batch where the work model sets it (None: the run's)."""

    site_id: str
    steps: int
    compute_s: float
    batch_size: int | None = None


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


def power_split_global_batch(batch_size: int, reference_sites: int = DP_REFERENCE_SITES) -> int:
    """B, the power-split round's global batch: `batch_size` x `reference_sites` samples
    (OUR CHOICE, see powertrip.core.timemodel): 10 full-power sites each get `batch_size`."""
    if batch_size < 1 or reference_sites < 1:
        raise ValueError("batch_size and reference_sites must be >= 1")
    return batch_size * reference_sites


def split_batch(global_batch: int, powers: Sequence[float]) -> list[int]:
    """b_i: `global_batch` split in proportion to power, integers >= 1, in the order given.

    With k sites and B = `global_batch`: if k >= B every site gets 1 (sum k, which is B only
    when k = B). Otherwise sites whose quota B p_i / sum p is below 1 get 1, the rest of B
    is re-shared in proportion among the others (repeated until no quota is below 1), and
    those get the floor of their quota plus one for the largest remainders (ties: the
    stronger site, then the first in order) until the sum is exactly B (the largest-remainder
    method). A stronger site never gets fewer than a weaker one, and each b_i is within one
    of its quota, or 1 where the quota is below 1."""
    if global_batch < 1:
        raise ValueError("global_batch must be >= 1")
    if not powers:
        raise ValueError("a round needs at least one site")
    if any(not p > 0 for p in powers):
        raise ValueError("every selected site needs power > 0")
    k = len(powers)
    if k >= global_batch:
        return [1] * k
    floored: set[int] = set()
    while True:
        rest = [i for i in range(k) if i not in floored]
        left = global_batch - len(floored)
        power = float(sum(powers[i] for i in rest))
        quota = {i: left * powers[i] / power for i in rest}
        below = {i for i, q in quota.items() if q < 1}
        if not below:  # never all of rest: the quotas sum to left > len(rest)
            break
        floored |= below
    out = [1] * k
    for i in rest:
        out[i] = math.floor(quota[i])
    short = left - sum(out[i] for i in rest)
    by_remainder = sorted(rest, key=lambda i: (-(quota[i] - out[i]), -powers[i], i))
    for i in by_remainder[:short]:
        out[i] += 1
    return out


def power_split(
    site_ids: Sequence[str],
    powers: Sequence[float],
    *,
    local_steps: int,
    tau_s: float,
    batch_size: int,
    reference_sites: int = DP_REFERENCE_SITES,
) -> list[SiteWork]:
    """Every site trains `local_steps` steps on its batch b_i of B (`split_batch`), computing
    for tau_B (b_i / B) / p_i, tau_B = tau x reference_sites (= tau B / batch_size: a step's
    time is linear in its batch), so about tau_B / sum p each. A site whose floor of one
    sample outlasts that is what the model says, and becomes the straggler."""
    if len(site_ids) != len(powers):
        raise ValueError("site_ids and powers differ in length")
    if local_steps < 1:
        raise ValueError("local_steps must be >= 1")
    global_batch = power_split_global_batch(batch_size, reference_sites)
    batches = split_batch(global_batch, powers)
    tau_global_s = tau_s * reference_sites
    return [
        SiteWork(site, local_steps, tau_global_s * (b / global_batch) / power, b)
        for site, power, b in zip(site_ids, powers, batches, strict=True)
    ]


def split_work(
    work_model: str,
    site_ids: Sequence[str],
    powers: Sequence[float],
    *,
    local_steps: int,
    tau_s: float,
    batch_size: int | None = None,
) -> list[SiteWork]:
    """Each site's steps, modelled compute and (power-split, which needs `batch_size`, the
    run's) batch under `work_model`."""
    if work_model == "local-steps":
        return local_steps_split(site_ids, powers, local_steps=local_steps, tau_s=tau_s)
    if work_model == "data-parallel":
        return data_parallel_split(site_ids, powers, local_steps=local_steps, tau_s=tau_s)
    if work_model == "power-split":
        if batch_size is None:
            raise ValueError("the power-split work model needs the run's batch_size")
        return power_split(
            site_ids, powers, local_steps=local_steps, tau_s=tau_s, batch_size=batch_size
        )
    raise ValueError(
        f"work_model must be one of 'local-steps', 'data-parallel', 'power-split', "
        f"got {work_model!r}"
    )


def fedavg_weights(tasks: Iterable[Task]) -> dict[str, float]:
    """site -> FedAvg weight for a power-split round: the samples its task trains on,
    local_steps x batch_size (H b_i, so the weights follow the batch shares b_i / B). The
    other work models weigh by the num_samples a site reports (its data size) instead."""
    return {t.site_id: float(t.local_steps * t.batch_size) for t in tasks}


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
