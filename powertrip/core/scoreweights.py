"""The weights of the power-to-cost score (paper Eq. 8), in one place: the policies score
with them (powertrip/core/policies/scoring.py) and the Fig. 13 report checks them
(reproduction/paper/fig13.py) without importing the policy service."""

from __future__ import annotations

#: M_ref, the update size at which power and cost weigh the same: the score-based
#: policies' default `m_ref_gb` (OUR CHOICE: the base set-up's 1.5 GB update, the middle of
#: the paper's Fig. 13 sizes)
M_REF_GB = 1.5


def weights(update_size_bytes: float, m_ref_bytes: float) -> tuple[float, float]:
    """alpha, beta with beta = M / (M + M_ref): small updates favour power, large favour cost.

    At M = M_ref power and cost weigh the same; the paper only says the weights follow M,
    this is the simplest monotone form with that property. ValueError names a bad input.
    """
    if m_ref_bytes <= 0:
        raise ValueError(f"m_ref must be > 0, got {m_ref_bytes:g} bytes")
    if update_size_bytes < 0:
        raise ValueError(f"update_size_bytes must be >= 0, got {update_size_bytes:g}")
    beta = update_size_bytes / (update_size_bytes + m_ref_bytes)
    return 1.0 - beta, beta
