"""PowerTrip's dynamic policy as the paper writes it (§3.3, the Algorithm 1 table, §4).

Each step below quotes the paper beside what the code does. Where the text leaves a choice
open, the plainest reading is taken, labelled READING, and made a parameter.

1. Rank. "it ranks all available sites based on a performance-to-cost heuristic" (§4), the
   power-to-cost score of Eq. 8 (`scoring.py`), every round.
2. Start small. "initializing the active site count to a small number, k0 ... the
   best-ranked sites" (§3.3). READING: k0 = max(2, 2 % of the sites) (`k0`).
3. Measured efficiency. "the realized training efficiency (Equation 5), which ... serves as
   the feedback signal" (§4): E_meas = sum(dA_j) / sum(T_j) over the last `trend_rounds`
   measured rounds, dA_j = A_j - A_{j-1} (A_0 = 0).
4. Projected gain. "a model that incorporates recent accuracy trends (g), a normalization
   factor for the number of workers, and a logarithmic term to account for diminishing
   returns" (§3.3). READING: the trend g (mean dA over the same rounds) divided by the log
   term of the k_cur workers that produced it, times the log term of k:
       dA(k) = g * log(1 + k) / log(1 + k_cur),   so dA(k_cur) = g.
5. Estimated round time. "T(k) = tau / mean(p_top-k) + max_{i<=k} T_comm,i" (§3.3), the
   request's estimator (`paper` by default; `clock` charges the straggler).
6. Greedy addition inside a window. "evaluates a set of potential site counts within a
   window around its current count" (§3.3); "Starting with the top-ranked site, it
   iteratively considers adding the next-best site ... A site is only added if the system
   estimates that its inclusion will improve the overall training efficiency compared to the
   previously measured performance. This process continues until adding more sites offers
   no further benefit" (§4). So k starts at the bottom of the window and grows by one site
   while dA(k+1) / T(k+1) > E_meas, and stops at the first site that does not pay. READING:
   the window is k_cur +- `window` sites (0: max(1, 5 % of the sites)); its bottom is k_cur
   unless patience has run out (step 7).
7. Patience. "Patience: number of rounds to wait before reducing sites" (Algorithm 1 table).
   READING: count the latest rounds at the current k whose realised efficiency dA_j / T_j is
   below (`below_share` x) the measured efficiency of the `trend_rounds` rounds before each;
   after `patience` of them the window opens downwards and the scan starts at k_cur - window.
8. Stop. "until the system reaches the target accuracy" (§3.3): the aggregator stops the
   run (services/aggregator/stopping.py); the explanation says when the last accuracy
   reached the target.

With no recent gain (g <= 0) nothing can be projected to pay: k stays at the window's bottom.
Ties do not add a site (the comparison is strict).

Nothing else: options that went beyond the paper lost to this rule as written and were
deleted (their runs: the archive, commit e2b9ee1). What goes beyond the paper lives in its own
policy (`adaptive`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from powertrip.core.policies.base import (
    Context,
    Decision,
    Policy,
    explain_rows,
    rounded,
    small_k0,
)
from powertrip.core.policies.efficiency import gains_of, measured_efficiency, realised_below
from powertrip.core.policies.params import PolicyParams, param
from powertrip.core.policies.scoring import GB, m_ref_param, power_cost_ranking, weights


def auto_k0(num_alive: int) -> int:
    """The paper's 'small number' k0: max(2, 2 % of the sites), never more than there are."""
    return small_k0(num_alive, 0.02)


def auto_window(num_alive: int) -> int:
    return max(1, round(0.05 * num_alive))


def greedy_addition(eff_next: np.ndarray, measured: float) -> int:
    """How many sites the §4 scan adds: eff_next[j] is the projected efficiency with the
    (j+1)-th site of the window added; add while it beats the measured efficiency, stop at
    the first that does not."""
    fails = np.flatnonzero(~(eff_next > measured))
    return int(fails[0]) if len(fails) else int(len(eff_next))


@dataclass(frozen=True)
class PowerTripParams(PolicyParams):
    """The paper's rule's parameters: each READING of the module docstring."""

    k0: int | None = param(
        None, "sites in round 1 (step 2)", whole=True, at_least=1,
        none="max(2, 2 % of the alive sites)",
    )  # fmt: skip
    window: int | None = param(
        None, "sites the scan may add above k_cur, or start below it (step 6)", whole=True,
        at_least=1, none="max(1, 5 % of the alive sites)",
    )  # fmt: skip
    patience: int = param(
        3, "rounds below the measured efficiency before the window opens downwards "
        "(step 7; 0: never)", whole=True, at_least=0,
    )  # fmt: skip
    trend_rounds: int = param(
        3, "rounds the measured efficiency and the gain trend g average over (steps 3-4)",
        whole=True, at_least=1,
    )  # fmt: skip
    m_ref_gb: float = m_ref_param()
    below_share: float = param(
        1.0, "a round counts towards patience below this share of the measured efficiency",
        above=0, at_most=1,
    )  # fmt: skip


