"""chunkwire: the same protobuf wire format as the generated code, with the data copied once.

Each direction is checked against protobuf itself: what chunkwire writes parses with the
generated classes to the same messages `encode_tensors` builds, and what the generated
classes write reads through chunkwire to the same fields; irregular bytes get protobuf's
own answer."""

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from powertrip.rpc.chunkwire import (
    ChunkView,
    UploadChunkView,
    encode_chunks,
    parse_chunk,
    parse_upload_request,
)
from powertrip.rpc.tensors import (
    TensorAssembler,
    TensorStreamError,
    decode_tensors,
    encode_tensors,
    layout_of,
)
from powertrip.v1 import aggregator_pb2, common_pb2

FIELDS = ("name", "dtype", "shape", "offset", "crc32", "tensor_index", "tensor_count")


@pytest.fixture()
def arrays():
    rng = np.random.default_rng(3)
    return {
        "w": rng.normal(size=(700, 900)).astype(np.float32),  # 2.5 MB: 10 chunks of 256 KiB
        "b": np.arange(3.0),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
    }


def _same(view, message: common_pb2.TensorChunk) -> bool:
    return (
        all(getattr(view, f) == getattr(message, f) for f in FIELDS)
        and view.HasField("crc32c") == message.HasField("crc32c")
        and view.crc32c == message.crc32c
        and bytes(view.data) == message.data
    )


@pytest.mark.parametrize("start", [(0, 0), (0, 300_000), (1, 0)])
def test_what_chunkwire_writes_protobuf_parses_to_encode_tensors_messages(arrays, start):
    plain = list(encode_tensors(arrays, chunk_bytes=1 << 18, start=start))
    wire = list(encode_chunks(arrays, chunk_bytes=1 << 18, start=start))
    assert [common_pb2.TensorChunk.FromString(w) for w, _ in wire] == plain
    assert [n for _, n in wire] == [len(p.data) for p in plain]
    uploads = [w for w, _ in encode_chunks(arrays, chunk_bytes=1 << 18, start=start, upload=True)]
    parsed = [aggregator_pb2.UploadDeltaRequest.FromString(u) for u in uploads]
    assert [p.chunk for p in parsed] == plain
    assert all(p.WhichOneof("part") == "chunk" for p in parsed)


def test_what_protobuf_writes_chunkwire_reads_as_views(arrays):
    plain = list(encode_tensors(arrays, chunk_bytes=1 << 18))
    views = [parse_chunk(c.SerializeToString()) for c in plain]
    assert all(isinstance(v, ChunkView) and isinstance(v.data, memoryview) for v in views)
    assert all(_same(v, p) for v, p in zip(views, plain, strict=True))
    out = decode_tensors(views, layout_of(arrays))
    for key, value in arrays.items():
        np.testing.assert_array_equal(out[key], value)

    requests = list(encode_tensors(arrays, into=aggregator_pb2.UploadDeltaRequest))
    read = [parse_upload_request(r.SerializeToString()) for r in requests]
    assert all(isinstance(r, UploadChunkView) and r.WhichOneof("part") == "chunk" for r in read)
    assert [r.ByteSize() for r in read] == [r.ByteSize() for r in requests]
    assert all(_same(r.chunk, q.chunk) for r, q in zip(read, requests, strict=True))


def test_a_header_and_irregular_messages_get_protobufs_own_parse(arrays):
    header = aggregator_pb2.UploadDeltaRequest(
        header=aggregator_pb2.DeltaHeader(task_id="t1", site_id="site-000")
    )
    parsed = parse_upload_request(header.SerializeToString())
    assert isinstance(parsed, aggregator_pb2.UploadDeltaRequest) and parsed == header

    chunk = next(encode_tensors(arrays))
    # a oneof written twice: protobuf keeps the last, here the header
    both = chunk_request(chunk) + header.SerializeToString()
    assert parse_upload_request(both) == aggregator_pb2.UploadDeltaRequest.FromString(both)
    assert parse_upload_request(both).WhichOneof("part") == "header"
    # the data field twice: protobuf keeps the last value
    twice = chunk.SerializeToString() + common_pb2.TensorChunk(data=b"xyz").SerializeToString()
    assert parse_chunk(twice) == common_pb2.TensorChunk.FromString(twice)
    assert parse_chunk(twice).data == b"xyz"
    # an unknown field beside the chunk is kept, as protobuf keeps it
    unknown = chunk_request(chunk) + b"\x98\x06\x01"  # field 99, varint 1
    assert parse_upload_request(unknown) == aggregator_pb2.UploadDeltaRequest.FromString(unknown)


def test_a_message_of_many_tiny_fields_goes_to_protobuf_not_a_python_loop(arrays):
    """A peer's megabyte of one-byte unknown fields: protobuf's C parser reads it."""
    chunk = next(encode_tensors(arrays)).SerializeToString()
    flood = chunk + b"\x98\x06\x01" * 100_000  # field 99 (unknown), 100,000 times
    parsed = parse_chunk(flood)
    assert not isinstance(parsed, ChunkView)
    assert parsed == common_pb2.TensorChunk.FromString(flood)
    request = aggregator_pb2.UploadDeltaRequest.FromString(chunk_request(parsed))
    assert parse_upload_request(request.SerializeToString() + b"\x98\x06\x01" * 10) == (
        aggregator_pb2.UploadDeltaRequest.FromString(
            request.SerializeToString() + b"\x98\x06\x01" * 10
        )
    )


