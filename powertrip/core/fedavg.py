"""FedAvg as pure functions over numpy arrays (paper Eq. 2, weights = sample counts).

`StreamingFedAvg` accumulates deltas as they arrive so the aggregator holds O(model)
memory instead of O(sites x model). To stay bit-for-bit deterministic whatever order
uploads arrive in, it adds deltas in a fixed order (the dispatch order) and parks only the
ones that arrive early, and it folds up to `FOLD` consecutive deltas in one pass over the
accumulator, so the float64 sum is read and written once per group, not once per delta.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

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


# Elements per block: below torch's parallel grain (32,768 elements), so no block ever starts
# an OpenMP region, whatever the process's torch thread count. The aggregator evaluates on
# every core (services/aggregator/evaluator.py), and 2-thread OpenMP regions, one per block,
# while the site workers trained on both cores fell from 4.5 to 0.27 GB/s: every region's
# barrier waited for a core (docs/benchmarks.md at 291b5ac2). A multiple of 64, so vector
# loops and their scalar tails cover the same elements as one whole-tensor add
# (tests/unit/test_fedavg.py).
_BLOCK = 32_704


# Deltas folded into the float64 accumulator per pass (docs/benchmarks.md at 291b5ac2, round four):
# one delta at a time moves 20 bytes per element (the float32 delta in, the float64 sum in
# and out); four at a time, 8. The price is memory: up to FOLD - 1 in-order deltas wait for
# the rest of their group (or for result()), so the sum holds at most FOLD - 1 deltas more
# than the reorder buffer alone: O(model) still.
FOLD = 4


def _accumulate(
    acc: np.ndarray,
    deltas: Sequence[tuple[np.ndarray, float]],
    pool: Executor | None = None,
    parts: int = 1,
) -> None:
    """acc += float64(delta) * weight for each (delta, weight) in order, a block at a time.

    Per block, the deltas are added one after the other while the block sits in cache, so
    each element sees exactly the sequence of float64 `acc + w * delta` of one delta at a
    time, whole tensor after whole tensor: the result does not depend on how many are
    folded together, on the block size or on how the blocks are shared out. One
    mixed-dtype `add_(alpha=)` per block and delta: torch widens each float32 element
    exactly, with no float64 copy of the delta.

    Parallel with Python threads, not OpenMP: the calling thread takes the first share of
    the blocks and `pool` the others (torch releases the GIL in each add), one wait per
    tensor instead of one barrier per block. Figures in docs/benchmarks.md at 291b5ac2.
    """
    for delta, _w in deltas:
        if np.size(delta) != acc.size:  # before any block is added: the sum stays whole
            raise ValueError(
                f"a delta of {np.size(delta)} elements cannot be added to a sum of {acc.size}"
            )
    acc_blocks = torch.from_numpy(acc.reshape(-1)).split(_BLOCK)
    terms = [
        (torch.from_numpy(np.ascontiguousarray(delta).reshape(-1)).split(_BLOCK), float(w))
        for delta, w in deltas
    ]

    def add(first: int, last: int) -> None:
        for i in range(first, last):
            acc_block = acc_blocks[i]
            for delta_blocks, w in terms:
                acc_block.add_(delta_blocks[i], alpha=w)

    parts = max(1, min(parts, len(acc_blocks) // 2)) if pool is not None else 1
    bounds = [len(acc_blocks) * i // parts for i in range(parts + 1)]
    shares = [pool.submit(add, bounds[i], bounds[i + 1]) for i in range(1, parts)] if pool else []
    try:
        add(bounds[0], bounds[1])
    finally:
        for share in shares:
            share.result()  # waits, and raises here what a share raised


class StreamingFedAvg:
    """Accumulate weighted deltas in a fixed order with a small reorder buffer."""

    def __init__(
        self,
        order: Sequence[str],
        template: Mapping[str, np.ndarray],
        threads: int | None = None,
        fold: int = FOLD,
    ):
        """threads: how many threads add a delta (default: the process's torch thread
        count, which the aggregator sets to the cores it evaluates on); fold: how many
        consecutive deltas one pass over the sum adds (1 adds each as it comes)."""
        if fold < 1:
            raise ValueError(f"fold must be >= 1, got {fold}")
        self.order = list(order)
        self._fold = fold
        self._threads = threads if threads is not None else torch.get_num_threads()
        # helpers for the share of each large tensor the caller does not add itself; their
        # threads end with this accumulator (shutdown in result(), or when it is collected)
        self._pool = (
            ThreadPoolExecutor(self._threads - 1, thread_name_prefix="fedavg")
            if self._threads > 1
            else None
        )
        self._position = {site: i for i, site in enumerate(self.order)}
        self._template = {k: (v.shape, v.dtype) for k, v in template.items()}
        self._acc = {k: np.zeros(v.shape, dtype=np.float64) for k, v in template.items()}
        self._weight = 0.0
        self._next = 0
        self._parked: dict[int, tuple[Mapping[str, np.ndarray], float]] = {}
        self._skipped: set[int] = set()
        self.contributors: list[str] = []
        self._mean: dict[str, np.ndarray] | None = None  # result(), once computed

    def add(self, site: str, delta: Mapping[str, np.ndarray], weight: float) -> None:
        if site not in self._position:
            raise KeyError(f"{site} is not part of this round")
        if weight <= 0:
            raise ValueError("weight must be > 0")
        # checked before parking: a delta that cannot be added must not take the good
        # deltas folded in the same pass down with it
        for key, (shape, _dtype) in self._template.items():
            if key not in delta or np.shape(delta[key]) != shape:
                raise ValueError(
                    f"{site}'s delta has no {key} of shape {shape}"
                    + (f" (got {np.shape(delta[key])})" if key in delta else "")
                )
        self._parked[self._position[site]] = (delta, float(weight))
        self._drain()

    def skip(self, site: str) -> None:
        """The site will not contribute (failed or timed out); stop waiting for it."""
        self._skipped.add(self._position[site])
        self._drain()

    def _drain(self) -> None:
        """Fold the parked deltas next in the order, `fold` at a time.

        A shorter group waits for the rest unless nothing after it is still expected (every
        later site added or skipped), which result() then needs anyway.
        """
        while self._next < len(self.order):
            group: list[int] = []
            position = self._next
            while position < len(self.order) and len(group) < self._fold:
                if position in self._parked:
                    group.append(position)
                elif position not in self._skipped:
                    break  # a site still expected: later deltas must wait for it
                position += 1
            if len(group) < self._fold and position < len(self.order):
                return
            if not group:  # every site left was skipped
                self._next = position
                continue
            terms = [self._parked.pop(i) for i in group]
            for key, acc in self._acc.items():
                _accumulate(acc, [(delta[key], w) for delta, w in terms], self._pool, self._threads)
            for i, (_delta, weight) in zip(group, terms, strict=True):
                self._weight += weight
                self.contributors.append(self.order[i])
            self._next = position

    @property
    def parked(self) -> int:
        return len(self._parked)

    def result(self) -> dict[str, np.ndarray]:
        """Weighted mean of the contributed deltas (all expected sites added or skipped)."""
        if self._next < len(self.order):
            waiting = next(
                site
                for i, site in enumerate(self.order[self._next :], self._next)
                if i not in self._parked and i not in self._skipped
            )
            raise RuntimeError(f"still waiting for {waiting}")
        if self._weight <= 0:
            raise RuntimeError("no site contributed to this round")
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self._mean is None:
            # divided in place: no second float64 copy of the model at the round's peak
            for acc in self._acc.values():
                np.divide(acc, self._weight, out=acc)
            self._mean = {k: acc.astype(self._template[k][1]) for k, acc in self._acc.items()}
        return self._mean
