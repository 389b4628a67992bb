"""Protobuf's wire format by hand, for the two places tfdist meets Hadoop's protobufs.

Standard library only, and shipped with the agent (:mod:`tfdist.node.yarn_container` reads a
container's credentials file with it), so it must import nothing of tfdist. The Hadoop RPC
client (:mod:`tfdist.backends.yarn.hrpc`) encodes its requests and decodes the answers with
it. Messages are read into ``{field number: [values]}`` (a repeated field keeps every value,
in order); no schema is needed, the callers know their field numbers.
"""

from __future__ import annotations

Fields = dict[int, list[int | bytes]]


def varint(n: int) -> bytes:
    """An unsigned varint; a negative int32/int64 travels as ten bytes of two's complement."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def zigzag(n: int) -> int:
    """sint32/sint64's encoding of a signed number."""
    return (n << 1) ^ (n >> 63)


def field(number: int, value: int | bytes | str) -> bytes:
    """One field: an int as a varint (wire type 0), bytes or a string length-delimited (2)."""
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def delimited(message: bytes) -> bytes:
    """A message preceded by its length (``writeDelimitedTo``)."""
    return varint(len(message)) + message


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; ValueError when it is cut short."""
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a truncated or overlong protobuf varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def parse(data: bytes) -> Fields:
    """A message's top-level fields by number: varints and fixed32/64 as ints,
    length-delimited ones as bytes. ValueError on anything malformed."""
    out: Fields = {}
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        kind = key & 7
        value: int | bytes
        if kind == 0:
            value, pos = read_varint(data, pos)
        elif kind == 2:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError("a protobuf field longer than its message")
            value, pos = data[pos:pos + size], pos + size
        elif kind in (1, 5):
            width = 8 if kind == 1 else 4
            if pos + width > len(data):
                raise ValueError("a truncated protobuf fixed-width field")
            value, pos = int.from_bytes(data[pos:pos + width], "little"), pos + width
        else:
            raise ValueError(f"an unsupported protobuf wire type {kind}")
        out.setdefault(key >> 3, []).append(value)
    return out


def number(fields: Fields, num: int) -> int:
    """A varint field's value (0, protobuf's default, when absent)."""
    values = fields.get(num)
    return values[-1] if values and isinstance(values[-1], int) else 0


def blob(fields: Fields, num: int) -> bytes:
    """A length-delimited field's bytes (b"" when absent)."""
    values = fields.get(num)
    return values[-1] if values and isinstance(values[-1], bytes) else b""


def text(fields: Fields, num: int) -> str:
    return blob(fields, num).decode("utf-8", "replace")


def blobs(fields: Fields, num: int) -> list[bytes]:
    """Every value of a repeated length-delimited field, in order."""
    return [v for v in fields.get(num, []) if isinstance(v, bytes)]
