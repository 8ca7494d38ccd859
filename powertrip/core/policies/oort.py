"""Oort (Lai et al., OSDI '21, "Oort: Efficient Federated Learning via Guided Participant
Selection"; FedScale's selector): sites ranked by statistical x system utility.

The paper's definitions (§4.2-4.3, Algorithm 1), as used here:

* Statistical utility (Eq. 2): U_i = |B_i| sqrt(1/|B_i| sum_{k in B_i} Loss(k)^2), from the
  site's last round: |B_i| its training samples and Loss its training loss.
  OUR CHOICE: a site reports the mean loss of its local steps, not every sample's, so the
  root-mean-square loss is read as that mean (U_i = n_i x mean loss; the mean is a lower
  bound of the RMS). As in FedScale, U is clipped at the 95th percentile of the explored
  sites' values and min-max normalised to [0, 1] before the bonus is added.
* Temporal uncertainty (Algorithm 1, line 10): + sqrt(0.1 ln R / L_i), R the round being
  decided and L_i the last round site i took part in, so sites not seen for long regain
  utility (staleness).
* System utility (Eq. 3): the utility is multiplied by (T / t_i)^alpha when t_i > T, t_i the
  site's own last duration (its compute plus communication on the run's clock) and T the
  developer-preferred round duration; alpha = `penalty` (the paper's default 2).
  OUR CHOICE (FedScale's reading): T is the `pref_pct`-th percentile of the explored sites'
  durations (30, FedScale's round_threshold), so it has the run's units.
* Pacer (Algorithm 1, lines 5-6): every W = `pacer_step` rounds, if the statistical utility
  summed over the last W rounds is below that of the W before them, T is relaxed by
  `pacer_delta` percentile points (up to 100 = no penalty). OUR CHOICE: W = 5 rounds, not
  FedScale's 20, because our runs last tens of rounds, not thousands.
* Exploration vs exploitation (§4.3): a share epsilon of the K participants explores sites
  never seen, epsilon = max(epsilon_0 x decay^(R-1), epsilon_min) (FedScale's 0.9, 0.98,
  0.3); the rest exploits: sites whose utility is at least c = `cutoff` (the paper's 95 %)
  of the (1 - epsilon)K-th best are admitted, and (1 - epsilon)K of them are sampled with
  probability proportional to utility. Unexplored sites are sampled by speed ("SampleBySpeed"):
  OUR CHOICE, probability proportional to 1 / (tau / p_i + T_comm,i), their duration on the
  time model, since the policy knows their power and link but not their data.
  The paper's blacklist of over-selected clients is left out (FedScale's default is off too).

K is the `k` parameter (unset: 30 % of the alive sites, as random and static use); Oort takes
K from the developer. Stateless like every policy here: explored sites, their last utility,
duration and round, and the pacer's T are replayed from the history (RoundRecord's per-site
reports), and the draws are seeded by (seed, round).
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
    default_k,
    k_param,
    predicted_time,
    rounded,
)
from powertrip.core.policies.params import PolicyParams, param

#: statistical utility is clipped at this percentile of the explored sites' (FedScale)
CLIP_PERCENTILE = 95.0
#: the temporal-uncertainty coefficient of Algorithm 1
STALENESS_COEFFICIENT = 0.1


@dataclass(frozen=True)
class Observation:
    """The last thing the history says about one site."""

    last_round: int  # L_i
    utility: float  # U_i = n_i x mean training loss
    duration_s: float  # t_i


def statistical_utility(num_samples: float, train_loss: float) -> float:
    """Eq. 2 with the mean loss as the RMS loss: |B_i| x loss (0 for a loss that is not a
    finite non-negative number)."""
    if not math.isfinite(train_loss) or train_loss < 0 or num_samples <= 0:
        return 0.0
    return float(num_samples) * float(train_loss)


def observations(history: Sequence[PastRound]) -> dict[str, Observation]:
    """Each reported site's latest observation (a later round overrides an earlier one)."""
    seen: dict[str, Observation] = {}
    for past in history:
        for site, loss, n, duration in zip(
            past.reported_site_ids,
            past.site_train_loss,
            past.site_num_samples,
            past.site_duration_s,
            strict=True,
        ):
            seen[site] = Observation(past.round, statistical_utility(n, loss), float(duration))
    return seen


