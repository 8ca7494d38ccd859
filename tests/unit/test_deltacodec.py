"""Delta encodings (powertrip/core/deltacodec.py) and their wire checks
(powertrip/rpc/tensors.py): int8 is off by at most half a scale per element, int8
streams decode to what the codec says, resumes re-encode to the same bytes, and every bad
scale, encoding or length is refused with its reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from powertrip.core import deltacodec
from powertrip.core.config import RunConfig
from powertrip.rpc.chunkwire import encode_chunks, parse_upload_request
from powertrip.rpc.tensors import TensorAssembler, TensorStreamError, encode_tensors, layout_of


def _delta(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv.weight": rng.normal(0, 0.02, (8, 3, 3, 3)).astype(np.float32),
        "fc.bias": rng.normal(0, 0.5, 10).astype(np.float32),
        "zeros": np.zeros(5, np.float32),
        "bn.num_batches_tracked": np.array(7, dtype=np.int64),
    }


def _assemble(chunks, expected):
    assembler = TensorAssembler(expected=expected)
    for chunk in chunks:
        assembler.add(chunk)
    return assembler.finish()


def test_int8_is_off_by_at_most_half_a_scale_and_counters_travel_raw():
    delta = _delta()
    encoded = deltacodec.encode_all(delta, "int8")
    for name, array in delta.items():
        e = encoded[name]
        back = deltacodec.decode(e.wire, e.dtype, e.encoding, e.scale)
        assert back.dtype == array.dtype and back.shape == array.shape
        if array.dtype.kind != "f":
            assert e.encoding == "" and np.array_equal(back, array)
            continue
        assert e.wire.dtype == np.int8 and e.encoding == "int8"
        assert np.max(np.abs(back - array)) <= e.scale / 2 * (1 + 1e-6)
    assert encoded["zeros"].scale == 0.0
    error = deltacodec.relative_error(delta, encoded)
    assert 0 < error < 0.02  # about 1 % for Gaussian tensors
    assert deltacodec.relative_error(delta, deltacodec.encode_all(delta, "fp32")) == 0.0


def test_an_encoded_stream_decodes_to_the_codecs_values_on_both_wire_paths():
    delta, encoding = _delta(), "int8"
    expected = layout_of(delta, encoding)
    want = {
        k: deltacodec.decode(e.wire, e.dtype, e.encoding, e.scale)
        for k, e in deltacodec.encode_all(delta, encoding).items()
    }
    plain = _assemble(encode_tensors(delta, chunk_bytes=64, delta_encoding=encoding), expected)
    wire = [
        parse_upload_request(m).chunk
        for m, _ in encode_chunks(delta, chunk_bytes=64, upload=True, delta_encoding=encoding)
    ]
    fast = _assemble(wire, expected)
    for key in delta:
        assert np.array_equal(plain[key], want[key]) and np.array_equal(fast[key], want[key])
    wire_bytes = sum(s.wire_nbytes for s in expected)
    assert wire_bytes < sum(s.nbytes for s in expected)


def test_a_resumed_int8_stream_re_encodes_to_the_same_bytes():
    delta = _delta()
    expected = layout_of(delta, "int8")
    whole = list(encode_tensors(delta, chunk_bytes=32, delta_encoding="int8"))
    assembler = TensorAssembler(expected=expected)
    for chunk in whole[:5]:
        assembler.add(chunk)
    for chunk in encode_tensors(
        delta, chunk_bytes=32, start=assembler.position, delta_encoding="int8"
    ):
        assembler.add(chunk)
    again = _assemble(whole, expected)
    for key, value in assembler.finish().items():
        assert np.array_equal(value, again[key])


def _bad(mutate, encoding="int8", expected_encoding="int8"):
    chunks = list(encode_tensors(_delta(), chunk_bytes=64, delta_encoding=encoding))
    mutate(chunks)
    with pytest.raises(TensorStreamError) as info:
        _assemble(chunks, layout_of(_delta(), expected_encoding))
    return info.value.reason


def _set(index: int, **fields):
    def mutate(chunks):
        for name, value in fields.items():
            setattr(chunks[index], name, value)

    return mutate


@pytest.mark.parametrize("scale", [math.nan, math.inf, -0.5])
def test_a_bad_int8_scale_is_refused(scale):
    assert _bad(_set(0, scale=scale)) == "scale"


def test_a_scale_that_changes_inside_a_tensor_is_refused():
    assert _bad(_set(1, scale=1.0)) == "encoding"  # chunk 1 is still conv.weight's


def test_encodings_that_do_not_fit_are_refused():
    assert _bad(lambda c: None, encoding="fp32") == "encoding"  # raw where int8 is expected
    assert _bad(lambda c: None, encoding="int8", expected_encoding="fp32") == "encoding"
    assert _bad(_set(0, encoding="int4")) == "encoding"

    def int8_counter(chunks):
        last = chunks[-1]  # bn.num_batches_tracked, an int64
        last.encoding, last.scale = "int8", 1.0

    assert _bad(int8_counter) == "encoding"

    def scale_on_raw(chunks):
        chunks[-1].scale = 2.0

    assert _bad(scale_on_raw) == "scale"


def test_a_wrong_length_is_refused():
    def longer(chunks):
        chunks[0].data = chunks[0].data + b"\0" * (len(chunks[0].data) + 300)

    def shorter(chunks):
        conv = [c for c in chunks if c.tensor_index == 0]
        del chunks[len(conv) - 1]  # conv.weight's last chunk never arrives

    # the checksum no longer matches the longer data either; the length is checked first
    assert _bad(longer) == "oversized"
    assert _bad(shorter) == "truncated"


def test_m_is_charged_at_the_encodings_share_and_the_setting_is_checked():
    assert RunConfig(update_size_gb=2.0, delta_encoding="fp32").update_size_bytes == 2e9
    assert RunConfig(update_size_gb=2.0, delta_encoding="int8").update_size_bytes == 5e8
    for gone in ("int4", "fp16"):  # fp16 was never shown to help (issue #62): deleted
        with pytest.raises(ValueError, match="delta_encoding must be one of fp32, int8"):
            RunConfig().with_values({"delta_encoding": gone}, "--set")
    with pytest.raises(ValueError, match="delta_encoding must be one of fp32, int8"):
        RunConfig().with_values({"delta_encoding": "int4"}, "--set")
    with pytest.raises(ValueError, match="delta_encoding: int8 encodes the upload only"):
        RunConfig(delta_encoding="int8", comm_directions=2).validate()


def test_a_delta_encoded_once_streams_the_bytes_the_stream_would_encode():
    """The site worker encodes once (for the error it reports and for the upload); the
    chunks must be those the stream makes from the fp32 delta itself."""
    from powertrip.rpc.tensors import chunk_pieces

    rng = np.random.default_rng(3)
    delta = {
        "a": rng.normal(0, 1e-3, (300, 70)).astype(np.float32),
        "steps": np.array([7], dtype=np.int64),
        "b": rng.normal(0, 1e-2, (11,)).astype(np.float32),
    }
    encoded = deltacodec.encode_all(delta, "int8")
    direct = list(chunk_pieces(delta, chunk_bytes=4096, delta_encoding="int8"))
    once = list(chunk_pieces(encoded, chunk_bytes=4096, delta_encoding="int8"))
    assert [m for m, _ in once] == [m for m, _ in direct]
    assert [bytes(d) for _, d in once] == [bytes(d) for _, d in direct]
    resumed = list(chunk_pieces(encoded, chunk_bytes=4096, start=(0, 8192), delta_encoding="int8"))
    assert [bytes(d) for _, d in resumed] == [bytes(d) for _, d in direct[2:]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_blockwise_quantization_is_the_whole_array_expression(dtype):
    rng = np.random.default_rng(5)
    shape = (deltacodec.QUANTIZE_BLOCK + 1000, 3)  # several blocks and a short last one
    array = (rng.normal(0, 1e-3, shape) * rng.choice([1, 100], shape)).astype(dtype)
    array[0, 0] = 1e-3 * 127 / 2 * 1.0  # a value at a rounding midpoint's neighbourhood
    scale = np.float32(float(np.max(np.abs(array))) / deltacodec.INT8_MAX)
    expected = np.clip(np.rint(array / scale), -127, 127).astype(np.int8)
    encoded = deltacodec.encode(array, "int8")
    assert encoded.wire.dtype == np.int8 and encoded.wire.shape == array.shape
    assert np.array_equal(encoded.wire, expected)
    strided = deltacodec.encode(array[:, ::2], "int8").wire  # not contiguous
    assert np.array_equal(
        strided, deltacodec.encode(np.ascontiguousarray(array[:, ::2]), "int8").wire
    )


def test_a_non_finite_delta_still_encodes_to_zeros():
    for bad in (np.nan, np.inf, -np.inf):
        array = np.array([1.0, bad, -2.0], dtype=np.float32)
        encoded = deltacodec.encode(array, "int8")
        assert encoded.scale == 0.0 and not encoded.wire.any()
