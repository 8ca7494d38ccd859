"""The outer step (powertrip/core/outer.py) on Flower's ArrayRecords.

Flower's FedAvg averages the models the nodes send back, not their deltas; the delta the
outer step needs is that average minus the model the round sent. "fedavg" returns the
average untouched, so a PowerTripStrategy without an outer optimizer aggregates exactly as
Flower's FedAvg does. The buffer lives on the strategy, as Flower's FedAvgM keeps its
momentum vector.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from powertrip.core.outer import OuterStep, outer_update


def outer_arrays(
    sent: ArrayRecord,
    averaged: ArrayRecord,
    buffer: dict[str, np.ndarray] | None,
    step: OuterStep,
) -> tuple[ArrayRecord, dict[str, np.ndarray] | None]:
    """(the next global model, the next buffer) from the round's sent and averaged arrays."""
    if not step.has_state:
        return averaged, buffer
    weights = {key: array.numpy() for key, array in sent.items()}
    average = {key: array.numpy() for key, array in averaged.items()}
    if list(weights) != list(average):
        raise ValueError("the averaged arrays do not match the arrays the round sent")
    delta = {key: np.subtract(average[key], w, dtype=w.dtype) for key, w in weights.items()}
    new, buffer = outer_update(weights, delta, buffer, step)
    return ArrayRecord({key: Array(value) for key, value in new.items()}), buffer
