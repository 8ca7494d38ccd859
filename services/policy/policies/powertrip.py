"""PowerTrip's dynamic policy (paper §3.3, Algorithm 1, and the feedback loop of §4).

Sites are ranked by the power-to-cost score (Eq. 8, `scoring.py`). The first round takes the
k0 best. After that the rule is feedback-driven, as §4 describes: "a site is only added if the
system estimates that its inclusion will improve the overall training efficiency compared to
the previously measured performance", with the realised efficiency of Eq. 5 (accuracy gained
per second of *measured* round time) as the feedback signal.

`gain=feedback` (the default), each round after the first:

1. Measured efficiency. From the history: per-round gains dA_j = A_j - A_{j-1} (A_0 = 0,
   the accuracy before training is unknown here) and measured round times T_j.
   E_meas = sum(dA) / sum(T) over the last `trend_rounds` rounds (Eq. 5 over a window, so one
   noisy evaluation does not swing it). The trend g is the mean dA over the same rounds.
2. Projected gain of k sites, built from the three parts §3.3 names: the recent trend g, a
   normalisation for the number of workers (relative to the k_cur sites that produced g, so
   dA(k_cur) = g) and a logarithmic term for diminishing returns:
       dA(k) = g * (1 + phi * ln(k / k_cur)).
   phi in [0, 1] is how much more sites are worth at this stage of training. The paper does
   not give it; we take phi = 1 - g / g_peak, with g_peak the largest trend seen so far
   (OUR CHOICE). Early on, while gains are at their peak, phi ~ 0 and more sites buy nothing
   (the paper's Fig. 11: 50 or 100 sites gain little over 10 in the first rounds); as gains
   decay phi grows and so does the value of more data per round. This is what makes k grow
   through training instead of freezing: with a constant phi the pick would depend on k
   alone (the separable rule below froze after two rounds).
3. Estimated round time T(k) over the ranked list (§3.3: tau / mean(p_top-k) +
   max_{i<=k} T_comm,i, or the clock-consistent estimator), scaled by c = T_last / T(k_cur)
   so it is in the units of the measured times it is compared with (`calibrate=1`, OUR
   CHOICE: without it the paper estimator's optimism alone would make every site look
   worth adding).
4. Greedy bottom-up addition (§3.3 + §4): the candidates are k_cur and the next `window`
   ranked sites added one by one; the count with the best projected efficiency dA(k)/T(k)
   is taken if it beats the measured efficiency E_meas, else k stays. (Looking across the
   whole window rather than stopping at the first site that does not pay matters: one
   straggler raises T(k) in a step, and the sites after it add gain at no further cost.)
5. Feedback on each addition (§4, "compared to the previously measured performance"): after
   k grows from a to b, k is held for `trend_rounds` rounds while the addition shows its
   effect; then, if those rounds measured a lower efficiency than the rounds before them
   (carried forward by the decay those rounds showed, OUR CHOICE), k goes back to a, and b
   is not tried again for 3 trend windows (OUR CHOICE).
   Patience: count the latest rounds whose realised efficiency dA_j / T_j fell below half
   the measured efficiency of the `trend_rounds` rounds before them (OUR CHOICE of "below":
   half, so evaluation noise alone rarely trips it). After `patience` such rounds in a row
   the window opens downwards and k shrinks to the best projected efficiency below k_cur.
6. Stop at the target accuracy.

`gain=separable` keeps the rule this project used before (projected gain
g * log(1 + k) / log(1 + k_cur), argmax of gain / T over the window, shrink only after
`patience` rounds without a new best accuracy). Its argmax is the argmax of log(1+k)/T(k),
which ignores training progress; it is kept, decision for decision, for the ablation.

Ties go to the smaller k (fewer sites, same efficiency).
"""

from __future__ import annotations

import math

import numpy as np

from powertrip.policyparams import decode
from services.policy.policies.base import Context, Decision, Policy, rounded
from services.policy.policies.feedback import (
    RETRY_AFTER_WINDOWS,
    best_in_window,
    failed_growths,
    gains_of,
    last_growth,
    measured_efficiency,
    projected_gain,
    recent_gain,
    rounds_below,
    rounds_without_gain,
    training_phase,
    trend_series,
)
from services.policy.policies.scoring import GB, power_cost_ranking, weights

