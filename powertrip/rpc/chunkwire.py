"""TensorChunk messages on the wire without copying their megabyte of data four times.

Protobuf's Python API copies a `bytes` field when it is set, when the message is
serialized, when it is parsed and again each time the field is read: four copies of every
chunk besides gRPC's own, which made the service path half as fast as gRPC alone
(docs/benchmarks.md at 291b5ac2). This module writes and reads the *same* protobuf wire
format with the data copied once on each end:

* sending: protobuf serializes the chunk's small fields; the data field's tag and length and
  the data itself (a view of the tensor) are joined to them in one copy;
* receiving: a scan of the message's top-level fields finds the data field; protobuf parses
  every other field; the data stays a memoryview of the received bytes until the assembler
  copies it into the tensor.

The messages are standard TensorChunk / UploadDeltaRequest encodings (only the field order
differs, which protobuf allows), so a client or server using the generated code talks to
these unchanged. Anything the fast path does not expect (a field repeated, another field in
an UploadDeltaRequest, a wire type it does not read) goes to protobuf's own parser, so the
semantics are always protobuf's and malformed bytes fail as they would there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

import grpc
import numpy as np
from google.protobuf.message import Message

from powertrip.rpc.tensors import CHUNK_BYTES, chunk_pieces
from powertrip.v1 import aggregator_pb2, aggregator_pb2_grpc, common_pb2

#: TensorChunk.data is field 5; UploadDeltaRequest.chunk is field 2; both length-delimited
_DATA_FIELD = 5
_UPLOAD_CHUNK_FIELD = 2
_LEN = 2
#: a TensorChunk written by protobuf has at most 9 top-level fields (`shape` is packed)
_MAX_CHUNK_FIELDS = 16


class _Irregular(Exception):
    """Bytes the fast path leaves to protobuf's parser."""


class _Field(NamedTuple):
    number: int
    wire_type: int
    start: int  # the tag's first byte
    value_start: int  # a LEN field's payload (after its length); else the value's first byte
    end: int


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


_DATA_TAG = _tag(_DATA_FIELD, _LEN)
_UPLOAD_CHUNK_TAG = _tag(_UPLOAD_CHUNK_FIELD, _LEN)


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(pos, min(pos + 10, len(buf))):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise _Irregular


def _fields(buf: memoryview, limit: int) -> list[_Field]:
    """The message's top-level fields in order; _Irregular on anything but well-formed
    varint, 64-bit, length-delimited and 32-bit fields, or on more than `limit` of them (a
    peer's megabyte of one-byte fields costs protobuf's C parser, not a Python loop)."""
    fields, pos = [], 0
    while pos < len(buf):
        if len(fields) == limit:
            raise _Irregular
        key, value_start = _read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, end = _read_varint(buf, value_start)
        elif wire_type == 1:
            end = value_start + 8
        elif wire_type == _LEN:
            length, value_start = _read_varint(buf, value_start)
            end = value_start + length
        elif wire_type == 5:
            end = value_start + 4
        else:  # groups, or garbage
            raise _Irregular
        if number == 0 or end > len(buf):
            raise _Irregular
        fields.append(_Field(number, wire_type, pos, value_start, end))
        pos = end
    return fields


class ChunkView:
    """A received TensorChunk: `meta` holds every field but the data, parsed by protobuf;
    `data` is a memoryview of the received message. Reads like a TensorChunk."""

    __slots__ = ("meta", "data")

    def __init__(self, meta: common_pb2.TensorChunk, data: memoryview):
        self.meta = meta
        self.data = data

    def __getattr__(self, name: str):
        return getattr(self.meta, name)


class UploadChunkView:
    """A received UploadDeltaRequest that carries a chunk; reads like one."""

    __slots__ = ("chunk", "_size")

    def __init__(self, chunk: ChunkView, size: int):
        self.chunk = chunk
        self._size = size

    @staticmethod
    def WhichOneof(_group: str) -> str:  # noqa: N802 - protobuf's name
        return "chunk"

    def ByteSize(self) -> int:  # noqa: N802 - protobuf's name
        return self._size


