"""Power-to-cost scores (paper Eq. 8), vectorised so 10,000 sites rank in milliseconds."""

from __future__ import annotations

import numpy as np

from services.policy.policies.base import SiteTable


def normalise(values: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1]; a constant column maps to 0 (it cannot separate sites)."""
    lo, hi = float(np.min(values)), float(np.max(values))
    if hi - lo <= 0:
        return np.zeros_like(values, dtype=np.float64)
    return (values - lo) / (hi - lo)


def weights(update_size_bytes: float, m_ref_bytes: float) -> tuple[float, float]:
    """alpha, beta with beta = M / (M + M_ref): small updates favour power, large favour cost."""
    beta = update_size_bytes / (update_size_bytes + m_ref_bytes)
    return 1.0 - beta, beta


def power_cost_scores(table: SiteTable, update_size_bytes: float, m_ref_bytes: float) -> np.ndarray:
    """S_i = alpha * P-hat_i - beta * C-hat_i over the alive sites (dead sites get -inf)."""
    alpha, beta = weights(update_size_bytes, m_ref_bytes)
    scores = np.full(len(table), -np.inf)
    alive = table.alive
    if alive.any():
        scores[alive] = alpha * normalise(table.power[alive]) - beta * normalise(
            table.comm_s[alive]
        )
    return scores


def rank_desc(values: np.ndarray, table: SiteTable) -> np.ndarray:
    """Alive site indices by value, highest first; ties broken by table order (site id)."""
    order = np.lexsort((np.arange(len(values)), -values))
    return order[table.alive[order]]


def rank_asc(values: np.ndarray, table: SiteTable) -> np.ndarray:
    order = np.lexsort((np.arange(len(values)), values))
    return order[table.alive[order]]