#: above this many candidates the explanation lists a sample around the pick, not all
EXPLAIN_MAX_CANDIDATES = 41


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
        "power-to-cost ranking, bottom-up k: add the next site while its projected "
        "efficiency beats the measured one (paper §3.3-4)"
    )
    details = (
        "k: k0 = max(2, 5 % of sites) in round 1, then the best projected efficiency "
        "dA(k)/T(k) among k_cur and the next `window` ranked sites, taken only if it beats "
        "the measured efficiency (Eq. 5). dA(k) = g * (1 + phi * ln(k/k_cur)), phi = "
        "1 - g/g_peak (OUR CHOICE: more sites are worth more as gains decay, the paper's "
        "Fig. 11); window = max(5 % of sites, k_cur) (OUR CHOICE); T(k) scaled to the last "
        "measured round (calibrate, OUR CHOICE); an addition is held for trend_rounds rounds "
        "and taken back if they measured a lower efficiency than the rounds before it; "
        "shrink after `patience` rounds below half "
        "the measured efficiency (OUR CHOICE of 'below'). gain=separable: the previous rule, "
        "argmax g*log(1+k)/T(k), for the ablation."
    )
    default_params = {
        "k0": 0.0,  # 0: max(2, 5 % of the alive sites)
        "window": 0.0,  # 0: max(1, 5 % of the alive sites, and k_cur under gain=feedback)
        "patience": 3.0,
        "trend_rounds": 3.0,
        "m_ref_gb": 1.5,
        "gain": 0.0,  # 0 = feedback (default), 1 = separable (powertrip.policyparams)
        "calibrate": 1.0,  # 1: scale T-hat to the last measured round time
    }
    #: how the sites are ranked, for the explanation
    ranking = "power-to-cost score (Eq. 8)"

    def rank(self, ctx: Context, params: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """(per-site scores, alive sites best first); highest-power overrides this."""
        return power_cost_ranking(ctx.table, ctx.update_size_bytes, params["m_ref_gb"] * GB)

    def select(self, ctx: Context) -> Decision:
        p = self.params(ctx)
        scores, ranked = self.rank(ctx, p)
        n = len(ranked)
        k0 = min(int(p["k0"]), n) if p["k0"] > 0 else auto_k0(n)
        window = int(p["window"]) if p["window"] > 0 else auto_window(n)
        # T-hat(k) for every k at once: cumulative mean power and running max comm
        times = ctx.round_time_estimates(ranked)
        alpha, beta = weights(ctx.update_size_bytes, p["m_ref_gb"] * GB)
        accuracies = [h.accuracy for h in ctx.history]
        stop = bool(accuracies) and accuracies[-1] >= ctx.target_accuracy
        gain_rule = decode("gain", p["gain"])
        explanation: dict = {
            "rule": gain_rule,
            "ranking": self.ranking,
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
        elif gain_rule == "separable":
            k = self._separable(ctx, p, accuracies, times, window, n, explanation)
        else:
            k = self._feedback(ctx, p, accuracies, times, window, n, explanation)
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
        )

    # ---- gain=feedback (default) -------------------------------------------------------
    def _feedback(self, ctx, p, accuracies, times, window, n, explanation) -> int:
        k_cur = int(min(max(1, ctx.history[-1].k), n))
        if p["window"] <= 0:
            # OUR CHOICE: the window scales with k (up to doubling per round). The gain is
            # logarithmic in k, so a fixed additive window shrinks in log terms as k grows,
            # and a single straggler step in T(k) then freezes k for good.
            window = max(window, k_cur)
            explanation["window"] = window
        w = int(p["trend_rounds"])
        gains = gains_of(accuracies)
        measured_times = np.array([max(h.round_time_s, 1e-9) for h in ctx.history])
        trends = trend_series(gains, w)
        g = float(trends[-1])
        phi = training_phase(trends)
        e_meas = measured_efficiency(gains, measured_times, w)
        below = rounds_below(gains, measured_times, w)
        scale = 1.0
        if p["calibrate"] and times[k_cur - 1] > 0:
            scale = float(measured_times[-1] / times[k_cur - 1])
        shrink = p["patience"] > 0 and below >= p["patience"] and k_cur > 1
        ks = [int(h.k) for h in ctx.history]
        recent = len(ks) - RETRY_AFTER_WINDOWS * w
        failed = [b for b, at in failed_growths(ks, w) if at >= recent]
        cap = min([n, *[b - 1 for b in failed]])
        if shrink:
            candidates = np.arange(max(1, k_cur - window), k_cur + 1)
        else:
            candidates = np.arange(k_cur, max(k_cur, min(cap, k_cur + window)) + 1)
        cand_times = times[candidates - 1] * scale
        if g > 0:
            cand_gains = projected_gain(g, phi, candidates, k_cur)
        else:
            # no gain to project: compare the shape of the gain model only
            cand_gains = 1.0 + np.log(candidates / k_cur)
        eff = cand_gains / cand_times
        trial = last_growth(ks)
        since = len(ks) - trial[0] if trial else 0
        k_new = None
        if shrink:
            below_cur = eff[:-1]
            pick = int(np.argmax(below_cur))  # argmax: first (smallest k) among ties
            reason = (
                f"realised efficiency below half the measured one for {below} round(s) "
                f"(patience {p['patience']:g}): shrink to the best projected efficiency"
            )
        elif trial and since < w:
            pick = 0
            reason = f"measuring the last addition ({trial[1]} -> {trial[2]}): {since}/{w} rounds"
        elif trial and since == w and self._addition_failed(gains, measured_times, trial[0], w):
            pick, k_new = 0, min(trial[1], n)
            c = trial[0]
            before = measured_efficiency(gains[:c], measured_times[:c], w)
            after = measured_efficiency(gains[c:], measured_times[c:], w)
            reason = (
                f"adding sites {trial[1]} -> {trial[2]} lowered the measured efficiency "
                f"({before:.3g} -> {after:.3g} per s): back to {trial[1]}"
            )
        elif g <= 0:
            pick = 0
            reason = "no recent accuracy gain: hold k (nothing to project)"
        else:
            pick = best_in_window(eff, e_meas)
            added = int(candidates[pick]) - k_cur
            if added:
                reason = (
                    f"added {added} site(s): the best projected efficiency in the window, "
                    "above the measured one"
                )
            elif float(np.max(eff)) <= e_meas:
                reason = "efficiency falling (no candidate beats the measured one): hold k"
            else:
                reason = "no larger k raises the projected efficiency: hold k"
        explanation.update(
            reason=reason,
            k_cur=k_cur,
            gain=float(f"{g:.6g}"),
            gain_peak=float(f"{float(np.max(trends)):.6g}"),
            phase=float(f"{phi:.6g}"),
            measured_efficiency=float(f"{e_meas:.6g}"),
            time_scale=float(f"{scale:.6g}"),
            rounds_below=below,
            may_shrink=bool(shrink),
            failed_additions=failed,
            **_explain_rows(candidates, cand_gains, cand_times, eff, pick),
        )
        return int(candidates[pick]) if k_new is None else k_new

    @staticmethod
    def _addition_failed(gains: np.ndarray, times: np.ndarray, c: int, w: int) -> bool:
        """True when the `w` rounds after an addition measured a lower efficiency (Eq. 5)
        than the `w` rounds before it would have given by then: §4's comparison with the
        previously measured performance, made once the addition has had `w` rounds to show.

        Efficiency decays through training whatever k is, so the rounds before are carried
        forward by the decay they showed against the `w` rounds before them (OUR CHOICE; a
        factor in [0.5, 1], 1 when there is no earlier window). Without it every addition
        late in training would look like a failure."""
        before = measured_efficiency(gains[:c], times[:c], w)
        after = measured_efficiency(gains[c : c + w], times[c : c + w], w)
        decay = 1.0
        if c >= 2 * w:
            earlier = measured_efficiency(gains[: c - w], times[: c - w], w)
            if earlier > 0 and before > 0:
                decay = min(1.0, max(0.5, before / earlier))
        return after < before * decay

    # ---- gain=separable (the previous rule, for the ablation) --------------------------
    def _separable(self, ctx, p, accuracies, times, window, n, explanation) -> int:
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
        explanation.update(
            reason=reason,
            k_cur=k_cur,
            gain=float(f"{gain:.6g}"),
            gain_per_worker=float(f"{per_worker:.6g}"),
            rounds_without_gain=stalled,
            may_shrink=bool(may_shrink),
            **_explain_rows(candidates, gains, cand_times, eff, pick),
        )
        return int(candidates[pick])