class PowerTrip(Policy):
    name = "powertrip"
    summary = (
        "power-to-cost ranking, bottom-up k: add the next site while its projected "
        "efficiency beats the measured one (paper §3.3-4)"
    )
    details = (
        "k: k0 = max(2, 2 % of sites) in round 1; then, from k_cur (k_cur - window once "
        "`patience` rounds at k_cur measured an efficiency below the one before them), add "
        "the next-ranked site while dA(k)/T(k) beats the measured efficiency (Eq. 5), "
        "stopping at the first that does not, at most `window` sites (0: 5 % of sites) "
        "above k_cur. dA(k) = g log(1+k)/log(1+k_cur), g the mean gain of the last "
        "`trend_rounds` rounds; T(k) the request's estimator."
    )
    Params = PowerTripParams
    #: how the sites are ranked, for the explanation
    ranking = "power-to-cost score (Eq. 8)"

    def rank(self, ctx: Context, params: PowerTripParams) -> tuple[np.ndarray, np.ndarray]:
        """(per-site scores, alive sites best first); highest-power overrides this."""
        return power_cost_ranking(ctx.table, ctx.update_size_bytes, params.m_ref_gb * GB)

    def select(self, ctx: Context) -> Decision:
        p = self.params(ctx)
        scores, ranked = self.rank(ctx, p)
        n = len(ranked)
        k0 = min(p.k0, n) if p.k0 is not None else auto_k0(n)
        window = p.window if p.window is not None else auto_window(n)
        # T-hat(k) for every k at once: cumulative mean power and running max comm
        times = ctx.round_time_estimates(ranked)
        alpha, beta = weights(ctx.update_size_bytes, p.m_ref_gb * GB)
        accuracies = [h.accuracy for h in ctx.history]
        target_met = bool(accuracies) and accuracies[-1] >= ctx.target_accuracy
        explanation: dict = {
            "rule": "paper",
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
        else:
            k = self._paper(ctx, p, accuracies, times, window, n, explanation)
        if target_met:
            explanation["reason"] = (
                f"target accuracy {ctx.target_accuracy:g} reached; " + explanation["reason"]
            )
        explanation["chosen"] = k
        chosen = ranked[:k]
        return Decision(
            order=chosen,
            predicted_round_time_s=float(times[k - 1]),
            explanation=explanation,
        )

    def _paper(self, ctx, p, accuracies, times, window, n, explanation) -> int:
        k_cur = int(min(max(1, ctx.history[-1].k), n))
        w = p.trend_rounds
        gains = gains_of(accuracies)
        measured_times = np.array([max(h.round_time_s, 1e-9) for h in ctx.history])
        ks = [int(h.k) for h in ctx.history]
        changed = [j for j in range(1, len(ks)) if ks[j] != ks[j - 1]]
        at_k_cur = len(ks) - (changed[-1] if changed else 0)  # rounds run at the current k
        g = float(np.mean(gains[-w:]))
        e_meas = measured_efficiency(gains, measured_times, w)
        below = realised_below(gains, measured_times, w, p.below_share, at_k_cur)
        shrink = p.patience > 0 and below >= p.patience and k_cur > 1
        bottom = max(1, k_cur - window) if shrink else k_cur
        top = min(n, k_cur + window)
        candidates = np.arange(bottom, top + 1)
        cand_times = times[candidates - 1]
        cand_gains = g * np.log1p(candidates) / math.log1p(k_cur)
        eff = cand_gains / cand_times
        if g <= 0:
            added = 0
            reason = "no recent accuracy gain: no site is projected to pay"
        else:
            added = greedy_addition(eff[1:], e_meas)
            if added == len(candidates) - 1 and added:
                reason = f"every site of the window beat the measured efficiency: added {added}"
            elif added:
                reason = (
                    f"added {added} site(s); the next one's projected efficiency "
                    f"{eff[added + 1]:.3g}/s is not above the measured {e_meas:.3g}/s"
                )
            elif len(candidates) > 1:
                reason = (
                    f"the next site's projected efficiency {eff[1]:.3g}/s is not above the "
                    f"measured {e_meas:.3g}/s"
                )
            else:
                reason = "no site left to add"
        k = int(candidates[added])
        if shrink:
            reason = (
                f"{below} round(s) at k={k_cur} below the measured efficiency (patience "
                f"{p.patience:g}): scan from k={bottom}; " + reason
            )
        else:
            reason = f"from k={k_cur}: " + reason
        explanation.update(
            reason=reason,
            k_cur=k_cur,
            gain=float(f"{g:.6g}"),
            measured_efficiency=float(f"{e_meas:.6g}"),
            rounds_below=below,
            may_shrink=bool(shrink),
            **explain_rows(candidates, cand_gains, cand_times, eff, added),
        )
        return k
