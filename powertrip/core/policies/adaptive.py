"""`adaptive`: k chosen online from the run's own history (beyond the paper; the paper's
rule is `powertrip`).

Sites are ranked by the paper's power-to-cost score (Eq. 8, `scoring.py`), as `powertrip`
ranks them; only k is chosen differently. How the per-round accuracy gain depends on k is
learned from the rounds this run has trained, and k moves only where that evidence, beyond
its uncertainty, says a round buys more accuracy per second, or as one bounded probe that is
checked after its round and undone if it misses. It needs no offline sweep, and holds no
state: every decision is replayed from `ctx.history`. Every choice is OURS (no such fit in
the paper); why each step is as it is, and the runs behind it: docs/policies.md.

Each decision (rounds 1..R done, k_cur = k of round R):

1. Round time T(k), k = 1..N over the ranked list: the work model's prefix estimate with the
   clock's estimator, max_{i<=k}(tau/p_i + T_comm,i), the straggler included.
2. Gain fit (`gainfit.fit_gain`): weighted least squares over the last `fit_rounds` gains
   dA_j = A_j - A_{j-1} (round 1 left out), weights 2^(-(R - j) / half_life):
       dA_j = L + s ln(k_j / k_cur) + c (A_{j-1} - A_R).
   The state term c (fitted with 2+ residual dof) takes the slowing of training out of the
   slope; the slope is then refitted as a share of the gain, dA_j = (L + c y_j)(1 + r
   ln(k_j / k_cur)), and s = L r. Its standard error is at least one round's noise over
   the spread of ln k across the window's runs of equal k (`block_slope_se`): a block of
   rounds at one k is one piece of evidence about k, not many. The slope is unknown while
   the window holds one k. Projected gain G(k) = L + s' ln(k / k_cur), efficiency
   E(k) = G(k) / T(k).
3. Bounds: one decision moves k to at most max(ceil(probe_factor k_cur), k_cur + step), at
   least min(floor(k_cur / probe_factor), k_cur - step), step = max(1, probe_pct % of N),
   and never below the smallest k among the fit's rounds (below the k it has seen, a fit
   linear in ln k extrapolates).
4. Known slope: growth is valued at s' = s - se, shrinking at s' = s + se; the best
   candidate is taken only if it beats E(k_cur) (ties keep k).
5. Unknown slope: s' = 0 for growth, no shrinking. If no growth pays at s' = 0, a probe:
   the largest k within the bounds whose T(k) <= (1 + probe_cost) T(k_cur). Nothing moves
   before 3 gains are in the window or while L <= 0.
6. Every growth a -> b is checked after its first round: back to a when the round took
   more than (1 + probe_margin) x the predicted time ratio, or gained less than the
   prediction minus probe_margin |G_pred| and one round's noise. A probe (made with the
   slope unknown) is held `probe_rounds` rounds and kept only if the fit, its rounds
   included, finds E(b) > E(a).
7. A growth undone within `probe_rounds` rounds is a failed trial at b; the m-th blocks
   growth to >= b for probe_backoff x 2^m rounds, so failed probes grow further apart.
8. Floors (`floors.py`): after `stall_rounds` rounds without a new best accuracy, k stays a
   step above the largest k of those rounds; after `ceiling_rounds` rounds at one k whose
   accuracies level off below the target, a step above that k. A set that has stopped
   improving is not enough, whatever the gain fit says (0 turns a floor off).
9. Round 1 takes the k0 best-scored sites; the explanation says when the target is met.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import (
    Context,
    Decision,
    PastRound,
    Policy,
    explain_rows,
    rounded,
    small_k0,
)
from powertrip.core.policies.floors import apply_ceiling_floor, apply_stall_floor
from powertrip.core.policies.gainfit import (
    MIN_FIT_POINTS,
    REL_TOL,
    GainFit,
    failed_trials,
    fit_gain,
    growth_cap,
    last_growth,
    short,
)
from powertrip.core.policies.params import PolicyParams, param
from powertrip.core.policies.scoring import GB, m_ref_param, power_cost_ranking, weights
from powertrip.core.timemodel import prefix_round_time_estimates

#: at most this many failed trials (the latest) are listed in the explanation
EXPLAIN_MAX_FAILED = 5


def auto_k0(num_alive: int) -> int:
    """A small k0: max(2, 5 % of the sites), never more than there are (OUR CHOICE)."""
    return small_k0(num_alive, 0.05)


def probe_step(probe_pct: float, n: int) -> int:
    """The fixed part of one decision's move: probe_pct % of the n alive sites, at least 1."""
    return max(1, round(probe_pct / 100.0 * n))


