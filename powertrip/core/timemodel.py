"""The time model of the PowerTrip paper (§2-3), as pure functions.

Symbols follow the paper: D_i distance, c propagation speed, B_i bandwidth, M update size,
tau the modelled local work at full power, p_i the site's power fraction. Everything is in
SI units (metres, seconds, bytes) except distances, which the paper gives in miles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

METRES_PER_MILE = 1609.344
SPEED_OF_LIGHT_M_PER_S = 299_792_458.0
#: Light in optical fibre travels at about 2/3 of c (refractive index ~1.5).
FIBER_SPEED_M_PER_S = SPEED_OF_LIGHT_M_PER_S * 2.0 / 3.0
GB = 1e9
#: The data-parallel work model's round (paper Eq. 7): W = local_steps x DP_REFERENCE_SITES
#: site-steps split by power. 10 makes a round of 10 full-power sites cost what it costs
#: under local-steps (each does local_steps, compute tau); fewer sites each do more, more
#: sites each do less. A constant of the work model, not a run setting, so data-parallel
#: runs with different k do the same work per round and compare directly. The aggregator's
#: clock and the policy's estimate both read it here.
DP_REFERENCE_SITES = 10
#: The power-split work model's round (paper Eq. 7 read as a split of the global batch):
#: every selected site runs local_steps steps, site i on b_i of the round's global batch
#: B = batch_size x DP_REFERENCE_SITES samples, b_i proportional to p_i (OUR CHOICE: B is a
#: constant of the work model, not a run setting, so 10 full-power sites each get batch_size
#: as under the other models, and the policy's estimate needs nothing beyond tau). A step's
#: time is linear in its batch (OUR CHOICE), so tau_B, the full-power time of local_steps
#: steps on batch B, is tau x B / batch_size = DP_REFERENCE_SITES x tau; site i computes for
#: tau_B (b_i / B) / p_i, which is tau_B / sum(p) when b_i / B = p_i / sum(p) exactly.
WORK_MODELS = ("local-steps", "data-parallel", "power-split")


def propagation_delay_s(distance_miles: float, speed_m_per_s: float = FIBER_SPEED_M_PER_S) -> float:
    """One-way propagation delay D_i / c."""
    if distance_miles < 0:
        raise ValueError(f"distance_miles must be >= 0, got {distance_miles}")
    return distance_miles * METRES_PER_MILE / speed_m_per_s


def comm_time_s(
    distance_miles: float,
    bandwidth_bytes_per_s: float,
    update_size_bytes: float,
    speed_m_per_s: float = FIBER_SPEED_M_PER_S,
) -> float:
    """One-way communication time T_comm,i = D_i / c + M / B_i (paper Eq. 3)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s}")
    if update_size_bytes < 0:
        raise ValueError(f"update_size_bytes must be >= 0, got {update_size_bytes}")
    return (
        propagation_delay_s(distance_miles, speed_m_per_s)
        + update_size_bytes / bandwidth_bytes_per_s
    )


