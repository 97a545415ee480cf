"""An avatar for the bridge bot and each puppet (docs/using.md "The first minutes"): the agent's
`avatar:` picture (a URL or a file: PNG, JPEG, GIF or WebP as it is; a registry's SVG icon drawn
into a PNG in the puppet's colour, svg_icon.py), else a generated one, a symmetric 5×5 pattern in
a colour of its own; uploaded once, its mxc URI and what it was made from kept in
the store per user, and set as the profile's avatar. A profile avatar the bridge did not set
(someone chose it) is kept.

`identicon(seed)`, `png(...)`, `picture_type` and `step` are pure (tests/unit/matrix/test_avatars.py):
the PNG is written here with zlib, no imaging library.
"""

from __future__ import annotations

import asyncio
import colorsys
import hashlib
import logging
import struct
import zlib
from typing import TYPE_CHECKING

import aiohttp

from store import keys

from . import svg_icon
from .client import MatrixError

if TYPE_CHECKING:
    from store.offloop import OffLoop

    from .puppet import Puppet

log = logging.getLogger(__name__)

CELLS, CELL, MARGIN = 5, 16, 8
SIZE = CELLS * CELL + 2 * MARGIN  # 96 pixels square
BACKGROUND = (240, 240, 240)
ICON_MARGIN = 14  # pixels around a drawn SVG icon


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


PICTURE_BYTES = 1024 * 1024  # an `avatar:` picture larger than this is not used
FETCH_SECONDS = 30.0
PICTURE_TYPES = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif"}


def picture_type(data: bytes) -> str | None:
    """The MIME type of a PNG, JPEG, GIF or WebP picture, from its first bytes; None otherwise."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in PICTURE_TYPES.items() if data.startswith(magic)), None)


def step(profile: str | None, ours: str | None, ours_from: str | None, wanted: str) -> str:
    """What to do for one identity: "keep" (someone chose the profile's avatar, or it is ours,
    made from `wanted`), "set" (ours is made from `wanted` but not on the profile), "upload" (a
    new one from `wanted`). `ours_from` None (a store from before sources were kept): generated."""
    if profile and profile != ours:
        return "keep"
    if ours and (ours_from or "") == wanted:
        return "keep" if profile == ours else "set"
    return "upload"


async def ensure(identities: list[Puppet], db: OffLoop, pictures: dict[str, str] | None = None) -> None:
    """Each identity's avatar: its agent's picture in `pictures` (agent name → URL or file), else
    a generated one. A failure is logged and left for the next start."""
    for identity in identities:
        wanted = (pictures or {}).get(identity.agent or "", "")
        try:
            await _ensure_one(identity, db, wanted)
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("no avatar for %s this time: %s", identity.user_id, exc)


async def _ensure_one(identity: Puppet, db: OffLoop, wanted: str) -> None:
    """Uploaded once per source; a picture that cannot be read gives the generated avatar this
    time (tried again at the next start)."""
    ours, ours_from = await db.get_value(keys.avatar(identity.user_id)), None
    if ours:
        ours_from = await db.get_value(keys.avatar_source(identity.user_id))
    profile = await identity.intent.avatar_url()
    action = step(profile, ours, ours_from, wanted)
    if action == "keep":
        return
    if action == "upload":
        data, kind, made_from = await _picture_for(identity.user_id, wanted)
        if not ours or made_from != (ours_from or ""):  # else the generated one, uploaded before
            ours = await identity.intent.upload(data, kind, "avatar" + _suffix(kind))
            await db.set_value(keys.avatar(identity.user_id), ours)
            await db.set_value(keys.avatar_source(identity.user_id), made_from)
    if ours and profile != ours:
        await identity.intent.set_avatar_url(ours)


async def _picture_for(user_id: str, wanted: str) -> tuple[bytes, str, str]:
    """(the picture, its MIME type, what it was made from): `wanted`'s, else a generated one."""
    if wanted:
        try:
            return *(await read_picture(wanted, user_id)), wanted
        except (OSError, ValueError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("avatar of %s: %s: %s; a generated one instead", user_id, wanted, exc)
    return identicon(user_id), "image/png", ""


async def read_picture(source: str, seed: str) -> tuple[bytes, str]:
    """The picture at `source` (an http(s) URL or a file) and its MIME type: a PNG, JPEG, GIF or
    WebP as it is, an SVG icon drawn in `seed`'s colour (clients do not show SVG avatars);
    ValueError when it is too large or none of those."""
    if source.startswith(("http://", "https://")):
        timeout = aiohttp.ClientTimeout(total=FETCH_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as http, http.get(source) as response:
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            data = await response.content.read(PICTURE_BYTES + 1)
    else:
        with open(source, "rb") as handle:
            data = handle.read(PICTURE_BYTES + 1)
    if len(data) > PICTURE_BYTES:
        raise ValueError(f"larger than {PICTURE_BYTES // 1024} KiB")
    kind = picture_type(data)
    if kind is not None:
        return data, kind
    if b"<svg" not in data[:4096]:
        raise ValueError("not a PNG, JPEG, GIF, WebP or SVG picture")
    return await asyncio.to_thread(icon_png, data, seed), "image/png"  # a fifth of a second: off the loop


def icon_png(svg: bytes, seed: str) -> bytes:
    """An SVG icon as an avatar: drawn in `seed`'s colour on the generated avatars' background."""
    colour, _ = pattern(seed)
    return png(SIZE, SIZE, svg_icon.render(svg, SIZE, ICON_MARGIN, colour, BACKGROUND))


def _suffix(kind: str) -> str:
    return "." + kind.split("/", 1)[1].replace("jpeg", "jpg")