def chunk_request(chunk: common_pb2.TensorChunk) -> bytes:
    return aggregator_pb2.UploadDeltaRequest(chunk=chunk).SerializeToString()


@pytest.mark.parametrize(
    "garbage",
    [b"\xff" * 12, b"\x12\x80\x80\x80\x80\x08", b"\x2a\x05abc", b"\x0b\x00", b"\x12\x03\x2a\x09a"],
)
def test_malformed_bytes_fail_as_protobuf_fails(garbage):
    """Truncated lengths, over-long varints, groups: DecodeError, like FromString."""
    with pytest.raises(DecodeError):
        aggregator_pb2.UploadDeltaRequest.FromString(garbage)
    with pytest.raises(DecodeError):
        parse_upload_request(garbage)


def test_a_flipped_bit_in_a_view_is_caught_by_the_assembler(arrays):
    wire = [w for w, _ in encode_chunks(arrays, chunk_bytes=1 << 18)]
    bad = bytearray(wire[1])
    bad[-5] ^= 1  # inside the data (the data field is written last)
    chunks = [parse_chunk(w) for w in (wire[0], bytes(bad), *wire[2:])]
    assembler = TensorAssembler(layout_of(arrays))
    with pytest.raises(TensorStreamError) as info:
        for chunk in chunks:
            assembler.add(chunk)
    assert info.value.reason == "checksum"


def test_a_received_chunks_data_is_a_view_of_the_message_not_a_copy(arrays):
    wire, _ = next(encode_chunks(arrays))
    view = parse_chunk(wire)
    received = np.frombuffer(wire, dtype=np.uint8)
    assert np.shares_memory(np.frombuffer(view.data, dtype=np.uint8), received)
    request = parse_upload_request(next(encode_chunks(arrays, upload=True))[0])
    assert len(request.chunk.data) == 1 << 20


def test_the_aggregator_served_with_chunkwire_codecs_talks_to_both_stubs(arrays):
    """A server registered by `add_servicer` with the bulk codecs answers the generated stub
    (protobuf on both ends) and chunkwire's stub alike, in-process over loopback."""
    from concurrent import futures

    import grpc

    from powertrip.rpc.chunkwire import AGGREGATOR_SERVER_CODECS, AggregatorStub
    from powertrip.rpc.server import add_servicer
    from powertrip.v1 import aggregator_pb2_grpc

    wire = list(encode_chunks(arrays, chunk_bytes=1 << 18))
    received = []

    class Servicer(aggregator_pb2_grpc.AggregatorServicer):
        def DownloadModel(self, request, context):  # noqa: N802
            yield from (w for w, _ in wire)

        def UploadDelta(self, request_iterator, context):  # noqa: N802
            parts = list(request_iterator)
            received.append(parts)
            return aggregator_pb2.UploadDeltaResponse(accepted=True, bytes_received=len(parts))

    server = grpc.server(futures.ThreadPoolExecutor(2))
    add_servicer(
        server,
        aggregator_pb2.DESCRIPTOR.services_by_name["Aggregator"],
        Servicer(),
        AGGREGATOR_SERVER_CODECS,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            header = aggregator_pb2.UploadDeltaRequest(
                header=aggregator_pb2.DeltaHeader(task_id="t")
            )
            for stub in (aggregator_pb2_grpc.AggregatorStub(channel), AggregatorStub(channel)):
                chunks = list(stub.DownloadModel(aggregator_pb2.DownloadModelRequest()))
                out = decode_tensors(chunks, layout_of(arrays))
                assert all(np.array_equal(out[k], v) for k, v in arrays.items())
                if isinstance(stub, AggregatorStub):
                    body = [w for w, _ in encode_chunks(arrays, upload=True)]
                else:
                    body = list(encode_tensors(arrays, into=aggregator_pb2.UploadDeltaRequest))
                reply = stub.UploadDelta(iter([header, *body]))
                assert reply.accepted and reply.bytes_received == 1 + len(body)
        for parts in received:
            assert parts[0] == header
            uploaded = decode_tensors((p.chunk for p in parts[1:]), layout_of(arrays))
            assert all(np.array_equal(uploaded[k], v) for k, v in arrays.items())
    finally:
        server.stop(0)


def test_add_servicer_names_a_codec_for_a_method_the_service_lacks():
    import grpc

    from powertrip.rpc.server import add_servicer

    with pytest.raises(ValueError, match="UploadDeltas"):
        add_servicer(
            grpc.server(None),
            aggregator_pb2.DESCRIPTOR.services_by_name["Aggregator"],
            object(),
            {"UploadDeltas": (bytes, bytes)},
        )
