"""bench/transfer.py's checked-TCP ceiling: it moves the model down and the delta up, and its
receiver really does the checks it is charged for (a non-finite delta stops it)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.transfer import CheckedTcp


def _arrays(fill: float = 0.5) -> dict[str, np.ndarray]:
    # one tensor over a 1 MiB chunk, so a tensor arrives in several chunks
    return {
        "w": np.full((300, 1000), fill, dtype=np.float32),
        "b": np.arange(7, dtype=np.float32),
    }


def test_checked_tcp_moves_the_model_down_and_the_delta_up():
    arrays = _arrays()
    with CheckedTcp(arrays) as ceiling:
        first, second = ceiling.once(), ceiling.once()
    nbytes = sum(a.nbytes for a in arrays.values())
    for moved in (first, second):
        assert moved.down_bytes == moved.up_bytes == nbytes
        assert moved.MBps > 0


def test_checked_tcp_receiver_rejects_a_non_finite_payload():
    with CheckedTcp(_arrays(np.nan)) as ceiling, pytest.raises(RuntimeError, match="stopped"):
        ceiling.once()