def round_utilities(history: Sequence[PastRound]) -> list[float]:
    """The statistical utility each past round achieved (summed over its reporting sites)."""
    return [
        sum(
            statistical_utility(n, loss)
            for loss, n in zip(p.site_train_loss, p.site_num_samples, strict=True)
        )
        for p in history
    ]


def paced_percentile(utilities: Sequence[float], start: float, step: int, delta: float) -> float:
    """The pacer replayed: every `step` rounds, relax by `delta` points when the last `step`
    rounds' utility fell below that of the `step` rounds before (Algorithm 1)."""
    pct = start
    for end in range(2 * step, len(utilities) + 1, step):
        before = sum(utilities[end - 2 * step : end - step])
        recent = sum(utilities[end - step : end])
        if before > recent:
            pct = min(100.0, pct + delta)
    return pct


def preferred_duration(durations: Sequence[float], pct: float) -> float:
    """T: the pct-th percentile of the explored sites' durations (inf at 100 or none)."""
    if pct >= 100 or not durations:
        return math.inf
    ordered = sorted(durations)
    return ordered[min(int(len(ordered) * pct / 100.0), len(ordered) - 1)]


def exploit_utilities(
    obs: Sequence[Observation], round_no: int, preferred_s: float, penalty: float
) -> np.ndarray:
    """Oort's utility of explored sites: normalised statistical utility + staleness bonus,
    times the system penalty (T / t_i)^alpha for sites slower than T."""
    raw = np.array([o.utility for o in obs], dtype=np.float64)
    if len(raw) == 0:
        return raw
    clipped = np.minimum(raw, np.percentile(raw, CLIP_PERCENTILE))
    lo, span = float(clipped.min()), float(clipped.max() - clipped.min())
    stat = (clipped - lo) / span if span > 0 else np.zeros_like(clipped)
    last = np.array([max(o.last_round, 1) for o in obs], dtype=np.float64)
    bonus = np.sqrt(STALENESS_COEFFICIENT * math.log(max(round_no, 1)) / last)
    util = stat + bonus
    duration = np.array([o.duration_s for o in obs], dtype=np.float64)
    slow = duration > preferred_s
    util[slow] *= (preferred_s / np.maximum(duration[slow], 1e-9)) ** penalty
    return util


