"""The profile table as bytes: reading a field out of a serialized message and putting one
into another, without parsing the rest.

At 100,000 sites the table is 4.5 MB: parsing it, copying it into the SelectSites request
and serialising that again cost tens of milliseconds a round, although the profiler's bytes
are what the policy gets. So the aggregator keeps the reply's bytes: a reply equal to the
last is not parsed again, and the table's bytes go into the request as they came.
"""

from __future__ import annotations


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def embedded_field(data: bytes, number: int, give_up_on: int) -> memoryview | None:
    """The bytes of the one length-delimited field `number` at the top level of the
    serialized message `data`; None when it is absent, occurs twice (a parser would merge
    the two) or field `give_up_on` occurs (a repeated field whose walk would cost a step per
    element: the caller takes the parsed route instead). Raises ValueError if malformed."""
    view = memoryview(data)
    pos, found = 0, None
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == give_up_on:
            return None
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(data, pos)
            if field == number:
                if found is not None:
                    return None
                found = (pos, pos + length)
            pos += length
        else:
            raise ValueError(f"wire type {wire} at the top level")
    if pos != len(data):
        raise ValueError("truncated message")
    return None if found is None else view[found[0] : found[1]]


def with_embedded(message_bytes: bytes, number: int, field_bytes: bytes | memoryview) -> bytes:
    """`message_bytes` with field `number` set to the message serialized as `field_bytes`
    (appending a field is how the wire format sets it: a parser reads the concatenation)."""
    return b"".join(
        [
            message_bytes,
            encode_varint(number << 3 | 2),
            encode_varint(len(field_bytes)),
            field_bytes,
        ]
    )