def comm_time_from_latency_s(
    latency_s: float, bandwidth_bytes_per_s: float, update_size_bytes: float
) -> float:
    """Eq. 3 when the one-way latency is already known (configured or measured)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s}")
    return latency_s + update_size_bytes / bandwidth_bytes_per_s


def comm_parts_s(
    latency_s: float, bandwidth_bytes_per_s: float, update_size_bytes: float
) -> tuple[float, float]:
    """Eq. 3 split into (propagation D_i / c, transfer M / B_i), so an estimator can charge
    either part on its own (their sum is `comm_time_from_latency_s`)."""
    if latency_s < 0:
        raise ValueError(f"latency_s must be >= 0, got {latency_s}")
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {bandwidth_bytes_per_s}")
    if update_size_bytes < 0:
        raise ValueError(f"update_size_bytes must be >= 0, got {update_size_bytes}")
    return float(latency_s), update_size_bytes / bandwidth_bytes_per_s


def comm_parts_array_s(
    latency_s: np.ndarray, bandwidth_bytes_per_s: np.ndarray, update_size_bytes: float
) -> tuple[np.ndarray, np.ndarray]:
    """`comm_parts_s` over arrays of sites (float64, broadcast), for per-round estimators
    over thousands of sites; the same checks, applied to every element."""
    latency = np.asarray(latency_s, dtype=np.float64)
    bandwidth = np.asarray(bandwidth_bytes_per_s, dtype=np.float64)
    if np.any(latency < 0) or np.any(np.isnan(latency)):
        raise ValueError("latency_s must be >= 0 for every site")
    if not np.all(bandwidth > 0):
        raise ValueError("bandwidth_bytes_per_s must be > 0 for every site")
    if update_size_bytes < 0:
        raise ValueError(f"update_size_bytes must be >= 0, got {update_size_bytes}")
    propagation, bandwidth = np.broadcast_arrays(latency, bandwidth)
    return propagation.copy(), float(update_size_bytes) / bandwidth


def site_comm_s(
    latency_s: np.ndarray | Sequence[float],
    bandwidth_bytes_per_s: np.ndarray | Sequence[float],
    update_size_bytes: float,
    directions: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 3 for every site, charged `directions` times a round: (transfer M / B_i, comm).

    The one place the round's communication is computed: the policy's site table (what it
    estimates) and the aggregator's clock (what it charges) both call it, so the two can
    only differ in the links they are given (measured or configured), never in the formula.
    """
    if int(directions) < 1:
        raise ValueError(f"directions must be >= 1, got {directions}")
    propagation, transfer = comm_parts_array_s(latency_s, bandwidth_bytes_per_s, update_size_bytes)
    return transfer, int(directions) * (propagation + transfer)


def effective_gpus(gpus_available: int, spare_power_w: float, gpu_power_w: float) -> int:
    """N_eff,i(t) = min(N_avail,i, floor(P_spare,i(t) / P_gpu)) (paper Eq. 6)."""
    if gpu_power_w <= 0:
        raise ValueError(f"gpu_power_w must be > 0, got {gpu_power_w}")
    return int(min(gpus_available, math.floor(max(spare_power_w, 0.0) / gpu_power_w)))


def power_fraction(gpus_effective: int, gpus_max: int) -> float:
    """p_i(t) = N_eff,i(t) / N_max,i."""
    if gpus_max <= 0:
        raise ValueError(f"gpus_max must be > 0, got {gpus_max}")
    return gpus_effective / gpus_max


def compute_time_s(tau_s: float, power: float) -> float:
    """Local work at power fraction p takes tau / p (paper §5.1, 'local-steps' work model)."""
    if power <= 0:
        raise ValueError(f"power fraction must be > 0, got {power}")
    return tau_s / power


def data_parallel_compute_time_s(
    total_steps: int, step_time_s: float, powers: Sequence[float]
) -> float:
    """'data-parallel' work model: W steps split in proportion to power, W*tau_step / sum(p)."""
    total = float(sum(powers))
    if total <= 0:
        raise ValueError("the selected sites have no power")
    return total_steps * step_time_s / total


@dataclass(frozen=True)
class SiteTime:
    """Where one selected site's round time goes."""

    site_id: str
    compute_s: float
    comm_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s


@dataclass(frozen=True)
class RoundTime:
    """A synchronous round: the straggler sets the pace, everyone else waits."""

    round_time_s: float
    compute_s: float  # the straggler's compute
    comm_s: float  # the straggler's communication
    wait_s: float  # mean idle time of the selected sites
    straggler: str
    aggregation_s: float


