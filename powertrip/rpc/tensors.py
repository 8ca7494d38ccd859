"""Tensors on the wire: raw little-endian bytes in <= 1 MiB chunks with dtype, shape,
offset and a checksum. Never pickle; never `repeated float`.

The checksum is CRC-32C (`google-crc32c`, SSE4.2/ARMv8 CRC instructions), several times
faster than zlib.crc32 (figures in docs/benchmarks.md at 291b5ac2), and a model is
checksummed on both ends of every transfer. Where google-crc32c has no compiled
extension (its pure-Python fallback runs at a few MB/s) senders use zlib's CRC32 instead;
receivers check whichever the chunk carries.

`encode_tensors` turns named numpy arrays into TensorChunk messages; `TensorAssembler`
rebuilds them, checking every field against an expected layout so a malformed stream is
rejected with a specific reason before anything is aggregated. A delta may cross encoded
(int8, powertrip/core/deltacodec.py): its chunks then name the encoding and the tensor's
scale, and the assembler decodes it once every byte has passed.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import google_crc32c
import numpy as np
from google.protobuf.message import Message

from powertrip.core import deltacodec
from powertrip.v1 import common_pb2

CHUNK_BYTES = 1 << 20
#: google-crc32c's compiled extension is present: send CRC-32C (else zlib's CRC32)
SEND_CRC32C = google_crc32c.implementation == "c"
ALLOWED_DTYPES = frozenset({"float32", "float64", "float16", "int64", "int32", "uint8", "bool"})


class TensorStreamError(ValueError):
    """A tensor stream does not match what was expected. `reason` is a metric label."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # the decoded tensor's
    shape: tuple[int, ...]
    encoding: str = ""  # a TensorChunk.encoding: "" (raw) or "int8"

    @property
    def nbytes(self) -> int:
        """The decoded tensor's bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    @property
    def wire_nbytes(self) -> int:
        """The bytes its chunks carry: `nbytes` raw, fewer encoded."""
        if not self.encoding:
            return self.nbytes
        return int(np.prod(self.shape, dtype=np.int64)) * deltacodec.ITEM_BYTES[self.encoding]


def layout_of(arrays: Mapping[str, np.ndarray], delta_encoding: str = "fp32") -> list[TensorSpec]:
    """The layout of `arrays` as they cross the wire under `delta_encoding`."""
    chunk_encoding = deltacodec.CHUNK_ENCODING[delta_encoding]
    return [
        TensorSpec(
            k,
            v.dtype.name,
            tuple(int(d) for d in v.shape),
            chunk_encoding if deltacodec.encodes(v) else "",
        )
        for k, v in arrays.items()
    ]


def _little_endian_bytes(array: np.ndarray) -> memoryview:
    arr = np.ascontiguousarray(array)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return memoryview(arr.reshape(-1).view(np.uint8))


def chunk_pieces(
    arrays: Mapping[str, np.ndarray | deltacodec.EncodedTensor],
    chunk_bytes: int = CHUNK_BYTES,
    start: tuple[int, int] = (0, 0),
    delta_encoding: str = "fp32",
) -> Iterator[tuple[common_pb2.TensorChunk, memoryview]]:
    """(chunk without its data, the data as a view of the array) for every chunk in order;
    an empty tensor still yields one chunk. The checksum is set; the data is not copied, so
    each encoder copies it once, where it has to.

    `start` = (tensor index, byte offset in it): begin there, as a resumed upload does
    (`TensorAssembler.position` on the receiving end); earlier bytes are not sent.
    `delta_encoding` other than fp32 encodes each float tensor (deltacodec): offsets then
    count encoded bytes, and a resumed stream re-encodes to the same bytes. A tensor given
    already encoded (a deltacodec.EncodedTensor: the site worker encodes once, to measure
    the error and to send) goes as it is.
    """
    count = len(arrays)
    first, skip = start
    for index, (name, array) in enumerate(arrays.items()):
        if index < first:
            continue
        encoded = (
            array
            if isinstance(array, deltacodec.EncodedTensor)
            else deltacodec.encode(array, delta_encoding)
        )
        raw = _little_endian_bytes(encoded.wire)
        shape = [int(d) for d in encoded.wire.shape]
        # "int32" for a big-endian ">i4" too: its bytes were made little-endian above
        dtype = encoded.dtype
        begin = skip if index == first else 0
        for offset in range(begin, max(len(raw), 1), chunk_bytes):
            data = raw[offset : offset + chunk_bytes]
            chunk = common_pb2.TensorChunk(
                name=name, dtype=dtype, shape=shape, offset=offset,
                tensor_index=index, tensor_count=count,
                encoding=encoded.encoding, scale=encoded.scale,
            )  # fmt: skip
            if SEND_CRC32C:
                chunk.crc32c = crc32c_of(data)
            else:
                chunk.crc32 = zlib.crc32(data)
            yield chunk, data


def crc32c_of(data: bytes | memoryview) -> int:
    """CRC-32C of bytes or a memoryview (google-crc32c takes no memoryview; a numpy view of
    it costs no copy)."""
    if isinstance(data, memoryview):
        data = np.frombuffer(data, dtype=np.uint8)
    return google_crc32c.value(data)


def encode_tensors(
    arrays: Mapping[str, np.ndarray],
    chunk_bytes: int = CHUNK_BYTES,
    into: Callable[[], Message] | None = None,
    start: tuple[int, int] = (0, 0),
    delta_encoding: str = "fp32",
) -> Iterator[Message]:
    """Yield TensorChunk messages for every tensor in order (see `chunk_pieces`).

    With `into` (a message class with a `chunk` field, e.g. UploadDeltaRequest) each chunk is
    written into a new outer message and that is yielded. `powertrip.rpc.chunkwire` writes
    the same messages as bytes with two copies fewer; this is the plain protobuf path.
    """
    for meta, data in chunk_pieces(arrays, chunk_bytes, start, delta_encoding):
        if into is None:
            outer = chunk = meta
        else:
            outer = into()
            chunk = outer.chunk
            chunk.CopyFrom(meta)
        chunk.data = bytes(data)
        yield outer


class TensorAssembler:
    """Rebuild tensors from chunks, validating against `expected` (or accepting any layout).

    Checks, in order: tensor count, index/order, name, dtype, shape, encoding and scale,
    chunk offset contiguity, checksum, overrun, and at `finish()` completeness and finite
    values (of the decoded tensor).
    """

    def __init__(
        self, expected: list[TensorSpec] | None = None, max_total_bytes: int | None = None
    ):
        self.expected = expected
        self.max_total_bytes = max_total_bytes
        self.arrays: dict[str, np.ndarray] = {}
        self._buffers: list[bytearray] = []
        self._specs: list[TensorSpec] = []
        self._filled: list[int] = []
        self._scales: list[float] = []
        self.bytes_received = 0

    def add(self, chunk: common_pb2.TensorChunk) -> None:
        """One chunk: a TensorChunk, or a `chunkwire.ChunkView` (which reads like one) whose
        data is a view of the received message."""
        data = chunk.data  # each read of a protobuf bytes field copies it: read it once
        self.bytes_received += len(data)
        if self.expected is not None and chunk.tensor_count != len(self.expected):
            raise TensorStreamError(
                "tensor_count",
                f"stream declares {chunk.tensor_count} tensors, the model has {len(self.expected)}",
            )
        index = chunk.tensor_index
        if index == len(self._specs):  # a new tensor starts
            self._start_tensor(chunk)
        elif index != len(self._specs) - 1:
            raise TensorStreamError(
                "order",
                f"chunk for tensor {index} arrived while tensor {len(self._specs) - 1} open",
            )
        # after the layout checks, so a wrong dtype or shape is named as such
        if self.max_total_bytes is not None and self.bytes_received > self.max_total_bytes:
            raise TensorStreamError("oversized", f"stream exceeds {self.max_total_bytes} bytes")
        spec = self._specs[index]
        if chunk.name != spec.name or chunk.dtype != spec.dtype or tuple(chunk.shape) != spec.shape:
            raise TensorStreamError("layout", f"chunk of {chunk.name!r} changes name/dtype/shape")
        if chunk.encoding != spec.encoding or chunk.scale != self._scales[index]:
            raise TensorStreamError(
                "encoding", f"chunk of {chunk.name!r} changes its encoding or scale"
            )
        if chunk.offset != self._filled[index]:
            raise TensorStreamError(
                "offset",
                f"{spec.name}: chunk at offset {chunk.offset}, expected {self._filled[index]}",
            )
        end = chunk.offset + len(data)
        if end > spec.wire_nbytes:
            raise TensorStreamError(
                "oversized", f"{spec.name}: data runs past {spec.wire_nbytes} bytes"
            )
        if chunk.HasField("crc32c"):
            if crc32c_of(data) != chunk.crc32c:
                raise TensorStreamError(
                    "checksum", f"{spec.name}: CRC-32C mismatch at offset {chunk.offset}"
                )
        elif zlib.crc32(data) != chunk.crc32:
            raise TensorStreamError(
                "checksum", f"{spec.name}: CRC32 mismatch at offset {chunk.offset}"
            )
        self._buffers[index][chunk.offset : end] = data
        self._filled[index] = end

    @property
    def position(self) -> tuple[int, int]:
        """(tensor index, byte offset) where the next chunk must start: every earlier byte
        arrived and passed its checks. A resumed upload starts here."""
        if not self._specs:
            return (0, 0)
        last = len(self._specs) - 1
        if self._filled[last] < self._specs[last].wire_nbytes:
            return (last, self._filled[last])
        return (last + 1, 0)

    @property
    def bytes_held(self) -> int:
        """Tensor bytes that arrived and passed their checks."""
        return sum(self._filled)

    @property
    def bytes_allocated(self) -> int:
        """Memory taken by the buffers of the tensors started so far."""
        return sum(len(buf) for buf in self._buffers)

    def _start_tensor(self, chunk: common_pb2.TensorChunk) -> None:
        if self._specs and self._filled[-1] != self._specs[-1].wire_nbytes:
            raise TensorStreamError("truncated", f"{self._specs[-1].name} ended early")
        if chunk.dtype not in ALLOWED_DTYPES:
            raise TensorStreamError("dtype", f"{chunk.name}: dtype {chunk.dtype!r} not allowed")
        if any(d < 0 for d in chunk.shape):
            raise TensorStreamError(
                "shape", f"{chunk.name}: negative dimension {list(chunk.shape)}"
            )
        spec = TensorSpec(
            chunk.name, chunk.dtype, tuple(int(d) for d in chunk.shape), chunk.encoding
        )
        self._check_encoding(spec, chunk.scale)
        if self.expected is not None:
            want = self.expected[chunk.tensor_index]
            if spec.name != want.name:
                raise TensorStreamError(
                    "name", f"tensor {chunk.tensor_index} is {spec.name!r}, expected {want.name!r}"
                )
            if spec.dtype != want.dtype:
                raise TensorStreamError(
                    "dtype", f"{spec.name}: dtype {spec.dtype}, expected {want.dtype}"
                )
            if spec.shape != want.shape:
                raise TensorStreamError(
                    "shape", f"{spec.name}: shape {list(spec.shape)}, expected {list(want.shape)}"
                )
            if spec.encoding != want.encoding:
                raise TensorStreamError(
                    "encoding",
                    f"{spec.name}: encoding {spec.encoding or 'raw'!r}, the run's is "
                    f"{want.encoding or 'raw'!r}",
                )
        if self.max_total_bytes is not None and spec.nbytes > self.max_total_bytes:
            raise TensorStreamError("oversized", f"{spec.name}: {spec.nbytes} bytes is too large")
        self._specs.append(spec)
        self._buffers.append(bytearray(spec.wire_nbytes))
        self._filled.append(0)
        self._scales.append(chunk.scale)

    @staticmethod
    def _check_encoding(spec: TensorSpec, scale: float) -> None:
        """An encoding the codec knows, on a float tensor; a scale that is finite and >= 0
        for int8, and none for any other."""
        if spec.encoding and spec.encoding not in deltacodec.ITEM_BYTES:
            raise TensorStreamError("encoding", f"{spec.name}: unknown encoding {spec.encoding!r}")
        if spec.encoding and np.dtype(spec.dtype).kind != "f":
            raise TensorStreamError(
                "encoding", f"{spec.name}: {spec.encoding} encodes floats, not {spec.dtype}"
            )
        if spec.encoding == "int8":
            if not (math.isfinite(scale) and scale >= 0):
                raise TensorStreamError("scale", f"{spec.name}: int8 scale {scale!r}")
        elif scale != 0:
            raise TensorStreamError("scale", f"{spec.name}: a scale without int8 encoding")

    def finish(self, check_finite: bool = True) -> dict[str, np.ndarray]:
        """Return the arrays; raise if anything is missing, short or non-finite."""
        want = len(self.expected) if self.expected is not None else None
        if want is not None and len(self._specs) != want:
            raise TensorStreamError("truncated", f"received {len(self._specs)} of {want} tensors")
        if not self._specs:
            raise TensorStreamError("truncated", "no tensors received")
        out: dict[str, np.ndarray] = {}
        parts = zip(self._specs, self._buffers, self._filled, self._scales, strict=True)
        for spec, buf, filled, scale in parts:
            if filled != spec.wire_nbytes:
                raise TensorStreamError(
                    "truncated", f"{spec.name}: {filled} of {spec.wire_nbytes} bytes"
                )
            wire_dtype = deltacodec.WIRE_DTYPE.get(spec.encoding, spec.dtype)
            array = np.frombuffer(buf, dtype=np.dtype(wire_dtype).newbyteorder("<")).reshape(
                spec.shape
            )
            array = deltacodec.decode(array, spec.dtype, spec.encoding, scale)
            if check_finite and array.dtype.kind == "f" and not np.isfinite(array).all():
                raise TensorStreamError("non_finite", f"{spec.name}: NaN or Inf values")
            out[spec.name] = array
        self.arrays = out
        return out


def decode_tensors(
    chunks: Iterable[common_pb2.TensorChunk], expected: list[TensorSpec] | None = None
) -> dict[str, np.ndarray]:
    assembler = TensorAssembler(expected)
    for chunk in chunks:
        assembler.add(chunk)
    return assembler.finish()
