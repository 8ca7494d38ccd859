"""The global model every site downloads, serialized once per version.

One part of the aggregator's state (state.py builds it), under the state's one lock. The
round loop reads `weights`, `version` and `nbytes` without it: only the loop installs a
model, so between its own installs they do not change under it.
"""

from __future__ import annotations

import threading

import numpy as np

from powertrip.rpc.chunkwire import encode_chunks
from powertrip.rpc.tensors import TensorSpec, layout_of


class ModelBroadcast:
    """The current model: its weights, their layout and size, its version, and its chunks
    as every download sends them (`chunkwire`: the data copied once, not once per site)."""

    def __init__(self, lock: threading.Condition, delta_encoding: str = "fp32"):
        self._lock = lock
        self.delta_encoding = delta_encoding
        self.weights: dict[str, np.ndarray] = {}
        self.layout: list[TensorSpec] = []
        self.nbytes = 0
        #: a delta's layout and bytes as sites upload it (encoded as the run says)
        self.delta_layout: list[TensorSpec] = []
        self.delta_nbytes = 0
        self.version = 0
        self._chunks: list[tuple[bytes, int]] = []

    def install(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Install new global weights; they are serialized here, off the lock."""
        chunks = list(encode_chunks(weights))
        with self._lock:
            self.weights = weights
            self.layout = layout_of(weights)
            self.nbytes = sum(s.nbytes for s in self.layout)
            self.delta_layout = layout_of(weights, self.delta_encoding)
            self.delta_nbytes = sum(s.wire_nbytes for s in self.delta_layout)
            self.version = version
            self._chunks = chunks

    def chunks(self, version: int) -> list[tuple[bytes, int]] | None:
        """(serialized TensorChunk, its data bytes) of model `version`; None if not current."""
        with self._lock:
            return self._chunks if version == self.version else None