def _chunk_view(view: memoryview) -> ChunkView:
    fields = _fields(view, _MAX_CHUNK_FIELDS)
    data = [f for f in fields if f.number == _DATA_FIELD]
    if not data:  # proto3 leaves an empty `data` out
        return ChunkView(common_pb2.TensorChunk.FromString(bytes(view)), memoryview(b""))
    if len(data) != 1 or data[0].wire_type != _LEN:
        raise _Irregular
    (field,) = data
    meta = common_pb2.TensorChunk.FromString(bytes(view[: field.start]) + bytes(view[field.end :]))
    return ChunkView(meta, view[field.value_start : field.end])


def parse_chunk(buf: bytes) -> common_pb2.TensorChunk | ChunkView:
    """DownloadModel's response deserializer."""
    try:
        return _chunk_view(memoryview(buf))
    except _Irregular:
        return common_pb2.TensorChunk.FromString(buf)


def parse_upload_request(buf: bytes) -> aggregator_pb2.UploadDeltaRequest | UploadChunkView:
    """UploadDelta's request deserializer: a chunk as a view, anything else (the header)
    parsed by protobuf."""
    view = memoryview(buf)
    try:
        fields = _fields(view, 1)  # at most one: a chunk, alone
        field = fields[0] if fields else None
        if field is not None and field.number == _UPLOAD_CHUNK_FIELD and field.wire_type == _LEN:
            return UploadChunkView(_chunk_view(view[field.value_start : field.end]), len(buf))
    except _Irregular:
        pass
    return aggregator_pb2.UploadDeltaRequest.FromString(buf)


def _chunk_bytes(meta: common_pb2.TensorChunk, data: memoryview, upload: bool) -> bytes:
    inner = (meta.SerializeToString(), _DATA_TAG, _varint(len(data)))
    if not upload:
        return b"".join((*inner, data))
    size = sum(len(p) for p in inner) + len(data)
    return b"".join((_UPLOAD_CHUNK_TAG, _varint(size), *inner, data))


def encode_chunks(
    arrays: Mapping[str, np.ndarray],
    chunk_bytes: int = CHUNK_BYTES,
    start: tuple[int, int] = (0, 0),
    upload: bool = False,
    delta_encoding: str = "fp32",
) -> Iterator[tuple[bytes, int]]:
    """(serialized message, its data bytes) for the same chunks as `tensors.encode_tensors`:
    TensorChunk messages, or UploadDeltaRequest{chunk} ones with `upload`; each tensor's data
    copied once."""
    for meta, data in chunk_pieces(arrays, chunk_bytes, start, delta_encoding):
        yield _chunk_bytes(meta, data, upload), len(data)


def serialize(message: Message | bytes) -> bytes:
    """A serializer for streams that mix messages and bytes already serialized."""
    return message if isinstance(message, bytes) else message.SerializeToString()


#: the aggregator's server-side codecs for `rpc.server.add_servicer`
AGGREGATOR_SERVER_CODECS = {
    "DownloadModel": (aggregator_pb2.DownloadModelRequest.FromString, serialize),
    "UploadDelta": (parse_upload_request, aggregator_pb2.UploadDeltaResponse.SerializeToString),
}


class AggregatorStub(aggregator_pb2_grpc.AggregatorStub):
    """The generated stub with this module's codecs on the two bulk methods: DownloadModel
    yields ChunkViews (or TensorChunks, see `parse_chunk`); UploadDelta takes
    UploadDeltaRequest messages and bytes from `encode_chunks(..., upload=True)`."""

    wire_chunks = True

    def __init__(self, channel: grpc.Channel):
        super().__init__(channel)
        self.DownloadModel = channel.unary_stream(
            "/powertrip.v1.Aggregator/DownloadModel",
            request_serializer=aggregator_pb2.DownloadModelRequest.SerializeToString,
            response_deserializer=parse_chunk,
            _registered_method=True,
        )
        self.UploadDelta = channel.stream_unary(
            "/powertrip.v1.Aggregator/UploadDelta",
            request_serializer=serialize,
            response_deserializer=aggregator_pb2.UploadDeltaResponse.FromString,
            _registered_method=True,
        )
