"""When a run stops: the one place that decides it.

The aggregator alone owns the stop decision; the policy sends none (Selection.stop is
reserved in the contract). A run stops when a round reaches the target (the accuracy, or
the perplexity when the run sets target_perplexity), when the
time budget is spent (on the simulated clock, already when the next round would overrun
it), when the wall-clock budget is spent, or after max_rounds.
Pure functions, so the rule is testable without a run.
"""

from __future__ import annotations

import math

TARGET_REACHED = "target_reached"
TIME_BUDGET = "time_budget"
WALL_BUDGET = "wall_budget"
MAX_ROUNDS = "max_rounds"


def stop_before_round(sim_time_s: float, round_s: float, max_sim_hours: float | None) -> str | None:
    """For a round whose length is known before it runs (the simulated clock's; clock.py
    asks): do not train a round that would end after the time budget."""
    if max_sim_hours:
        if sim_time_s + round_s > max_sim_hours * 3600:
            return TIME_BUDGET
    return None


def stop_reason(
    accuracy: float,
    target_accuracy: float,
    target_reached_before: bool,
    sim_time_s: float,
    max_sim_hours: float | None,
    *,
    loss: float = math.inf,
    target_perplexity: float | None = None,
    wall_s: float = 0.0,
    max_wall_hours: float = 0.0,
) -> str | None:
    """Why the run stops after a round that ends at `sim_time_s` with `accuracy` and held-out
    mean cross-entropy `loss`, or None. With a `target_perplexity`, the target is
    exp(loss) <= it and the accuracy does not stop the run. `wall_s` is the wall time this
    process has run rounds for, against `max_wall_hours`. The round limit is the loop's own
    bound (MAX_ROUNDS), checked before the next round."""
    if target_reached(accuracy, target_accuracy, loss, target_perplexity) and not (
        target_reached_before
    ):
        return TARGET_REACHED
    if max_sim_hours and sim_time_s >= max_sim_hours * 3600:
        return TIME_BUDGET
    if max_wall_hours and wall_s >= max_wall_hours * 3600:
        return WALL_BUDGET
    return None


def target_reached(
    accuracy: float, target_accuracy: float, loss: float, target_perplexity: float | None
) -> bool:
    """The run's target: the perplexity when it has one (not None or 0), else the accuracy.
    A NaN loss (a diverged model) reaches no perplexity."""
    if target_perplexity:
        return math.exp(min(loss, 700.0)) <= target_perplexity  # exp(>709) overflows
    return accuracy >= target_accuracy