def round_time(sites: Sequence[SiteTime], aggregation_s: float = 0.0) -> RoundTime:
    """max_{i in S}(compute_i + T_comm,i) + aggregation time: the clock's synchronous round.

    Not the paper's Eq. 7, which adds the parts separately, T_comp(S) + max_{i in S}
    T_comm,i (Eq. 4). Ours charges the straggler: each site's own compute plus its own
    communication, the slowest sum setting the pace, so a slow-computing near site and a
    fast-computing far one are not charged as if they were one site (OUR CHOICE)."""
    if not sites:
        raise ValueError("a round needs at least one site")
    straggler = max(sites, key=lambda s: (s.total_s, s.site_id))
    slowest = straggler.total_s
    wait = float(np.mean([slowest - s.total_s for s in sites]))
    return RoundTime(
        round_time_s=slowest + aggregation_s,
        compute_s=straggler.compute_s,
        comm_s=straggler.comm_s,
        wait_s=wait,
        straggler=straggler.site_id,
        aggregation_s=aggregation_s,
    )


def estimate_round_time_paper(
    tau_s: float, powers_topk: np.ndarray, comm_topk: np.ndarray
) -> float:
    """The paper's estimator (§3.3): T(k) = tau / mean(p_top-k) + max_{i<=k} T_comm,i."""
    return float(tau_s / np.mean(powers_topk) + np.max(comm_topk))


def estimate_round_time_clock(
    tau_s: float, powers_topk: np.ndarray, comm_topk: np.ndarray
) -> float:
    """Estimator consistent with the simulated clock: max_{i<=k}(tau / p_i + T_comm,i)."""
    return float(np.max(tau_s / powers_topk + comm_topk))


def site_times_s(
    tau_s: float, powers: np.ndarray, comm_s: np.ndarray, work_model: str = "local-steps"
) -> np.ndarray:
    """Each selected site's own time in a round on the clock, compute plus its own
    communication; the round's charge is their maximum (the straggler's). Compute is tau / p_i
    under local-steps; under data-parallel and power-split every site computes
    DP_REFERENCE_SITES tau / sum(p) (Eq. 7 with exact shares). The maximum is what
    prefix_round_time_estimates(..., "clock", work_model) ends on."""
    if work_model not in WORK_MODELS:
        raise ValueError(f"work_model must be one of {', '.join(WORK_MODELS)}; got {work_model!r}")
    powers = np.asarray(powers, dtype=np.float64)
    comm_s = np.asarray(comm_s, dtype=np.float64)
    if work_model == "local-steps":
        return tau_s / powers + comm_s
    return DP_REFERENCE_SITES * tau_s / float(np.sum(powers)) + comm_s


def prefix_round_time_estimates(
    tau_s: float,
    powers_ranked: np.ndarray,
    comm_ranked: np.ndarray,
    estimator: str = "paper",
    work_model: str = "local-steps",
) -> np.ndarray:
    """T(k) for every k = 1..N over a ranked list, vectorised (cumulative mean/max).

    Under the data-parallel work model every selected site computes for about
    W tau_step / sum(p) = DP_REFERENCE_SITES tau / sum(p_top-k) (Eq. 7), whichever estimator.
    Under power-split it computes for tau_B / sum(p_top-k), tau_B = DP_REFERENCE_SITES tau
    the full-power time of the global batch (see WORK_MODELS): the same number, exact up to
    the rounding of the batches to integers."""
    if estimator not in ("paper", "clock"):
        raise ValueError(f"estimator must be one of 'paper', 'clock'; got {estimator!r}")
    if work_model not in WORK_MODELS:
        raise ValueError(f"work_model must be one of {', '.join(WORK_MODELS)}; got {work_model!r}")
    powers_ranked = np.asarray(powers_ranked, dtype=np.float64)
    comm_ranked = np.asarray(comm_ranked, dtype=np.float64)
    if work_model in ("data-parallel", "power-split"):
        compute = DP_REFERENCE_SITES * tau_s / np.cumsum(powers_ranked)
        return compute + np.maximum.accumulate(comm_ranked)
    if estimator == "paper":
        counts = np.arange(1, len(powers_ranked) + 1)
        mean_p = np.cumsum(powers_ranked) / counts
        return tau_s / mean_p + np.maximum.accumulate(comm_ranked)
    return np.maximum.accumulate(tau_s / powers_ranked + comm_ranked)
