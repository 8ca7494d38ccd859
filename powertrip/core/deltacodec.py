"""How a site's delta is encoded for upload, as pure functions.

A delta crosses the wire as 4-byte floats ("fp32", the paper's method) or as signed bytes
("int8": a quarter of the bytes; the product's default, chosen against fp32 on seeds 10-14
of figure `outer`, which the other studies hold out): per-tensor symmetric quantization, as
INTELLECT-1 all-reduces its pseudo-gradients (arXiv:2412.01152),

    scale = max |x| / 127,   q = round(x / scale) clipped to [-127, 127],   x' = q * scale,

so every element is off by at most scale / 2. The site quantizes, the aggregator
dequantizes before the average. Only floating-point tensors are encoded; counters travel
raw. The emulated update size M shrinks by the same share (`WIRE_SHARE`): Eq. 3's transfer
time, the policies' M and the egress accounting all charge what crosses the wire.

Nothing carries the rounding error to the next round (no error feedback); the site
measures it (`relative_error`) and the run's summary reports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

DELTA_ENCODINGS = ("fp32", "int8")
#: the wire's TensorChunk.encoding of each (fp32: the raw dtype, no encoding)
CHUNK_ENCODING = {"fp32": "", "int8": "int8"}
#: bytes on the wire per byte of a float32 delta
WIRE_SHARE = {"fp32": 1.0, "int8": 0.25}
#: the dtype each chunk encoding puts on the wire, and so its bytes per element
WIRE_DTYPE = {"int8": np.dtype(np.int8)}
ITEM_BYTES = {encoding: dtype.itemsize for encoding, dtype in WIRE_DTYPE.items()}
INT8_MAX = 127
#: elements quantized per block (256 kB of float32: the division, rounding and clip of a
#: block stay in cache)
QUANTIZE_BLOCK = 1 << 16


class EncodedTensor(NamedTuple):
    """A tensor as it crosses the wire: `wire` holds its bytes, `dtype` the decoded dtype."""

    wire: np.ndarray
    dtype: str
    encoding: str  # a TensorChunk.encoding: "" or "int8"
    scale: float


def encodes(array: np.ndarray) -> bool:
    """Whether an encoding applies to this tensor (floating point); counters travel raw."""
    return array.dtype.kind == "f"


def encode(array: np.ndarray, delta_encoding: str) -> EncodedTensor:
    """One tensor as `delta_encoding` sends it."""
    if delta_encoding not in DELTA_ENCODINGS:
        raise ValueError(
            f"delta_encoding must be one of {', '.join(DELTA_ENCODINGS)}, got {delta_encoding!r}"
        )
    chunk_encoding = CHUNK_ENCODING[delta_encoding]
    if not chunk_encoding or not encodes(array):
        return EncodedTensor(array, array.dtype.name, "", 0.0)
    # max |x| without |x|'s temporary; a NaN anywhere makes both NaN, as it made np.abs's
    peak = float(max(array.max(), -array.min())) if array.size else 0.0
    scale = peak / INT8_MAX
    if scale == 0.0 or not math.isfinite(scale):
        return EncodedTensor(np.zeros(array.shape, np.int8), array.dtype.name, "int8", 0.0)
    return EncodedTensor(_quantized(array, np.float32(scale)), array.dtype.name, "int8", scale)


def _quantized(array: np.ndarray, scale: np.float32) -> np.ndarray:
    """clip(rint(array / scale), -127, 127) as int8, a cache-sized block at a time in one
    buffer of the division's own dtype: the same numbers as the whole-array expression,
    without its four array-sized temporaries (twice as fast on a 26 MB delta)."""
    flat = array.reshape(-1)
    out = np.empty(flat.shape, np.int8)
    buffer = np.empty(min(flat.size, QUANTIZE_BLOCK), np.result_type(array.dtype, scale))
    for begin in range(0, flat.size, QUANTIZE_BLOCK):
        block = buffer[: min(QUANTIZE_BLOCK, flat.size - begin)]
        np.divide(flat[begin : begin + QUANTIZE_BLOCK], scale, out=block)
        np.rint(block, out=block)
        np.clip(block, -INT8_MAX, INT8_MAX, out=block)
        out[begin : begin + QUANTIZE_BLOCK] = block
    return out.reshape(array.shape)


def decode(wire: np.ndarray, dtype: str, encoding: str, scale: float) -> np.ndarray:
    """The tensor an encoded one stands for, in its own dtype."""
    if encoding == "":
        return wire
    return (wire.astype(np.float32) * np.float32(scale)).astype(dtype, copy=False)


def encode_all(arrays: Mapping[str, np.ndarray], delta_encoding: str) -> dict[str, EncodedTensor]:
    return {name: encode(array, delta_encoding) for name, array in arrays.items()}


def relative_error(arrays: Mapping[str, np.ndarray], encoded: Mapping[str, EncodedTensor]) -> float:
    """||decode(encode(delta)) - delta|| / ||delta|| over the whole delta (0 for a zero one)."""
    diff = total = 0.0
    for name, array in arrays.items():
        e = encoded[name]
        x = array.astype(np.float64)
        back = decode(e.wire, e.dtype, e.encoding, e.scale).astype(np.float64)
        diff += float(np.sum((back - x) ** 2))
        total += float(np.sum(x**2))
    return math.sqrt(diff / total) if total > 0 else 0.0
