"""`adaptive`: k chosen online from the run's own history (beyond the paper; the paper's
rule is `powertrip`).

What it does. Sites are ranked by the paper's power-to-cost score (Eq. 8, `scoring.py`), as
`powertrip` ranks them; only the number of sites k is chosen differently. Instead of a
projected gain with constants to set (§3.3), how the per-round accuracy gain depends on k is
LEARNED from the rounds this run has already trained, and k moves only where that evidence,
beyond its own uncertainty, says a round buys more accuracy per second, or as one bounded
probe that is checked after its round and undone if it misses.

Why. The best static k depends on the workload, the sites and the update size; the paper
finds it with an offline sweep ("static optimal"). This policy needs no sweep, and because it
leaves a k only for one that is more efficient by evidence (or for a short probe whose time
cost is bounded and which is undone after one round when it misses), it should not lose to
the best static k by more than noise. Everything it knows is replayed from `ctx.history`, so it
holds no state between calls.

Each decision (rounds 1..R done, k_cur = k of round R); every choice below is OUR CHOICE
unless it names the paper:

1. Round time T(k), k = 1..N over the ranked list: the work model's prefix estimate
   (`powertrip.core.timemodel.prefix_round_time_estimates` with `ctx.work_model`), with the
   clock estimator max_{i<=k}(tau/p_i + T_comm,i) whatever the request's estimator. That is
   what the simulated clock charges under local-steps, straggler included (the paper's
   tau/mean(p) + max T_comm misses a slow site hidden among fast ones).
2. Gain model: weighted least squares over the last `fit_rounds` per-round gains
   dA_j = A_j - A_{j-1} (round 1 is left out: the accuracy before training is unknown):
       dA_j = L + s ln(k_j / k_cur) + c (A_{j-1} - A_R),   weight 2^(-(R - j) / half_life).
   Gains shrink as training goes on, so older rounds count less, and the state term c
   takes the shrinking out of the slope: a round's gain depends on the accuracy it started
   from, whatever k got it there (a time trend instead confounds k with progress: more
   sites reach the plateau sooner, and their later rounds gain less). c is fitted only when
   2+ residual degrees of freedom remain for it. The slope is then refitted as a share of
   the gain, dA_j = (L + c y_j)(1 + r ln(k_j / k_cur)), y_j = A_{j-1} - A_R, by
   Gauss-Newton from the linear fit, and s = L r: in gain units the slope shrinks with the
   gains, so the window's average would overstate what more sites buy now (and k would
   overshoot). se = L x the standard error of r, sigma = the residual sd of one round. The
   slope is UNKNOWN while the window holds one k. The next round starts at A_R, so its
   projected gain at k is G(k) = L + s' ln(k / k_cur), its efficiency E(k) = G(k) / T(k).
3. Bounds: one decision moves k to at most max(ceil(probe_factor k_cur), k_cur + step) and
   at least min(floor(k_cur / probe_factor), k_cur - step), step = max(1, probe_pct % of N).
4. Known slope, conservative both ways: growth is valued with s' = s - se, shrinking with
   s' = s + se; the best candidate is taken only if it beats E(k_cur) (ties keep k). Under
   local-steps T(k) never falls with k, so growth needs s - se > 0.
5. Unknown slope: s' = 0 for growth (no evidence more sites pay), no shrinking (no evidence
   fewer sites cost nothing). If no growth pays at s' = 0, a probe: the largest k within the
   bounds whose T(k) <= (1 + probe_cost) T(k_cur). Nothing moves before 3 gains are in the
   window (round 4 decides round 5) or while L <= 0.
6. Every growth a -> b is checked in the decision after its first round (the simulated
   clock is deterministic, so one round tells): back to a when T_R / T_{R-1} >
   (1 + probe_margin) T(b) / T(a), or dA_R < G_pred - probe_margin |G_pred| - sigma, G_pred
   being the gain the fit before the growth projected at b (sigma, that fit's noise of one
   round, so evaluation noise alone does not abandon it). A probe (a growth made with the
   slope unknown) is then held for `probe_rounds` rounds in all, and stays only if the fit,
   its rounds included, finds E(b) > E(a) at the fitted slope s; else back to a.
7. When to stop probing: a growth undone within `probe_rounds` rounds (k went a -> b -> a)
   is a failed trial at size b. The m-th failed trial of the run (m = 0, 1, ...) blocks
   every growth to >= b for probe_backoff x 2^m rounds, counted from the round back at a;
   and a probe needs an unknown slope, so after any change of k none comes until the
   window holds one k again (`fit_rounds` rounds). Failed probes so grow further apart: a
   gain flat in k costs O(log R) probe rounds in a run of R rounds.
8. The first round takes the k0 best-scored sites; the explanation says when the target is
   met (the aggregator stops the run).

Option, off by default (`shrink_in_fit=1`): never shrink below the smallest k among the
fit's rounds. The fit is linear in ln k, and below the k it has seen it extrapolates: with a
slope near 0 (gain flat in k between, say, 5 and 10 sites) it projects the same gain at k = 1,
where one site's non-IID data gains far less, and a shrink there can stick (a level <= 0 holds
k). Found on held-out seed 5 of the trace set-up (2.34 h against static k* = 4's 1.83 h: k
went 10 -> 5 -> 1 and held at 1 for 13 rounds); evaluated as its own arm, seeds 0-4 first.
On the ideal set-up (ideal-45) it ends the falls to one site that block_se does not (held-
out seed 8: 25 rounds, k* = 5's own, against 41), and is at +8.9 % against k* there (plain
adaptive: +21.7 %): it still grows past 5 sites, where a site costs no time.

Option, off by default (`block_se=1`): the slope's standard error is at least one round's
noise over the spread of ln k across the window's runs of equal k (`gainfit.block_slope_se`),
so evidence counts blocks of rounds at one k, not rounds. Found on training seed 0 and
held-out seed 6 of the uniform set-up: after one probe the fit, with two k values, gave a
standard error a sixth to a half of the slope (seed 0, 5 -> 10: s = 0.046, se = 0.0075;
seed 6, 5 -> 7: s = 0.0124, se = 0.0076, from 3 gains at 5 sites and 2 at 7), and k grew
to 38-55 sites against k* = 3. Counted per block, the same histories give se = 0.057 and
0.116, more than the slope, and k stays. Evaluated as its own arm, seeds 0-4 first. On
the ideal set-up (identical sites, no link cost: every k takes the same round; results/
reproduce, ideal-45) it does not help: +21.7 % against k* = 5 on held-out seeds, as plain
adaptive. There a probe is always within probe_cost, and with no time cost to anchor k the
sign of a noisy slope decides: one missed probe round made the fit shrink to one site
(held-out seed 8, training seeds 1 and 2), and growth by evidence reached 100 (seed 4).

Option, off by default (`stall_rounds=R`): `powertrip`'s stall floor (`feedback.stall_floor`),
with the probe step (probe_pct % of N) as its step: once R rounds in a row have not beaten the
best accuracy, k stays at least a step above the largest k of those rounds. Found on held-out
seed 6 at the plateau target (62 %, results/plateau-policies): the fit, linear in ln k, saw
no slope while the accuracy levelled off, shrank k to 1 and held it there for 161 rounds; a
set that has levelled off on its data gains nothing however long it trains, which a fit of
gain against k over rounds at one k cannot see. R = 20, as for `powertrip`, fixed before any
run of this option. The floor never falls, so k cannot shrink below it later. Its runs
(held-out seeds 5-9, 62 %) found a second trap it also ends: with one k in the window the
slope is unknown, only a probe can move k, and a probe may lengthen the round by at most
probe_cost; where the next site costs more (+10.01 % on seeds 7 and 8) k stays at k0 for good.

Option, off by default (`min_probe=1`): when the slope is unknown and even the next site
alone lengthens the round by more than probe_cost, the probe is that one site (k_cur + 1),
checked, held and undone as any probe (step 6), and backed off as any failed trial (step 7).
Found on seeds 7 and 8 at the plateau target (results/plateau-policies/call3): plain
`adaptive` held k0 = 5 for 736 rounds because the sixth site cost +10.01 % against a
probe_cost of 10 %, so the slope it needs to grow was never measured. With this option the
lock cannot happen: a probe is refused only by the bounds or a failed trial's block. Its
price is bounded by step 7's back-off: each failed probe of an expensive site doubles the
rounds before the next. Its runs (seeds 7 and 8, results/plateau-policies/cpu4) left k0 at
round 5 or 6 and then met the traps that `stall_rounds` ends: a negative fitted slope (the
largest sets trained where the gain per round was already falling) shrank k to one site,
and on seed 8 a failed trial's back-off held k at 3 for 150 rounds; alone, it does not
bring `adaptive` within 5 % of k*.

Option, off by default (`level_se=1`): the relative slope's standard error by the delta
method, counting the fitted level's error (`gainfit._relative_fit`). By default it is
L x se(r), as if the level L were known: where L is lost in the noise, the se of s = L r
shrinks with L while s need not, and a slope of a few noise-free-looking standard errors
starts a shrink. Found in the shrinks to one site of the plateau runs (seed 7 of
results/plateau-policies/cpu5, round 37: s = -0.0017, se = 0.0002, one round's noise
0.0048) and reproduced on a hand-made history with evaluation noise (tests/unit/
test_adaptive.py: at round 45, L = 6.5e-5, s = -7.7e-5, se = 2.9e-6, a shrink 13 -> 10 and
then a fall to one site). With the option the se there is over 100 times larger and k
holds; over 8 noise seeds of 0.003 the share of late rounds at <= 2 sites falls from 36 %
to 2.5 %. It does not end every fall: the state term's own bias (an evaluation's noise is
in both a gain and the next round's start) is left as it is. Growth is held back too, as
s - se is smaller. Evaluated as its own arm (with stall_rounds=20 at the plateau target).
Its runs: at 45 %, held-out seeds 5-9, +2.4 % against k* on uniform and -5.7 % on trace
(block_se: +2.4 %, -6.4 %); at 62 % (results/plateau-policies/cpu6) seed 6 held 7 sites for
281 rounds, +12.4 % against k* = 20, because the growth that had saved the stall run there
came from the same understated se; seed 9 no longer fell to 4 sites but held 25-67, +36.7 %.
Alone it does not bring `adaptive` within 5 % of k*.

Option, off by default (`ceiling_rounds=W`): once W or more rounds in a row ran at the current
k, the accuracies of all of them are fitted to a saturating curve, and if even the highest
ceiling they allow is below the run's target, k stays at least a probe step above that k
(`ceiling.py`; no target, no floor). Found in the stall runs at the plateau target (seeds 5,
7 and 8 of results/plateau-policies held 5-9 sites for 206-306 rounds, and seed 6 of cpu6
held 7 for 281): a set creeping towards a ceiling below the target sets a new best every
few rounds, so the stall floor does not rise, and a gain fit over a dozen rounds cannot see a
ceiling a hundred rounds away. W = 30, fixed before any run. Replayed, it changes the stall
runs of seeds 5-9 at rounds 50-154 (5 -> 10 sites on seeds 6-8), and none of the 112
committed runs at 45 % (tests/unit/test_ceiling.py). It needs W uninterrupted rounds at one
k: a probe and its return start the count again. Evaluated as its own arm, with
stall_rounds=20: at 62 % (results/plateau-policies/cpu7, cpu8) held-out seeds 5-8 took 7.17,
5.94, 6.17 and 6.26 h against static k = 20's 8.43, 6.77, 6.70 and 7.05 h (-14.9 %, -12.3 %,
-7.8 %, -11.2 %; the stall arm alone -7.7 %, -11.0 %, -13.2 %, +22.4 %); with seed 9
replayed from a plain run (+11.0 %), -7.0 % [-13 %, +2 %] over five seeds. Neither floor
binds on any committed run at 45 %, so there block_se=1 with both floors is the block_se arm;
at 62 % (cpu9, cpu10) that trio took -13.6 %, -10.9 %, -12.8 %, -13.3 % and +14.0 % on
held-out seeds 5-9 (-7.3 % on average). On seed 9 it grew to 41 sites and stayed: once the
window holds one k only an upward probe can move k, so no rule here tries fewer sites.

Option, off by default (`down_probe=1`): when the window holds one k (slope unknown) and no
probe up is taken (the next site costs more than probe_cost, a failed trial blocks growth,
or k = N), a probe down to floor(k_cur / probe_factor) sites (at least one fewer). It is
step 6 and 7 mirrored: undone after one round whose time or gain misses the prediction (the
gain at k_cur, as the slope was unknown), held `probe_rounds` rounds, then kept only if the
fit, its rounds included, finds the fewer sites more efficient at the fitted slope; a
downward probe undone so is a failed trial at size b, and the m-th blocks every probe down
to <= b for probe_backoff x 2^m rounds. A shrink counts as a downward probe when the fit
before it held one k (any other shrink needs a known slope), and the return from a failed one
is not a growth to check. The floors (stall_rounds, ceiling_rounds) still apply after it.
Found on held-out seed 9 at the plateau target with the trio above (k held 41 sites for the
last 136 rounds, +14 % against k* = 20); fixed before any run of it; evaluated as its own
arm, training seed 0 first. Its runs (results/plateau-policies/cpu11, results/reproduce):
with the trio at 62 %, training seed 0 took 7.60 h against k = 20's 7.11 h (+6.9 %; a probe
39 -> 31 was kept, then k moved between 15 and 27); on seed 9 a probe 41 -> 32 missed its
gain in its one round, and that round made the fit find a slope, so k grew 41 -> 67 (stopped
at round 96). With block_se at 45 % it fired in 5 of 30 runs, four at round 5 or 6 from
k0 = 5, and each kept probe gave the fit a second k from which it shrank to one site:
held-out uniform > +21 % against k* (block_se: +2.4 %), 2 GB > +16 % (+3.0 %). It does not
help as built: the fit reads a probe's one or two rounds as evidence about k.

The pair `block_se=1, shrink_in_fit=1` (its runs: `<set-up>-adaptive-blockse-infit` in
results/reproduce/runs) is block_se on uniform power (held-out +2.4 % against k* = 3, the
same runs but for 0.2 % on seed 9), -7.4 % on trace and +2.7 % and +2.9 % at 1 and 2 GB
(block_se: -6.4 %, +4.9 %, +3.0 %), and shrink_in_fit on the ideal set-up (+8.9 % [+5 %,
+12 %] against k* = 5): the falls end, the growth does not. There a probe 5 -> 10 costs no
time, and when it lands on the steep part of training (rounds 5-9) its rounds gain more
because training is fast then, which the state term does not take out: training seed 4's
fit gave s = 0.151, se = 0.071 after it, and k grew to 100 by round 19. Without such a
confound a run could not place k by its gains either: the gain per round of 5 and 10 sites
differs by 0.0014 against one round's noise of 0.024 (gain_noise.py), about 2,300 rounds at
each k to resolve at 2 se, against a run's 25.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
from powertrip.core.policies.ceiling import apply_ceiling_floor
from powertrip.core.policies.feedback import apply_stall_floor
from powertrip.core.policies.gainfit import (
    MIN_FIT_POINTS,
    REL_TOL,
    GainFit,
    failed_trials,
    fit_gain,
    growth_cap,
    last_growth,
    last_shrink,
    short,
    shrink_floor,
)
from powertrip.core.policies.scoring import GB, power_cost_ranking, weights
from powertrip.core.timemodel import prefix_round_time_estimates

#: at most this many failed trials (the latest) are listed in the explanation
EXPLAIN_MAX_FAILED = 5


def auto_k0(num_alive: int) -> int:
    """A small k0: max(2, 5 % of the sites), never more than there are (OUR CHOICE)."""
    return small_k0(num_alive, 0.05)


def probe_step(p: dict, n: int) -> int:
    """The fixed part of one decision's move: probe_pct % of the n alive sites, at least 1."""
    return max(1, round(p["probe_pct"] / 100.0 * n))


