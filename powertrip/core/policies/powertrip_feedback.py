"""The rule `powertrip` used before it followed the paper's text (`rule=feedback`).

It is kept, decision for decision, for the ablation (`results/ablation.md`, set-up
`rule-feedback`) and so that the runs made with it stay reproducible. Every rule here that the
paper does not have is labelled OUR CHOICE; `powertrip.py` says which of them the paper's
rule drops.

`gain=feedback`, each round after the first:

1. Measured efficiency E_meas = sum(dA) / sum(T) over the last `trend_rounds` rounds (Eq. 5),
   and the trend g, the mean dA over the same rounds.
2. Projected gain dA(k) = g * (1 + phi * ln(k / k_cur)), phi = 1 - g / g_peak (OUR CHOICE).
3. T-hat(k) scaled by T_last / T-hat(k_cur) (`calibrate=1`, OUR CHOICE).
4. The best projected efficiency in a window of max(5 % of N, k_cur) sites above k_cur (OUR
   CHOICE: up to doubling per round), taken only if it beats E_meas.
5. An addition is held `trend_rounds` rounds, taken back if those rounds measured a lower
   efficiency than the rounds before it (carried forward by their decay, OUR CHOICE), and not
   tried again for 3 trend windows (OUR CHOICE). Shrink after `patience` rounds below half
   the measured efficiency (OUR CHOICE of "below").

`gain=separable`: the rule before that (projected gain g * log(1 + k) / log(1 + k_cur),
argmax of gain / T over the window, shrink only after `patience` rounds without a new best
accuracy).
"""

from __future__ import annotations

import math

import numpy as np

from powertrip.core.policies.base import explain_rows as _explain_rows
from powertrip.core.policies.base import small_k0
from powertrip.core.policies.feedback import (
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


def auto_k0(num_alive: int) -> int:
    """This rule's 'small k0': max(2, 5 % of the sites), never more than there are."""
    return small_k0(num_alive, 0.05)


class FeedbackRules:
    """The `rule=feedback` decisions, mixed into `PowerTrip` (they read its parameters)."""

    # ---- gain=feedback ------------------------------------------------------------------
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