@dataclass(frozen=True)
class AdaptiveParams(PolicyParams):
    """`adaptive`'s parameters (the module docstring's steps say how each is used)."""

    k0: int | None = param(
        None, "sites in round 1", whole=True, at_least=1, none="max(2, 5 % of the alive sites)"
    )
    fit_rounds: int = param(12, "gains in the fit's window", whole=True, at_least=3)
    half_life: float = param(6.0, "rounds after which a gain counts half in the fit", above=0)
    probe_factor: float = param(
        1.25,
        "one decision moves k by at most this factor, or by probe_pct if more",
        at_least=1,
        at_most=4,
    )
    probe_pct: float = param(
        5.0,
        "one decision may always move k this % of the alive sites (at least 1)",
        at_least=0,
        at_most=100,
    )
    probe_cost: float = param(
        0.1, "a probe may lengthen the round by at most this share", at_least=0, at_most=1
    )
    probe_rounds: int = param(
        2, "a probe is held this many rounds unless its first misses", whole=True, at_least=1
    )
    probe_margin: float = param(
        0.25, "a growth missing its time or gain by more than this share is undone",
        above=0, at_most=1,
    )  # fmt: skip
    probe_backoff: int = param(
        10, "rounds a failed size is blocked (doubling per failure)", whole=True, at_least=0
    )
    m_ref_gb: float = m_ref_param()
    stall_rounds: int | None = param(
        20, "k's floor rises after this many rounds without a new best accuracy (floors.py)",
        whole=True, at_least=1, none="no stall floor",
    )  # fmt: skip
    ceiling_rounds: int | None = param(
        30, "k's floor rises after this many rounds at one k levelling off below the target",
        whole=True, at_least=5, none="no ceiling floor",
    )  # fmt: skip


