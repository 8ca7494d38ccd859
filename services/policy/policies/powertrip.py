"""PowerTrip's dynamic policy (paper §3.3, Algorithm 1).

Rank sites by the power-to-cost score; start with a small k0; each round evaluate candidate
counts in a window around the current k: projected gain dA(k) from the recent accuracy
trend, normalised per worker with a log term for diminishing returns, over the estimated
round time T(k) = tau / mean(p_top-k) + max_{i<=k} T_comm,i. Pick the k with the best
gain per second. Grow freely; shrink only after `patience` rounds without a new best
accuracy. Stop at the target accuracy.

Choices the paper leaves open, and why:
* Gain g = mean per-round accuracy change over the last `trend_rounds` rounds; the first
  round's change is measured from 0, because the accuracy before training is unknown here.
* Per-worker gain g / log(1 + k_cur), projected dA(k) = that * log(1 + k): at k = k_cur the
  projection equals the observed trend, and each extra site is worth less than the last.
* When g <= 0 and patience is not exhausted, hold k: a flat or falling trend says nothing
  about what more sites would buy, and growing on no evidence only adds stragglers.
* When patience is exhausted the window opens downwards too; with g <= 0 the gain model
  has no scale, so the pick maximises the shape log(1 + k) / T(k), which is what drops
  stragglers added while accuracy was still moving.
* Ties go to the smaller k (fewer sites, same efficiency).
"""

from __future__ import annotations

import math

import numpy as np

from powertrip.timemodel import prefix_round_time_estimates
from services.policy.policies.base import Context, Decision, Policy, rounded
from services.policy.policies.scoring import GB, power_cost_ranking, weights

#: above this many candidates the explanation lists a sample around the pick, not all
EXPLAIN_MAX_CANDIDATES = 41


def rounds_without_gain(accuracies: list[float]) -> int:
    """How many of the latest rounds did not beat the best accuracy seen before them."""
    best = -math.inf
    streak = 0
    for acc in accuracies:
        if acc > best:
            best, streak = acc, 0
        else:
            streak += 1
    return streak


def recent_gain(accuracies: list[float], window: int) -> float:
    """Mean per-round accuracy change over the last `window` rounds (first round: vs 0)."""
    series = [0.0, *accuracies]
    diffs = np.diff(series[-(window + 1) :])
    return float(np.mean(diffs)) if len(diffs) else 0.0


def auto_k0(num_alive: int) -> int:
    """The paper's 'small k0': max(2, 5 % of the sites), never more than there are."""
    return min(num_alive, max(2, round(0.05 * num_alive)))


def auto_window(num_alive: int) -> int:
    return max(1, round(0.05 * num_alive))


def _explain_rows(
    candidates: np.ndarray, gains: np.ndarray, times: np.ndarray, eff: np.ndarray, pick: int
) -> dict:
    """Candidate table for the explanation; a sample around the pick when it is long."""
    rows = np.arange(len(candidates))
    if len(rows) > EXPLAIN_MAX_CANDIDATES:
        half = EXPLAIN_MAX_CANDIDATES // 4
        keep = {0, len(rows) - 1, *range(max(0, pick - half), min(len(rows), pick + half + 1))}
        rows = np.array(sorted(keep))
    return {
        "candidates": candidates[rows].tolist(),
        "gains": rounded(gains[rows]),
        "times": rounded(times[rows]),
        "efficiencies": rounded(eff[rows]),
        "candidates_range": [int(candidates[0]), int(candidates[-1])],
    }


class PowerTrip(Policy):
    name = "powertrip"
    summary = (
        "power-to-cost ranking with greedy bottom-up k: max projected gain / round time (paper §3)"
    )
    default_params = {
        "k0": 0.0,  # 0: max(2, 5 % of the alive sites)
        "window": 0.0,  # 0: max(1, 5 % of the alive sites)
        "patience": 3.0,
        "trend_rounds": 3.0,
        "m_ref_gb": 1.5,
    }

    def select(self, ctx: Context) -> Decision:
        p = self.params(ctx)
        t = ctx.table
        m_ref = p["m_ref_gb"] * GB
        scores, ranked = power_cost_ranking(t, ctx.update_size_bytes, m_ref)
        n = len(ranked)
        k0 = min(int(p["k0"]), n) if p["k0"] > 0 else auto_k0(n)
        window = int(p["window"]) if p["window"] > 0 else auto_window(n)
        # T-hat(k) for every k at once: cumulative mean power and running max comm
        times = prefix_round_time_estimates(
            ctx.tau_s, t.power[ranked], t.comm_s[ranked], estimator=ctx.estimator
        )
        alpha, beta = weights(ctx.update_size_bytes, m_ref)
        accuracies = [h.accuracy for h in ctx.history]
        stop = bool(accuracies) and accuracies[-1] >= ctx.target_accuracy
        explanation: dict = {
            "alpha": round(alpha, 6),
            "beta": round(beta, 6),
            "alive": n,
            "k0": k0,
            "window": window,
            "estimator": ctx.estimator,
        }

        if not ctx.history:
            k = k0
            explanation.update(
                reason="first round: start with the k0 best-scored sites",
                k_cur=0,
                candidates=[k0],
                gains=[],
                times=rounded(times[[k0 - 1]]),
                efficiencies=[],
            )
        else:
            k_cur = int(min(max(1, ctx.history[-1].k), n))
            gain = recent_gain(accuracies, int(p["trend_rounds"]))
            stalled = rounds_without_gain(accuracies)
            may_shrink = stalled >= p["patience"]
            low = max(1, k_cur - window) if may_shrink else k_cur
            high = min(n, k_cur + window)
            candidates = np.arange(low, high + 1)
            cand_times = times[candidates - 1]
            per_worker = gain / math.log1p(k_cur)
            gains = per_worker * np.log1p(candidates)
            if gain > 0:
                eff = gains / cand_times
                pick = int(np.argmax(eff))
                reason = "argmax projected gain / estimated round time"
                if may_shrink:
                    reason += f" (shrinking allowed: {stalled} round(s) without gain)"
            elif may_shrink:
                eff = np.log1p(candidates) / cand_times
                pick = int(np.argmax(eff))
                reason = (
                    f"no recent gain for {stalled} round(s) (patience exhausted): "
                    "argmax log(1+k) / estimated round time, shrinking allowed"
                )
            else:
                eff = gains / cand_times
                pick = int(np.flatnonzero(candidates == k_cur)[0])
                reason = (
                    f"no recent gain; hold k until patience runs out "
                    f"({stalled}/{p['patience']:g} round(s) without gain)"
                )
            k = int(candidates[pick])
            explanation.update(
                reason=reason,
                k_cur=k_cur,
                gain=float(f"{gain:.6g}"),
                gain_per_worker=float(f"{per_worker:.6g}"),
                rounds_without_gain=stalled,
                may_shrink=bool(may_shrink),
                **_explain_rows(candidates, gains, cand_times, eff, pick),
            )
        if stop:
            explanation["reason"] = (
                f"target accuracy {ctx.target_accuracy:g} reached; " + explanation["reason"]
            )
        explanation["chosen"] = k
        chosen = ranked[:k]
        return Decision(
            order=chosen,
            predicted_round_time_s=float(times[k - 1]),
            explanation=explanation,
            stop=stop,
            scores=scores[chosen],
        )
