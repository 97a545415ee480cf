"""An avatar for the bridge bot and each puppet (docs/using.md "The first minutes"): a generated
picture, a symmetric 5×5 pattern in a colour of its own, uploaded once; its mxc URI is kept in
the store per user, and set as the profile's avatar when the profile has none (one set by
someone else is kept).

`identicon(seed)` and `png(...)` are pure (tests/unit/matrix/test_avatars.py): the PNG is written
here with zlib, no imaging library.
"""

from __future__ import annotations

import colorsys
import hashlib
import logging
import struct
import zlib
from typing import TYPE_CHECKING

import aiohttp

from store import keys

from .client import MatrixError

if TYPE_CHECKING:
    from store.offloop import OffLoop

    from .puppet import Puppet

log = logging.getLogger(__name__)

CELLS, CELL, MARGIN = 5, 16, 8
SIZE = CELLS * CELL + 2 * MARGIN  # 96 pixels square
BACKGROUND = (240, 240, 240)


def png(width: int, height: int, pixel) -> bytes:
    """An RGB PNG of `width` × `height`, `pixel(x, y)` → (r, g, b)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(v for x in range(width) for v in pixel(x, y)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def pattern(seed: str) -> tuple[tuple[int, int, int], list[list[bool]]]:
    """The colour and the 5×5 cells (mirrored left to right) `seed` gives, always the same."""
    digest = hashlib.sha256(seed.encode()).digest()
    red, green, blue = colorsys.hls_to_rgb(digest[0] / 255, 0.45, 0.6)
    colour = (round(red * 255), round(green * 255), round(blue * 255))
    bits = int.from_bytes(digest[1:5], "big")
    cells = [[False] * CELLS for _ in range(CELLS)]
    for row in range(CELLS):
        for col in range((CELLS + 1) // 2):
            on = bool(bits >> (row * 3 + col) & 1)
            cells[row][col] = cells[row][CELLS - 1 - col] = on
    return colour, cells


def identicon(seed: str) -> bytes:
    """The avatar of `seed` (a user id) as PNG bytes."""
    colour, cells = pattern(seed)

    def pixel(x: int, y: int) -> tuple[int, int, int]:
        col, row = (x - MARGIN) // CELL, (y - MARGIN) // CELL
        inside = MARGIN <= x < SIZE - MARGIN and MARGIN <= y < SIZE - MARGIN
        return colour if inside and cells[row][col] else BACKGROUND

    return png(SIZE, SIZE, pixel)


async def ensure(identities: list[Puppet], db: OffLoop) -> None:
    """Each identity's avatar: uploaded the first time (its mxc kept in the store), set when its
    profile has none. A failure is logged and left for the next start."""
    for identity in identities:
        try:
            await _ensure_one(identity, db)
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("no avatar for %s this time: %s", identity.user_id, exc)


async def _ensure_one(identity: Puppet, db: OffLoop) -> None:
    """A profile with an avatar keeps it (ours from an earlier start, or one someone chose):
    nothing is uploaded. Else the kept upload is set, or a new one made and kept."""
    if await identity.intent.avatar_url():
        return
    key = keys.avatar(identity.user_id)
    mxc = await db.get_value(key)
    if not mxc:
        mxc = await identity.intent.upload(identicon(identity.user_id), "image/png", "avatar.png")
        await db.set_value(key, mxc)
    await identity.intent.set_avatar_url(mxc)
