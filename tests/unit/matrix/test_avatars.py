"""The generated avatars (docs/using.md "The first minutes"): a real PNG, the same for the same
user, different for others."""

from __future__ import annotations

import struct
import zlib

from bridge.matrix.avatars import SIZE, identicon, pattern, picture_type, step


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


def test_picture_types_by_their_first_bytes():
    assert picture_type(identicon("@x:y")) == "image/png"
    assert picture_type(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert picture_type(b"GIF89a...") == "image/gif"
    assert picture_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert picture_type(b'<svg xmlns="http://www.w3.org/2000/svg"/>') is None
    assert picture_type(b"") is None


def test_what_is_done_for_each_identity():
    """Uploaded once per source; a profile avatar the bridge did not set is kept."""
    assert step(None, None, None, "") == "upload"  # the first start
    assert step("mxc://a", "mxc://a", "", "") == "keep"  # a restart
    assert step("mxc://a", "mxc://a", None, "") == "keep"  # a store from before sources were kept
    assert step(None, "mxc://a", "", "") == "set"  # the profile lost it
    assert step("mxc://mine", "mxc://a", "", "") == "keep"  # someone chose another
    assert step("mxc://mine", None, None, "https://x/a.png") == "keep"
    assert step("mxc://a", "mxc://a", "", "https://x/a.png") == "upload"  # `avatar:` added since
    assert step("mxc://b", "mxc://b", "https://x/a.png", "https://x/a.png") == "keep"
    assert step("mxc://b", "mxc://b", "https://x/a.png", "") == "upload"  # `avatar:` taken out
