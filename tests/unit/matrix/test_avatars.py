"""The generated avatars (docs/using.md "The first minutes"): a real PNG, the same for the same
user, different for others."""

from __future__ import annotations

import struct
import zlib

from bridge.matrix.avatars import SIZE, identicon, pattern


def decode(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, the raw rows) of an RGB PNG with one IDAT, its CRCs checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, {}
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks[kind] = body
        at += 12 + length
    width, height, depth, colour, *_ = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour) == (8, 2) and b"IEND" in chunks
    return width, height, zlib.decompress(chunks[b"IDAT"])


def test_an_avatar_is_a_square_rgb_png():
    width, height, rows = decode(identicon("@sk_local:localhost"))
    assert width == height == SIZE
    assert len(rows) == height * (1 + 3 * width)


def test_the_same_user_gets_the_same_avatar_and_others_another():
    assert identicon("@sk_local:localhost") == identicon("@sk_local:localhost")
    assert identicon("@sk_local:localhost") != identicon("@sidekicks:localhost")
    colour, cells = pattern("@sk_alice:localhost")
    assert all(row == row[::-1] for row in cells)  # mirrored
    assert pattern("@sk_bob:localhost")[0] != colour
