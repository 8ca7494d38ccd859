"""The measured efficiency PowerTrip's rule reads from the history (paper Eq. 5, §3.3, §4).

Pure functions of the per-round accuracies, measured round times and sizes k, so each can be
tested on a hand-made history; `powertrip.py` combines them into the decision.
"""

from __future__ import annotations

import numpy as np


def gains_of(accuracies: list[float]) -> np.ndarray:
    """Per-round accuracy gains dA_j, the first measured from 0."""
    return np.diff(np.array([0.0, *accuracies], dtype=np.float64))


def measured_efficiency(gains: np.ndarray, times: np.ndarray, window: int) -> float:
    """Eq. 5 over the last `window` rounds: accuracy gained per second of measured time."""
    total = float(np.sum(times[-window:]))
    return float(np.sum(gains[-window:])) / total if total > 0 else 0.0


def realised_below(
    gains: np.ndarray, times: np.ndarray, window: int, share: float, last: int
) -> int:
    """How many of the latest `last` rounds in a row had a realised efficiency dA_j / T_j
    below `share` x the measured efficiency (Eq. 5) of the `window` rounds before each; a
    round with no rounds before it never counts."""
    streak = 0
    for j in range(len(gains) - 1, max(0, len(gains) - last) - 1, -1):
        if j == 0:
            break
        reference = measured_efficiency(gains[:j], times[:j], window)
        if reference > 0 and gains[j] / times[j] < share * reference:
            streak += 1
        else:
            break
    return streak
