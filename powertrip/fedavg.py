"""FedAvg as pure functions over numpy arrays (paper Eq. 2, weights = sample counts).

`StreamingFedAvg` accumulates deltas as they arrive so the aggregator holds O(model)
memory instead of O(sites x model). To stay bit-for-bit deterministic whatever order
uploads arrive in, it adds deltas in a fixed order (the dispatch order) and parks only the
ones that arrive early.
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
# barrier waited for a core (bench/RESULTS.md). A multiple of 64, so vector loops and their
# scalar tails cover the same elements as one whole-tensor add (tests/unit/test_fedavg.py).
_BLOCK = 32_704


def _accumulate(
    acc: np.ndarray, delta: np.ndarray, weight: float, pool: Executor | None = None, parts: int = 1
) -> None:
    """acc += float64(delta) * weight, a cache-sized block at a time, in `parts` threads.

    One mixed-dtype `add_(alpha=)` per block: torch widens each float32 element exactly and
    adds w x it to the float64 accumulator in one pass, with no float64 copy of the delta,
    so the aggregator's memory stays ~1x the accumulator. Element-wise, so the result does
    not depend on the block size or on how the blocks are shared out.

    Parallel with Python threads, not OpenMP: the calling thread takes the first share of
    the blocks and `pool` the others (torch releases the GIL in each add), one wait per
    tensor instead of one barrier per block. Figures in bench/RESULTS.md.
    """
    acc_blocks = torch.from_numpy(acc.reshape(-1)).split(_BLOCK)
    delta_blocks = torch.from_numpy(np.ascontiguousarray(delta).reshape(-1)).split(_BLOCK)
    w = float(weight)

    def add(first: int, last: int) -> None:
        for acc_block, delta_block in zip(
            acc_blocks[first:last], delta_blocks[first:last], strict=True
        ):
            acc_block.add_(delta_block, alpha=w)

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
    ):
        """threads: how many threads add a delta (default: the process's torch thread
        count, which the aggregator sets to the cores it evaluates on)."""
        self.order = list(order)
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
                    _accumulate(acc, delta[key], weight, self._pool, self._threads)
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
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        return {
            k: (acc / self._weight).astype(self._template[k][1]) for k, acc in self._acc.items()
        }