def _weighted_sample(rng, items: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """n of `items` without replacement, probability proportional to weights (uniform when
    they are all zero)."""
    if n <= 0:
        return items[:0]
    weights = np.asarray(weights, dtype=np.float64)
    if np.count_nonzero(weights > 0) < n and weights.max(initial=0.0) > 0:
        # too few with utility: the rest of the draw falls on the zero-weight items
        weights = weights + weights.max() * 1e-9
    total = float(weights.sum())
    p = weights / total if total > 0 else None
    picked = rng.choice(len(items), size=n, replace=False, p=p)
    return items[np.sort(picked)] if p is None else items[picked]


@dataclass(frozen=True)
class OortParams(PolicyParams):
    """Oort's knobs (the module docstring says where each comes from)."""

    k: int | None = k_param()
    penalty: float = param(2.0, "alpha: slower sites' utility x (T / t_i)^alpha", at_least=0)
    epsilon: float = param(0.9, "share of k exploring unseen sites in round 1", at_least=0,
                           at_most=1)  # fmt: skip
    epsilon_decay: float = param(0.98, "epsilon's factor per round", above=0, at_most=1)
    epsilon_min: float = param(0.3, "epsilon never decays below this", at_least=0, at_most=1)
    pref_pct: float = param(
        30.0, "T: this percentile of the seen sites' durations", above=0, at_most=100
    )
    pacer_step: int = param(
        5, "W: rounds between the pacer's looks at the utility", whole=True, at_least=1
    )
    pacer_delta: float = param(
        5.0, "percentile points the pacer relaxes T by", at_least=0, at_most=100
    )
    cutoff: float = param(
        0.95, "c: admit sites with utility >= c x the cut-off site's", at_least=0, at_most=1
    )


class Oort(Policy):
    name = "oort"
    summary = (
        "Oort (OSDI '21): statistical x system utility, exploring unseen sites and exploiting "
        "with a staleness bonus (beyond the paper)"
    )
    details = (
        "k: the k parameter (unset: 30 % of the alive sites). Utility = normalised n_i x mean "
        "train loss + sqrt(0.1 ln R / L_i), x (T/t_i)^penalty for sites slower than T (the "
        "pref_pct-th percentile of seen durations, relaxed by the pacer every pacer_step "
        "rounds). epsilon of k explores unseen sites by speed (decaying from epsilon by "
        "epsilon_decay to epsilon_min); the rest samples by utility above cutoff x the "
        "cut-off site's. OUR CHOICEs in powertrip/core/policies/oort.py."
    )
    Params = OortParams

    def select(self, ctx: Context) -> Decision:
        params = self.params(ctx)
        table = ctx.table
        alive = table.alive_by_id  # id order: draws do not depend on arrival order
        k = default_k(params.k, len(alive))
        seen = observations(ctx.history)
        pct = paced_percentile(
            round_utilities(ctx.history),
            params.pref_pct,
            params.pacer_step,
            params.pacer_delta,
        )
        preferred_s = preferred_duration([o.duration_s for o in seen.values()], pct)
        is_seen = np.array([s in seen for s in table.ids[alive].tolist()], dtype=bool)
        explored, fresh = alive[is_seen], alive[~is_seen]
        decay = params.epsilon_decay ** max(ctx.round - 1, 0)
        epsilon = max(params.epsilon * decay, params.epsilon_min)
        n_explore = min(len(fresh), max(round(epsilon * k), k - len(explored)))
        n_exploit = min(len(explored), k - n_explore)
        rng = np.random.default_rng([ctx.seed, ctx.round, 0x0027])

        util = exploit_utilities(
            [seen[s] for s in table.ids[explored].tolist()],
            ctx.round,
            preferred_s,
            params.penalty,
        )
        by_util = np.argsort(-util, kind="stable")
        admitted = by_util[: max(n_exploit, 0)]
        if n_exploit > 0:
            cut = params.cutoff * util[by_util[n_exploit - 1]]
            admitted = by_util[util[by_util] >= cut]
        exploit = _weighted_sample(rng, admitted, util[admitted], n_exploit)
        exploit = exploit[np.argsort(-util[exploit], kind="stable")]

        speed = 1.0 / (ctx.tau_s / table.power[fresh] + table.comm_s[fresh])
        explore = _weighted_sample(rng, np.arange(len(fresh)), speed, n_explore)
        explore = explore[np.argsort(-speed[explore], kind="stable")]
        chosen = np.concatenate([explored[exploit], fresh[explore]]).astype(np.int64)
        explanation = {
            "rule": "oort: exploit by utility, explore unseen sites by speed",
            "k": int(len(chosen)),
            "epsilon": round(epsilon, 4),
            "explored": int(len(explored)),
            "exploit": int(n_exploit),
            "explore": int(n_explore),
            "admitted": int(len(admitted)),
            "pacer_pct": pct,
            "preferred_duration_s": None if math.isinf(preferred_s) else rounded([preferred_s])[0],
            "utility": rounded(util[exploit]),
        }
        return Decision(
            order=chosen,
            predicted_round_time_s=predicted_time(ctx, chosen),
            explanation=explanation,
        )
