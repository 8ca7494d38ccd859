"""FedAvg as pure functions over numpy arrays (paper Eq. 2, weights = sample counts).

`StreamingFedAvg` accumulates deltas as they arrive so the aggregator holds O(model)
memory instead of O(sites x model). To stay bit-for-bit deterministic whatever order
uploads arrive in, it adds deltas in a fixed order (the dispatch order) and parks only the
ones that arrive early.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch


def weighted_average(
    deltas: Sequence[Mapping[str, np.ndarray]], weights: Sequence[float]
) -> dict[str, np.ndarray]:
    """sum_i w_i * delta_i / sum_i w_i, computed in float64, returned in the input dtype."""
    if not deltas:
        raise ValueError("nothing to aggregate")
    if len(deltas) != len(weights):
        raise ValueError("one weight per delta")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    out: dict[str, np.ndarray] = {}
    for key, first in deltas[0].items():
        acc = np.zeros(first.shape, dtype=np.float64)
        for delta, weight in zip(deltas, weights, strict=True):
            acc += delta[key].astype(np.float64, copy=False) * (weight / total)
        out[key] = acc.astype(first.dtype)
    return out


def apply_delta(
    weights: Mapping[str, np.ndarray], delta: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """w_{t+1} = w_t + aggregated delta."""
    return {k: (v + delta[k].astype(v.dtype, copy=False)) for k, v in weights.items()}


# Elements per block: a 256 KiB float64 scratch, reused, stays in L2. Below torch's parallel
# grain (32,768 elements), so every block runs on the calling thread whatever the process's
# torch thread count: the aggregator evaluates on every core (services/aggregator/
# evaluator.py), and a 2-thread OpenMP region per block while the site workers train on both
# cores fell from 4.5 to 0.27 GB/s (bench/RESULTS.md). A multiple of 64, so vector loops and
# their scalar tails cover the same elements as before (bit-identical, tests/unit/test_fedavg.py).
_BLOCK = 32_704


def _accumulate(acc: np.ndarray, delta: np.ndarray, weight: float, scratch: np.ndarray) -> None:
    """acc += float64(delta) * weight, a cache-sized block at a time.

    The temporary is one small reused block instead of a float64 copy of the model, so the
    aggregator's memory stays ~1x the float64 accumulator. Per block: widen float32 to
    float64 (exact), then one fused multiply-add (torch's `add_(alpha=)`, vectorised) over
    the cached block; numpy needs a mixed-dtype multiply (its slow casting loop) or three
    passes. Element-wise and in a fixed order, so the result does not depend on threads.
    """
    flat_acc = torch.from_numpy(acc.reshape(-1))
    flat_delta = torch.from_numpy(np.ascontiguousarray(delta).reshape(-1))
    buffer = torch.from_numpy(scratch)
    w = float(weight)
    # views made in one call each (a Python slice per block cost as much as the arithmetic)
    for acc_block, delta_block in zip(
        flat_acc.split(_BLOCK), flat_delta.split(_BLOCK), strict=True
    ):
        block = buffer if len(delta_block) == len(buffer) else buffer[: len(delta_block)]
        block.copy_(delta_block)
        acc_block.add_(block, alpha=w)


class StreamingFedAvg:
    """Accumulate weighted deltas in a fixed order with a small reorder buffer."""

    def __init__(self, order: Sequence[str], template: Mapping[str, np.ndarray]):
        self.order = list(order)
        self._position = {site: i for i, site in enumerate(self.order)}
        self._template = {k: (v.shape, v.dtype) for k, v in template.items()}
        self._acc = {k: np.zeros(v.shape, dtype=np.float64) for k, v in template.items()}
        self._scratch = np.empty(_BLOCK, dtype=np.float64)
        self._weight = 0.0
        self._next = 0
        self._parked: dict[int, tuple[Mapping[str, np.ndarray], float]] = {}
        self._skipped: set[int] = set()
        self.contributors: list[str] = []

    def add(self, site: str, delta: Mapping[str, np.ndarray], weight: float) -> None:
        if site not in self._position:
            raise KeyError(f"{site} is not part of this round")
        if weight <= 0:
            raise ValueError("weight must be > 0")
        self._parked[self._position[site]] = (delta, float(weight))
        self._drain()

    def skip(self, site: str) -> None:
        """The site will not contribute (failed or timed out); stop waiting for it."""
        self._skipped.add(self._position[site])
        self._drain()

    def _drain(self) -> None:
        while self._next < len(self.order):
            if self._next in self._parked:
                delta, weight = self._parked.pop(self._next)
                for key, acc in self._acc.items():
                    _accumulate(acc, delta[key], weight, self._scratch)
                self._weight += weight
                self.contributors.append(self.order[self._next])
            elif self._next not in self._skipped:
                return
            self._next += 1

    @property
    def parked(self) -> int:
        return len(self._parked)

    def result(self) -> dict[str, np.ndarray]:
        """Weighted mean of the contributed deltas (all expected sites added or skipped)."""
        if self._next < len(self.order):
            raise RuntimeError(f"still waiting for {self.order[self._next]}")
        if self._weight <= 0:
            raise RuntimeError("no site contributed to this round")
        return {
            k: (acc / self._weight).astype(self._template[k][1]) for k, acc in self._acc.items()
        }
