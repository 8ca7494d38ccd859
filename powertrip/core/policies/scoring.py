"""Power-to-cost scores (paper Eq. 8) and rankings, vectorised so 10,000 sites rank in
milliseconds. Pure functions of the site table: every policy and shadow shares them."""

from __future__ import annotations

from typing import Any

import numpy as np

from powertrip.core.policies.base import PolicyError, SiteTable
from powertrip.core.policies.params import param
from powertrip.core.scoreweights import weights as score_weights

GB = 1e9


def m_ref_param() -> Any:
    """The `m_ref_gb` parameter of every policy that ranks by Eq. 8's score."""
    return param(1.5, "M_ref in GB: Eq. 8 weighs communication by beta = M / (M + M_ref)", above=0)


def normalise(values: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1]; a constant column maps to 0 (it cannot separate sites)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.float64)
    lo, hi = float(np.min(values)), float(np.max(values))
    if hi - lo <= 0:
        return np.zeros_like(values, dtype=np.float64)
    return (values - lo) / (hi - lo)


def weights(update_size_bytes: float, m_ref_bytes: float) -> tuple[float, float]:
    """alpha, beta with beta = M / (M + M_ref) (`powertrip.core.scoreweights.weights`, which the
    Fig. 13 report reads too); a bad input is a PolicyError."""
    try:
        return score_weights(update_size_bytes, m_ref_bytes)
    except ValueError as exc:
        raise PolicyError(str(exc)) from None


def power_cost_scores(table: SiteTable, update_size_bytes: float, m_ref_bytes: float) -> np.ndarray:
    """S_i = alpha * P-hat_i - beta * C-hat_i over the alive sites (dead sites get -inf).

    Normalising over the alive sites only keeps a dead outlier from squashing everyone else.
    """
    alpha, beta = weights(update_size_bytes, m_ref_bytes)
    scores = np.full(len(table), -np.inf)
    alive = table.alive
    if alive.any():
        scores[alive] = alpha * normalise(table.power[alive]) - beta * normalise(
            table.comm_s[alive]
        )
    return scores


def power_cost_ranking(
    table: SiteTable, update_size_bytes: float, m_ref_bytes: float
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, alive sites by score, highest first), once per table and weights."""

    def compute():
        scores = power_cost_scores(table, update_size_bytes, m_ref_bytes)
        return scores, rank_desc(scores, table)

    return table.memo(("power_cost", update_size_bytes, m_ref_bytes), compute)


def power_ranking(table: SiteTable) -> np.ndarray:
    """Alive sites by power fraction, highest first, once per table."""
    return table.memo(("power",), lambda: (rank_desc(table.power, table),))[0]


def rank_desc(values: np.ndarray, table: SiteTable) -> np.ndarray:
    """Alive site indices by value, highest first; ties broken by site id."""
    return rank_asc(-np.asarray(values), table)


def rank_asc(values: np.ndarray, table: SiteTable) -> np.ndarray:
    """Alive site indices by value, lowest first; ties broken by site id.

    The alive sites are taken in id order and sorted by value, so a stable sort breaks ties
    by id. Most tables have no ties among the alive sites' values, and then the order is
    unique: numpy's quicksort finds it faster than a stable sort (docs/benchmarks.md at 291b5ac2),
    which matters because every shadow decision ranks once."""
    candidates = table.alive_by_id
    keys = np.asarray(values)[candidates]
    order = np.argsort(keys)
    ranked = keys[order]
    if (ranked[1:] == ranked[:-1]).any() or np.isnan(ranked[-1:]).any():
        order = np.argsort(keys, kind="stable")
    return candidates[order]
