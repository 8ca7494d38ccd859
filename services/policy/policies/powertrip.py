"""PowerTrip's dynamic policy (paper §3.3, Algorithm 1).

Rank sites by the power-to-cost score; start with a small k0; each round evaluate candidate
counts in a window around the current k: projected gain dA(k) from the recent accuracy
trend, normalised per worker with a log term for diminishing returns, over the estimated
round time T(k) = tau / mean(p_top-k) + max_{i<=k} T_comm,i. Pick the k with the best
gain per second. Grow freely; shrink only after `patience` rounds without a new best
accuracy. Stop at the target accuracy.
"""

from __future__ import annotations

import math

import numpy as np

from powertrip.timemodel import prefix_round_time_estimates
from services.policy.policies.base import Context, Decision, Policy, PolicyError
from services.policy.policies.scoring import power_cost_scores, rank_desc, weights


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


class PowerTrip(Policy):
    name = "powertrip"
    summary = (
        "power-to-cost ranking with greedy bottom-up k: max projected gain / round time (paper §3)"
    )
    default_params = {
        "k0": 0.0,  # 0: max(2, 5 % of the sites)
        "window": 0.0,  # 0: max(1, 5 % of the sites)
        "patience": 3.0,
        "trend_rounds": 3.0,
        "m_ref_gb": 1.5,
    }

    def validate(self, params, num_sites):
        super().validate(params, num_sites)
        if params["patience"] < 0:
            raise PolicyError(
                f"policy 'powertrip': patience must be >= 0, got {params['patience']:g}"
            )
        if params["trend_rounds"] < 1:
            raise PolicyError("policy 'powertrip': trend_rounds must be >= 1")
        if params["m_ref_gb"] <= 0:
            raise PolicyError("policy 'powertrip': m_ref_gb must be > 0")

    def select(self, ctx: Context) -> Decision:
        p = self.params(ctx)
        t = ctx.table
        scores = power_cost_scores(t, ctx.update_size_bytes, p["m_ref_gb"] * 1e9)
        ranked = rank_desc(scores, t)
        n = len(ranked)
        if n == 0:
            raise PolicyError("no alive site to select")
        k0 = int(p["k0"]) if p["k0"] > 0 else max(2, round(0.05 * n))
        window = int(p["window"]) if p["window"] > 0 else max(1, round(0.05 * n))
        k0 = min(k0, n)
        times = prefix_round_time_estimates(
            ctx.tau_s, t.power[ranked], t.comm_s[ranked], estimator=ctx.estimator
        )
        alpha, beta = weights(ctx.update_size_bytes, p["m_ref_gb"] * 1e9)
        explanation: dict = {"alpha": round(alpha, 4), "beta": round(beta, 4), "alive": n}
        accuracies = [h.accuracy for h in ctx.history]
        stop = bool(accuracies) and accuracies[-1] >= ctx.target_accuracy

        if not ctx.history:
            k = k0
            explanation.update(reason="first round: start with k0", k_cur=0, chosen=k)
        else:
            k_cur = int(min(max(1, ctx.history[-1].k), n))
            gain = recent_gain(accuracies, int(p["trend_rounds"]))
            stalled = rounds_without_gain(accuracies)
            may_shrink = stalled >= p["patience"]
            low = max(1, k_cur - window) if may_shrink else k_cur
            high = min(n, k_cur + window)
            candidates = np.arange(low, high + 1)
            explanation.update(k_cur=k_cur, gain=round(gain, 6), rounds_without_gain=stalled)
            if gain <= 0 and not may_shrink:
                k = k_cur
                explanation.update(reason="no recent gain; hold k until patience runs out")
            else:
                per_worker = max(gain, 1e-12) / math.log1p(k_cur)
                projected = per_worker * np.log1p(candidates)
                efficiency = projected / times[candidates - 1]
                k = int(candidates[int(np.argmax(efficiency))])
                explanation.update(
                    reason="argmax projected gain / estimated round time"
                    + (" (shrinking allowed: patience exhausted)" if may_shrink else ""),
                    candidates=candidates.tolist(),
                    projected_gain=[round(float(x), 6) for x in projected],
                    est_round_time_s=[round(float(x), 3) for x in times[candidates - 1]],
                    efficiency=[float(f"{x:.6g}") for x in efficiency],
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
