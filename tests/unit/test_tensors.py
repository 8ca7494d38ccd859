"""Tensors on the wire: round trip, chunking, and every way a stream can be wrong."""

import zlib

import numpy as np
import pytest

from powertrip.rpc.tensors import (
    CHUNK_BYTES,
    TensorAssembler,
    TensorStreamError,
    decode_tensors,
    encode_tensors,
    layout_of,
)
from powertrip.v1 import common_pb2


@pytest.fixture()
def arrays():
    rng = np.random.default_rng(1)
    return {
        "big": rng.normal(size=(700, 1000)).astype(np.float32),  # 2.8 MB -> 3 chunks
        "small": np.arange(5, dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def test_round_trip_is_exact_and_chunks_are_bounded(arrays):
    chunks = list(encode_tensors(arrays))
    assert all(len(c.data) <= CHUNK_BYTES for c in chunks)
    assert [c.tensor_index for c in chunks] == [0, 0, 0, 1, 2]
    out = decode_tensors(chunks, layout_of(arrays))
    for key, value in arrays.items():
        assert out[key].dtype == value.dtype and out[key].shape == value.shape
        np.testing.assert_array_equal(out[key], value)


def _expect(reason, chunks, expected):
    assembler = TensorAssembler(expected)
    with pytest.raises(TensorStreamError) as info:
        for chunk in chunks:
            assembler.add(chunk)
        assembler.finish()
    assert info.value.reason == reason, str(info.value)


def test_checksum_mismatch(arrays):
    chunks = list(encode_tensors(arrays))
    bad = common_pb2.TensorChunk()
    bad.CopyFrom(chunks[1])
    bad.data = bytes([bad.data[0] ^ 1]) + bad.data[1:]
    _expect("checksum", [chunks[0], bad, *chunks[2:]], layout_of(arrays))


def test_chunks_carry_crc32c_and_a_chunk_with_only_crc32_is_still_checked(arrays, monkeypatch):
    """Senders set CRC-32C; chunks from a sender without it (zlib CRC32 only) still decode,
    and a flipped bit is caught under either checksum."""
    import google_crc32c

    from powertrip.rpc import tensors

    chunks = list(encode_tensors(arrays))
    assert all(c.HasField("crc32c") and c.crc32c == google_crc32c.value(c.data) for c in chunks)
    assert all(c.crc32 == 0 for c in chunks)  # one checksum per chunk, not two

    monkeypatch.setattr(tensors, "SEND_CRC32C", False)  # google-crc32c without its extension
    legacy = list(encode_tensors(arrays))
    assert not any(c.HasField("crc32c") for c in legacy)
    assert all(c.crc32 == zlib.crc32(c.data) for c in legacy)
    out = decode_tensors(legacy, layout_of(arrays))
    np.testing.assert_array_equal(out["big"], arrays["big"])
    bad = common_pb2.TensorChunk()
    bad.CopyFrom(legacy[1])
    bad.data = bytes([bad.data[0] ^ 1]) + bad.data[1:]
    _expect("checksum", [legacy[0], bad, *legacy[2:]], layout_of(arrays))


def test_a_crc32c_of_zero_is_still_checked(arrays):
    """crc32c has explicit presence: a chunk that says its CRC-32C is 0 is checked against
    0, not treated as a chunk without one."""
    chunk = next(encode_tensors({"small": arrays["small"]}))
    chunk.crc32c = 0
    chunk.crc32 = zlib.crc32(chunk.data)  # a valid CRC32 must not rescue it
    _expect("checksum", [chunk], None)


def test_truncated_stream(arrays):
    chunks = list(encode_tensors(arrays))
    _expect("truncated", chunks[:2], layout_of(arrays))
    _expect("truncated", chunks[:3], layout_of(arrays))


def test_wrong_shape_dtype_and_count(arrays):
    layout = layout_of(arrays)
    wrong_shape = dict(arrays, small=np.arange(6, dtype=np.int64))
    _expect("shape", encode_tensors(wrong_shape), layout)
    wrong_dtype = dict(arrays, small=np.arange(5, dtype=np.int32))
    _expect("dtype", encode_tensors(wrong_dtype), layout)
    fewer = {"big": arrays["big"], "small": arrays["small"]}
    _expect("tensor_count", encode_tensors(fewer), layout)


def test_non_finite_values_are_rejected(arrays):
    poisoned = dict(arrays)
    poisoned["big"] = arrays["big"].copy()
    poisoned["big"][3, 3] = np.nan
    _expect("non_finite", encode_tensors(poisoned), layout_of(arrays))
    poisoned["big"][3, 3] = np.inf
    _expect("non_finite", encode_tensors(poisoned), layout_of(arrays))


def test_gaps_and_oversize(arrays):
    chunks = list(encode_tensors(arrays))
    _expect("offset", [chunks[0], chunks[2]], layout_of(arrays))
    limited = TensorAssembler(layout_of(arrays), max_total_bytes=1000)
    with pytest.raises(TensorStreamError) as info:
        limited.add(chunks[0])
    assert info.value.reason == "oversized"


def test_unknown_dtype_is_refused():
    chunk = common_pb2.TensorChunk(
        name="x",
        dtype="object",
        shape=[1],
        offset=0,
        data=b"\0" * 8,
        crc32=zlib.crc32(b"\0" * 8),
        tensor_index=0,
        tensor_count=1,
    )
    _expect("dtype", [chunk], None)


def test_chunks_written_into_an_outer_message_round_trip():
    """`into` builds UploadDeltaRequests directly (no re-wrapping copy); same chunks."""
    from powertrip.v1 import aggregator_pb2

    rng = np.random.default_rng(5)
    arrays = {"w": rng.normal(size=(700, 900)).astype(np.float32), "b": np.arange(3.0)}
    plain = list(encode_tensors(arrays, chunk_bytes=1 << 18))
    wrapped = list(
        encode_tensors(arrays, chunk_bytes=1 << 18, into=aggregator_pb2.UploadDeltaRequest)
    )
    assert len(plain) == len(wrapped) > 2
    assert all(
        w.WhichOneof("part") == "chunk" and w.chunk == p
        for w, p in zip(wrapped, plain, strict=True)
    )
    out = decode_tensors((w.chunk for w in wrapped), layout_of(arrays))
    for key, value in arrays.items():
        assert np.array_equal(out[key], value)