class Adaptive(Policy):
    name = "adaptive"
    summary = (
        "power-to-cost ranking, k learned online: fit the per-round gain against ln k on the "
        "run's own history, move k only by evidence or a bounded, checked probe (beyond the "
        "paper)"
    )
    details = (
        "k: k0 = max(2, 5 % of sites) in round 1, then the best accuracy per second "
        "G(k)/T(k) within x probe_factor or +probe_pct % of N per decision (OUR CHOICE). "
        "T(k) = the work model's prefix estimate, max_i(tau/p_i + T_comm,i) under "
        "local-steps (the clock's). G(k) from a weighted least-squares fit of dA_j on "
        "ln k_j and the accuracy the round started from, over the last fit_rounds rounds "
        "(weights halve every half_life rounds, OUR CHOICE); growth valued at slope - se, "
        "shrinking at slope + se. One k in the window: slope unknown, no shrinking, and a "
        "probe when T rises by <= probe_cost. Every growth is undone after its first round "
        "when time or gain misses the prediction by > probe_margin; a probe is held "
        "probe_rounds rounds and kept only if the fit then finds it more efficient. A "
        "growth undone so is a failed trial at size b: the m-th blocks growth to >= b for "
        "probe_backoff x 2^m rounds (OUR CHOICE). Options off by default: shrink_in_fit=1, "
        "block_se=1, stall_rounds=R (after R rounds without a new best accuracy, k stays at "
        "least a probe step above the largest k of those rounds), min_probe=1 (with the slope "
        "unknown, probe one site even when it costs more than probe_cost), level_se=1 (the "
        "slope's standard error counts the fitted level's error too), ceiling_rounds=W "
        "(when W rounds at one k level off below the target, k stays at least a probe step "
        "above that k), down_probe=1 (with one k in the window and no room or budget to "
        "probe up, probe k / probe_factor sites, checked, held and backed off as a probe up "
        "is)."
    )
    default_params = {
        "k0": 0.0,  # 0: max(2, 5 % of the alive sites)
        "fit_rounds": 12.0,  # gains in the fit's window
        "half_life": 6.0,  # rounds after which a gain counts half in the fit
        "probe_factor": 1.25,  # one decision moves k by at most this factor ...
        "probe_pct": 5.0,  # ... or this % of the alive sites (at least 1), the larger
        "probe_cost": 0.1,  # a probe may lengthen the round by at most this share
        "probe_rounds": 2.0,  # a probe is held this many rounds unless its first misses
        "probe_margin": 0.25,  # a growth missing its time or gain by more is undone
        "probe_backoff": 10.0,  # rounds a failed size is blocked (doubling per failure)
        "m_ref_gb": 1.5,
        "shrink_in_fit": 0.0,  # 1: never shrink below the smallest k the fit has seen
        "block_se": 0.0,  # 1: the slope's se counts runs of equal k, not rounds
        "stall_rounds": 0.0,  # R > 0: k's floor rises after R rounds without a new best
        "min_probe": 0.0,  # 1: with the slope unknown, probe one site whatever its cost
        "level_se": 0.0,  # 1: the slope's se counts the fitted level's error (delta method)
        "ceiling_rounds": 0.0,  # W > 0: k's floor rises when W rounds at one k level off
        # below the target (ceiling.py)
        "down_probe": 0.0,  # 1: with one k in the window and no probe up, probe fewer sites
    }
    ranking = "power-to-cost score (Eq. 8)"

    def select(self, ctx: Context) -> Decision:
        p = self.params(ctx)
        table = ctx.table
        _, ranked = power_cost_ranking(table, ctx.update_size_bytes, p["m_ref_gb"] * GB)
        n = len(ranked)
        # OUR CHOICE: the clock's estimator whatever the request's (step 1)
        times = prefix_round_time_estimates(
            ctx.tau_s, table.power[ranked], table.comm_s[ranked], "clock", ctx.work_model
        )
        k0 = min(int(p["k0"]), n) if p["k0"] > 0 else auto_k0(n)
        alpha, beta = weights(ctx.update_size_bytes, p["m_ref_gb"] * GB)
        accuracies = [h.accuracy for h in ctx.history]
        target_met = bool(accuracies) and accuracies[-1] >= ctx.target_accuracy
        explanation: dict = {
            "rule": "adaptive",
            "ranking": self.ranking,
            "alpha": round(alpha, 6),
            "beta": round(beta, 6),
            "alive": n,
            "k0": k0,
            "estimator": "clock",
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
            step = probe_step(p, n)
            if p["stall_rounds"] > 0:
                k = apply_stall_floor(k, accuracies, ks, p["stall_rounds"], step, n, explanation)
            if p["ceiling_rounds"] > 0:
                k = apply_ceiling_floor(
                    k,
                    accuracies,
                    ks,
                    ctx.target_accuracy,
                    p["ceiling_rounds"],
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

    def _decide(self, ctx: Context, p: dict, times: np.ndarray, n: int, out: dict) -> int:
        history = ctx.history
        fit_rounds, half_life = int(p["fit_rounds"]), p["half_life"]
        ks = [int(h.k) for h in history]
        k_cur = int(min(max(1, ks[-1]), n))
        block_se, level_se = bool(p["block_se"]), bool(p["level_se"])
        fit = fit_gain(history, k_cur, fit_rounds, half_life, block_se, level_se)
        hold = int(p["probe_rounds"])
        cap = growth_cap(ks, hold, p["probe_backoff"], n)
        step = probe_step(p, n)
        factor = p["probe_factor"]
        up = min(n, max(math.ceil(k_cur * factor - 1e-9), k_cur + step))
        down = max(1, min(math.floor(k_cur / factor + 1e-9), k_cur - step))
        if p["shrink_in_fit"] and fit.known:
            down = max(down, min(k_cur, min(ks[1:][-fit_rounds:])))  # the fit's rounds' k
        failed = failed_trials(ks, hold)
        down_probe = bool(p["down_probe"])
        floor = shrink_floor(ks, hold, p["probe_backoff"]) if down_probe else 1
        out.update(
            k_cur=k_cur,
            fit=fit.explain(),
            bounds=[down, up],
            growth_cap=cap,
            failed_trials=[list(f) for f in failed[-EXPLAIN_MAX_FAILED:]],
        )
        # step 6: the check of the latest growth, and a probe's hold
        trial = last_growth(ks)
        if trial is not None and down_probe and self._ends_failed_shrink(ks, hold, trial[0]):
            trial = None  # the return from a failed downward probe is not a growth to check
        if trial is not None:
            c, a, b = trial[0], min(trial[1], n), min(trial[2], n)
            since = len(ks) - c
            prior = fit_gain(history[:c], a, fit_rounds, half_life, block_se, level_se)
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
        if down_probe:
            moved = self._check_down_probe(history, ks, fit, k_cur, n, times, p, out)
            if moved is not None:
                return moved
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
            if k == k_cur and down_probe and fit.k_values == 1:
                k, reason = self._down_probe(k_cur, floor, times, p, reason)
            if k != k_cur and down <= k <= up:
                pick = k - down
        shown = np.where(np.isfinite(eff), eff, 0.0)  # strict JSON: no inf or NaN
        out.update(reason=reason, **explain_rows(candidates, gains, cand_times, shown, pick))
        return k

    @staticmethod
    def _probe(k_cur: int, up: int, cap: int, times: np.ndarray, p: dict) -> tuple[int, str]:
        """Step 5's probe: the largest k in the bounds within the time budget, or hold."""
        limit = min(up, cap)
        if limit <= k_cur:
            blocked = " (growth blocked by a failed trial)" if cap < up else ""
            return k_cur, f"hold k: slope unknown and no room to probe{blocked}"
        budget = times[k_cur - 1] * (1 + p["probe_cost"])
        within = np.flatnonzero(times[k_cur:limit] <= budget * (1 + REL_TOL))
        if len(within) == 0 and p["min_probe"]:
            k = k_cur + 1
            return k, (
                f"probe {k_cur} -> {k}: slope unknown (one k in the window); the next site "
                f"lengthens the round by {times[k - 1] / times[k_cur - 1] - 1:.3g} > "
                f"probe_cost = {p['probe_cost']:g}, probed anyway (min_probe); checked after "
                "one round"
            )
        if len(within) == 0:
            return k_cur, (
                f"hold k: slope unknown and the next site alone lengthens the round by more "
                f"than probe_cost = {p['probe_cost']:g}"
            )
        k = k_cur + 1 + int(within[-1])
        return k, (
            f"probe {k_cur} -> {k}: slope unknown (one k in the window); T rises by "
            f"{times[k - 1] / times[k_cur - 1] - 1:.3g} <= probe_cost; checked after one round"
        )

    @staticmethod
    def _down_probe(
        k_cur: int, floor: int, times: np.ndarray, p: dict, why_not_up: str
    ) -> tuple[int, str]:
        """`down_probe`: with one k in the window and no probe up, the probe k_cur /
        probe_factor (at least one site fewer), unless a failed downward trial blocks it."""
        k = max(1, min(k_cur - 1, math.floor(k_cur / p["probe_factor"] + 1e-9)))
        if k_cur <= 1:
            return k_cur, why_not_up + "; no fewer sites to probe"
        if k < floor:
            return k_cur, why_not_up + (
                f"; no probe down either (shrinking below {floor} blocked by a failed trial)"
            )
        return k, (
            f"probe {k_cur} -> {k}: slope unknown (one k in the window) and no probe up "
            f"({why_not_up.removeprefix('hold k: slope unknown and ')}); the round shortens by "
            f"{1 - times[k - 1] / times[k_cur - 1]:.3g}; checked after one round (down_probe)"
        )

    def _check_down_probe(
        self,
        history: Sequence[PastRound],
        ks: list[int],
        fit: GainFit,
        k_cur: int,
        n: int,
        times: np.ndarray,
        p: dict,
        out: dict,
    ) -> int | None:
        """Step 6 for a downward probe a -> b (`down_probe`): undone after one round whose
        time or gain misses the prediction (the gain of a, as the slope was unknown), held
        `probe_rounds` rounds, then kept only if the fit, its rounds included, finds b more
        efficient than a; the k to take now, or None when no such probe is in progress. A
        shrink is a downward probe when the fit before it held one k (any other shrink
        needs a known slope)."""
        shrink = last_shrink(ks)
        if shrink is None:
            return None
        c, a, b = shrink[0], min(shrink[1], n), min(shrink[2], n)
        since, hold = len(ks) - c, int(p["probe_rounds"])
        if since > hold:
            return None  # past its hold: the probe, if it was one, has been judged
        fit_rounds, half_life = int(p["fit_rounds"]), p["half_life"]
        prior = fit_gain(
            history[:c], a, fit_rounds, half_life, bool(p["block_se"]), bool(p["level_se"])
        )
        if not (a > b == k_cur and prior.enough and prior.k_values == 1 and prior.level > 0):
            return None
        if since == 1:
            back = self._missed(history, prior, a, b, times, p, out)
            if back is not None:
                out["reason"] = back
                return a
        if since < hold:
            out["reason"] = f"probe {a} -> {b} held: {since}/{hold} round(s) measured"
            return b
        if since == hold:
            back = self._evidence(fit, a, b, times, out)
            if back is not None:
                out["reason"] = back
                return a
        return None

    @staticmethod
    def _ends_failed_shrink(ks: list[int], hold: int, c: int) -> bool:
        """Whether round index c is the return to a of a shrink a -> b undone within `hold`
        rounds (a failed downward trial)."""
        return any(back_at == c for _, back_at in failed_trials(ks, hold, downward=True))

    @staticmethod
    def _missed(
        history: Sequence[PastRound],
        prior: GainFit,
        a: int,
        b: int,
        times: np.ndarray,
        p: dict,
        out: dict,
    ) -> str | None:
        """Step 6: the reason to abandon a -> b after its first round, or None."""
        margin = p["probe_margin"]
        prior_slope = prior.slope - prior.slope_se if prior.known else 0.0
        predicted_gain = prior.level + prior_slope * math.log(b / a)
        measured_gain = history[-1].accuracy - history[-2].accuracy
        predicted_ratio = float(times[b - 1] / times[a - 1])
        before = history[-2].round_time_s
        measured_ratio = history[-1].round_time_s / before if before > 0 else math.inf
        tolerance = margin * abs(predicted_gain) + prior.sigma
        out["check"] = {
            ("grown" if b > a else "shrunk"): [a, b],
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
