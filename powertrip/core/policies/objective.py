"""The carbon objective: a policy's round, re-chosen for less CO2 within a time
slack. Pure functions of the context and the policy's own decision.

The paper ranks sites by power against communication cost (Eq. 8),

    S_i = alpha * P-hat_i - beta * C-hat_i,

and its k rule grows the top of that ranking. Under the time model every site spends the
same energy on a round's work at any power (N_eff = p_i N_max GPUs for tau / p_i: Eq. 6),
so what tells sites apart in CO2 is the grid, g_i, and the idle energy a site draws while it
waits for the straggler (r = P_idle / P_gpu of it, for T - compute_i). A site's kg CO2 per
unit of useful work is then

    G_i(T) = g_i ((1 - r) + r p_i T / tau)       (local-steps; x tau N_max P_gpu / 3.6e6)

The carbon objective keeps the chosen policy's k (its k rule is unchanged) and its round
time T* as the clock charges it (the slowest site's compute and transfer), and ranks by

    S_i^carbon = -G_i(slack x T*)  over the sites with tau / p_i + C_i <= slack x T*,

Eq. 8 with the grid's term taking the rank and power and communication entering through
the time they cost: a site too slow or too far for the slack cannot be chosen, and among
those that fit, the cleanest work wins. The top k form the round when they emit less than
the policy's own set (checked on the set's real T); else the policy's set stands. `slack`
(1.10 by default: a round may take 10 % longer) is the price in time the run accepts for
carbon, bounded round by round, not on the run's total (which also depends on how many
rounds the chosen sites need).
"""

from __future__ import annotations

import numpy as np

from powertrip.core.footprint import GPU_IDLE_POWER_W, GPU_POWER_W
from powertrip.core.policies.base import CENTRALIZED, Context, Decision, PolicyError
from powertrip.core.policies.scoring import rank_asc
from powertrip.core.timemodel import DP_REFERENCE_SITES, prefix_round_time_estimates

OBJECTIVES = ("time", "carbon")
#: a carbon round may take this x the time objective's predicted round time
CARBON_SLACK = 1.10
#: idle against active GPU power, the accounting's defaults (50 W / 250 W): what a site
#: waiting for the straggler still draws, where the run gives no powers of its own
IDLE_RATIO = GPU_IDLE_POWER_W / GPU_POWER_W


def idle_ratio(gpu_power_w: float, gpu_idle_power_w: float) -> float:
    """r = P_idle / P_gpu of a run's accounting (its `gpu_power_w`, `gpu_idle_power_w`);
    `IDLE_RATIO` where no active power is given (0: a request from before the field)."""
    return gpu_idle_power_w / gpu_power_w if gpu_power_w > 0 else IDLE_RATIO


def round_time(ctx: Context, order: np.ndarray) -> float:
    """The clock's round time for `order` (max over sites of compute + communication): the
    slack bounds what the run will be charged, not the paper's mean-power estimate, which
    hides a slow site behind fast ones."""
    t = ctx.table
    return float(
        prefix_round_time_estimates(
            ctx.tau_s, t.power[order], t.comm_s[order], "clock", ctx.work_model
        )[-1]
    )


def round_carbon(ctx: Context, order: np.ndarray, idle: float = IDLE_RATIO) -> float:
    """The round's carbon up to one constant (N_max x P_gpu / 3.6e6): sum_i g_i p_i
    ((1 - r) compute_i + r T), the sites' active energy while computing and idle energy
    (r = P_idle / P_gpu, `idle`, the run's accounting) until the straggler is done at T, as
    powertrip/core/footprint.py charges them."""
    table = ctx.table
    if table.carbon_g_per_kwh is None:
        raise PolicyError("no carbon intensities")
    g, p = table.carbon_g_per_kwh[order], table.power[order]
    if ctx.work_model == "local-steps":
        compute = ctx.tau_s / p
    else:  # data-parallel, power-split: every site computes the same time (Eq. 7)
        compute = np.full(len(order), DP_REFERENCE_SITES * ctx.tau_s / float(np.sum(p)))
    return float(np.sum(g * p * ((1 - idle) * compute + idle * round_time(ctx, order))))


def carbon_ranking(ctx: Context, bound_s: float, idle: float = IDLE_RATIO) -> np.ndarray:
    """The alive sites that finish within `bound_s`, by G_i(bound_s), cleanest first
    (ties by id); under the data-parallel and power-split work models, where compute
    depends on the whole set, every alive site by g_i and the set is checked afterwards."""
    table = ctx.table
    g, p = table.carbon_g_per_kwh, table.power
    if ctx.work_model == "local-steps":
        with np.errstate(divide="ignore"):
            alone = ctx.tau_s / p + table.comm_s
        key = g * ((1 - idle) + idle * p * bound_s / ctx.tau_s)
        key = np.where(alone <= bound_s, key, np.inf)
        ranked = rank_asc(key, table)
        return ranked[np.isfinite(key[ranked])]
    return rank_asc(g, table)


def for_carbon(
    ctx: Context, decision: Decision, slack: float = CARBON_SLACK, idle: float = IDLE_RATIO
) -> Decision:
    """The decision under the carbon objective (module docstring), `idle` the run's
    P_idle / P_gpu (`idle_ratio`); a centralized one, or one with no cleaner set within the
    slack, stands as it is."""
    if ctx.table.carbon_g_per_kwh is None:
        raise PolicyError(
            "objective carbon needs each site's grid carbon intensity, which these profiles "
            "do not carry; run with population: regions"
        )
    if not slack >= 1.0:
        raise PolicyError(f"carbon_slack must be >= 1, got {slack:g}")
    if decision.mode == CENTRALIZED or len(decision.order) == 0:
        return decision
    k = len(decision.order)
    t_time = round_time(ctx, decision.order)
    c_time = round_carbon(ctx, decision.order, idle)
    order = carbon_ranking(ctx, slack * t_time, idle)[:k]
    if len(order) == k:
        t = round_time(ctx, order)
        c = round_carbon(ctx, order, idle)
        if t <= slack * t_time * (1 + 1e-12) and c < c_time:
            explanation = {
                **decision.explanation,
                "objective": "carbon",
                "slack": slack,
                "time_objective_s": round(t_time, 6),
                "carbon_round_time_s": round(t, 6),
                "carbon_vs_time": round(c / c_time, 6),
            }
            predicted = float(ctx.round_time_estimates(order)[-1])  # the run's own estimator
            return Decision(order, predicted, explanation, decision.mode, decision.power_cap)
    return Decision(
        decision.order,
        decision.predicted_round_time_s,
        {
            **decision.explanation,
            "objective": "carbon",
            "slack": slack,
            "carbon_vs_time": 1.0,
            "note": "no cleaner set of this k within the slack",
        },  # fmt: skip
        decision.mode,
        decision.power_cap,
    )