class Adaptive(Policy):
    name = "adaptive"
    summary = (
        "power-to-cost ranking, k learned online: fit the per-round gain against ln k on the "
        "run's own history, move k only by evidence or a bounded, checked probe (beyond the "
        "paper)"
    )
    details = (
        "k: k0 = max(2, 5 % of sites) in round 1, then the best accuracy per second "
        "G(k)/T(k) within x probe_factor or +probe_pct % of N per decision, never below the "
        "smallest k of the fit's rounds. T(k) = max_i(tau/p_i + T_comm,i) under local-steps "
        "(the clock's). G(k) from a weighted least-squares fit of dA_j on ln k_j and the "
        "accuracy the round started from, over the last fit_rounds rounds (weights halve "
        "every half_life rounds); the slope's standard error counts runs of equal k, not "
        "rounds; growth valued at slope - se, shrinking at slope + se. One k in the window: "
        "slope unknown, no shrinking, and a probe when T rises by <= probe_cost. Every "
        "growth is undone after its first round when time or gain misses the prediction by "
        "> probe_margin; a probe is held probe_rounds rounds and kept only if the fit then "
        "finds it more efficient. A growth undone so is a failed trial at size b: the m-th "
        "blocks growth to >= b for probe_backoff x 2^m rounds. Floors: after stall_rounds "
        "rounds without a new best accuracy, or ceiling_rounds rounds at one k levelling "
        "off below the target, k stays a probe step above (unset: no floor)."
    )
    Params = AdaptiveParams
    #: its probes are checked against the measured rounds, which the clock charges as the
    #: straggler's: a time model that hides the straggler would fail them (step 1)
    estimator = "clock"
    ranking = "power-to-cost score (Eq. 8)"

    def select(self, ctx: Context) -> Decision:
        p = self.params(ctx)
        table = ctx.table
        _, ranked = power_cost_ranking(table, ctx.update_size_bytes, p.m_ref_gb * GB)
        n = len(ranked)
        # OUR CHOICE: the clock's estimator whatever the request's (step 1)
        times = prefix_round_time_estimates(
            ctx.tau_s, table.power[ranked], table.comm_s[ranked], self.estimator, ctx.work_model
        )
        k0 = min(p.k0, n) if p.k0 is not None else auto_k0(n)
        alpha, beta = weights(ctx.update_size_bytes, p.m_ref_gb * GB)
        accuracies = [h.accuracy for h in ctx.history]
        target_met = bool(accuracies) and accuracies[-1] >= ctx.target_accuracy
        explanation: dict = {
            "rule": "adaptive",
            "ranking": self.ranking,
            "alpha": round(alpha, 6),
            "beta": round(beta, 6),
            "alive": n,
            "k0": k0,
            "estimator": self.estimator,
            "work_model": ctx.work_model,
        }
        if not ctx.history:
            k = k0
            explanation.update(
                reason="first round: start with the k0 best-scored sites",
                k_cur=0,
                candidates=[k0],
                times=rounded(times[[k0 - 1]]),
            )
        else:
            k = self._decide(ctx, p, times, n, explanation)
            ks = [int(h.k) for h in ctx.history]
            step = probe_step(p.probe_pct, n)
            if p.stall_rounds is not None:
                k = apply_stall_floor(k, accuracies, ks, p.stall_rounds, step, n, explanation)
            if p.ceiling_rounds is not None:
                k = apply_ceiling_floor(
                    k,
                    accuracies,
                    ks,
                    ctx.target_accuracy,
                    p.ceiling_rounds,
                    step,
                    n,
                    explanation,
                )
        if target_met:
            explanation["reason"] = (
                f"target accuracy {ctx.target_accuracy:g} reached; " + explanation["reason"]
            )
        explanation["chosen"] = k
        return Decision(
            order=ranked[:k],
            predicted_round_time_s=float(times[k - 1]),
            explanation=explanation,
        )

    def _decide(self, ctx: Context, p: AdaptiveParams, times: np.ndarray, n: int, out: dict) -> int:
        history = ctx.history
        fit_rounds, half_life = p.fit_rounds, p.half_life
        ks = [int(h.k) for h in history]
        k_cur = int(min(max(1, ks[-1]), n))
        fit = fit_gain(history, k_cur, fit_rounds, half_life)
        hold = p.probe_rounds
        cap = growth_cap(ks, hold, p.probe_backoff, n)
        step = probe_step(p.probe_pct, n)
        factor = p.probe_factor
        up = min(n, max(math.ceil(k_cur * factor - 1e-9), k_cur + step))
        down = max(1, min(math.floor(k_cur / factor + 1e-9), k_cur - step))
        if fit.known:  # step 3: not below the fit's rounds' k
            down = max(down, min(k_cur, min(ks[1:][-fit_rounds:])))
        failed = failed_trials(ks, hold)
        out.update(
            k_cur=k_cur,
            fit=fit.explain(),
            bounds=[down, up],
            growth_cap=cap,
            failed_trials=[list(f) for f in failed[-EXPLAIN_MAX_FAILED:]],
        )
        # step 6: the check of the latest growth, and a probe's hold
        trial = last_growth(ks)
        if trial is not None:
            c, a, b = trial[0], min(trial[1], n), min(trial[2], n)
            since = len(ks) - c
            prior = fit_gain(history[:c], a, fit_rounds, half_life)
            if a < b == k_cur and prior.enough:
                probe = not prior.known
                if since == 1:
                    back = self._missed(history, prior, a, b, times, p, out)
                    if back is not None:
                        out["reason"] = back
                        return a
                if probe and since < hold:
                    out["reason"] = f"probe {a} -> {b} held: {since}/{hold} round(s) measured"
                    return b
                if probe and since == hold:
                    back = self._evidence(fit, a, b, times, out)
                    if back is not None:
                        out["reason"] = back
                        return a
        if not fit.enough:
            out["reason"] = (
                f"hold k: {fit.points} gain(s) in the window, the fit needs {MIN_FIT_POINTS}"
            )
            return k_cur
        level = fit.level
        if level <= 0:
            out["reason"] = "hold k: no projected gain (fitted level <= 0)"
            return k_cur
        candidates = np.arange(down, up + 1)
        cur = k_cur - down
        log_ratio = np.log(candidates / k_cur)
        if fit.known:
            slope = np.where(candidates > k_cur, fit.slope - fit.slope_se, fit.slope + fit.slope_se)
            allowed = candidates <= max(cap, k_cur)
        else:
            slope = np.zeros(len(candidates))
            allowed = (candidates >= k_cur) & (candidates <= max(cap, k_cur))
        gains = level + slope * log_ratio
        cand_times = times[candidates - 1]
        eff = np.where(allowed, gains / cand_times, -np.inf)
        pick = int(np.argmax(eff))  # the smallest k among ties
        if eff[pick] <= eff[cur] * (1 + REL_TOL):
            pick = cur
        k = int(candidates[pick])
        if k > k_cur and fit.known:
            reason = (
                f"grow {k_cur} -> {k}: the best efficiency with the slope at its lower bound "
                f"(s - se = {fit.slope - fit.slope_se:.3g})"
            )
        elif k > k_cur:
            reason = (
                f"probe {k_cur} -> {k}: slope unknown (one k in the window), and even with no "
                "gain from more sites the round buys more accuracy per second"
            )
        elif k < k_cur:
            reason = (
                f"shrink {k_cur} -> {k}: fewer sites are more efficient even with the slope "
                f"at its upper bound (s + se = {fit.slope + fit.slope_se:.3g})"
            )
        elif fit.known:
            reason = "hold k: no candidate beats the current efficiency beyond the fit's error"
        else:
            k, reason = self._probe(k_cur, up, cap, times, p)
            if k != k_cur and down <= k <= up:
                pick = k - down
        shown = np.where(np.isfinite(eff), eff, 0.0)  # strict JSON: no inf or NaN
        out.update(reason=reason, **explain_rows(candidates, gains, cand_times, shown, pick))
        return k

    @staticmethod
    def _probe(
        k_cur: int, up: int, cap: int, times: np.ndarray, p: AdaptiveParams
    ) -> tuple[int, str]:
        """Step 5's probe: the largest k in the bounds within the time budget, or hold."""
        limit = min(up, cap)
        if limit <= k_cur:
            blocked = " (growth blocked by a failed trial)" if cap < up else ""
            return k_cur, f"hold k: slope unknown and no room to probe{blocked}"
        budget = times[k_cur - 1] * (1 + p.probe_cost)
        within = np.flatnonzero(times[k_cur:limit] <= budget * (1 + REL_TOL))
        if len(within) == 0:
            return k_cur, (
                f"hold k: slope unknown and the next site alone lengthens the round by more "
                f"than probe_cost = {p.probe_cost:g}"
            )
        k = k_cur + 1 + int(within[-1])
        return k, (
            f"probe {k_cur} -> {k}: slope unknown (one k in the window); T rises by "
            f"{times[k - 1] / times[k_cur - 1] - 1:.3g} <= probe_cost; checked after one round"
        )

    @staticmethod
    def _missed(
        history: Sequence[PastRound],
        prior: GainFit,
        a: int,
        b: int,
        times: np.ndarray,
        p: AdaptiveParams,
        out: dict,
    ) -> str | None:
        """Step 6: the reason to abandon a -> b after its first round, or None."""
        margin = p.probe_margin
        prior_slope = prior.slope - prior.slope_se if prior.known else 0.0
        predicted_gain = prior.level + prior_slope * math.log(b / a)
        measured_gain = history[-1].accuracy - history[-2].accuracy
        predicted_ratio = float(times[b - 1] / times[a - 1])
        before = history[-2].round_time_s
        measured_ratio = history[-1].round_time_s / before if before > 0 else math.inf
        tolerance = margin * abs(predicted_gain) + prior.sigma
        out["check"] = {
            "grown": [a, b],
            "predicted_time_ratio": short(predicted_ratio),
            "measured_time_ratio": short(measured_ratio),
            "predicted_gain": short(predicted_gain),
            "measured_gain": short(measured_gain),
            "gain_tolerance": short(tolerance),
        }
        if measured_ratio > predicted_ratio * (1 + margin):
            return (
                f"abandon {a} -> {b} after one round: the round took x{measured_ratio:.3g} "
                f"the one before, predicted x{predicted_ratio:.3g} (margin {margin:g})"
            )
        if measured_gain < predicted_gain - tolerance:
            return (
                f"abandon {a} -> {b} after one round: gained {measured_gain:.3g}, predicted "
                f"{predicted_gain:.3g} (margin {margin:g} and one round's noise)"
            )
        return None

    @staticmethod
    def _evidence(fit: GainFit, a: int, b: int, times: np.ndarray, out: dict) -> str | None:
        """Step 6: after its hold, a probe a -> b stays only if the fit, its rounds
        included, finds b more efficient than a at the fitted slope (the point estimate:
        its rounds are the evidence, se would ask more of them than a probe can give);
        the reason to go back, or None."""
        level = fit.level
        if not fit.known or level <= 0:
            return f"back {b} -> {a}: the fit gives no gain to keep {b} sites for"
        stay = level / times[b - 1]
        back = (level - fit.slope * math.log(b / a)) / times[a - 1]
        out["evidence"] = {"efficiency_kept": short(stay), "efficiency_back": short(back)}
        if stay <= back * (1 + REL_TOL):
            return (
                f"back {b} -> {a}: with the probe's rounds in the fit, {b} sites are not more "
                f"efficient than {a} (fitted slope {fit.slope:.3g})"
            )
        return None
