"""Power-to-cost scores (paper Eq. 8) and rankings, vectorised so 10,000 sites rank in
milliseconds. Pure functions of the site table: every policy and shadow shares them."""

from __future__ import annotations

import numpy as np

from services.policy.policies.base import PolicyError, SiteTable

GB = 1e9


def normalise(values: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1]; a constant column maps to 0 (it cannot separate sites)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.float64)
    lo, hi = float(np.min(values)), float(np.max(values))
    if hi - lo <= 0:
        return np.zeros_like(values, dtype=np.float64)
    return (values - lo) / (hi - lo)


def weights(update_size_bytes: float, m_ref_bytes: float) -> tuple[float, float]:
    """alpha, beta with beta = M / (M + M_ref): small updates favour power, large favour cost.

    At M = M_ref power and cost weigh the same; the paper only says the weights follow M,
    this is the simplest monotone form with that property.
    """
    if m_ref_bytes <= 0:
        raise PolicyError(f"m_ref must be > 0, got {m_ref_bytes:g} bytes")
    if update_size_bytes < 0:
        raise PolicyError(f"update_size_bytes must be >= 0, got {update_size_bytes:g}")
    beta = update_size_bytes / (update_size_bytes + m_ref_bytes)
    return 1.0 - beta, beta


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


def rank_desc(values: np.ndarray, table: SiteTable) -> np.ndarray:
    """Alive site indices by value, highest first; ties broken by site id."""
    return rank_asc(-np.asarray(values), table)


def rank_asc(values: np.ndarray, table: SiteTable) -> np.ndarray:
    """Alive site indices by value, lowest first; ties broken by site id.

    A stable sort of the sites in id order: the same order as lexsort((id_rank, values)),
    in about half the time (one key instead of two)."""
    by_id = table.by_id
    order = by_id[np.argsort(np.asarray(values)[by_id], kind="stable")]
    return order[table.alive[order]]
