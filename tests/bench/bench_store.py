"""The store at 10k, 100k and 1M messages (1,000 channels): append and the unseen-context query.

The history is written straight into the SQLite file (sqlite3.executemany, the store's own
schema), then the Store is opened and timed through its public methods, as the bridge calls them:
    append   Store.add_message (one user message with its event id)
    unseen   Store.member + Store.messages_after(channel, last_seen, 21): turns.unseen_lines' queries
    by event Store.message_by_event (the duplicate check of every incoming message)
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from pathlib import Path

from common import ROOT  # noqa: F401  (sys.path)

from store import Store
from store.connect import DB_FILE

CHANNELS = 1000
AGENT = "echo"
UNSEEN = 20
QUERIED = "c00001"
now = time.perf_counter


def fill(folder: Path, messages: int, channels: int = CHANNELS) -> None:
    """A store with `channels` channels holding `messages` messages in all, oldest first."""
    Store.open("sqlite", folder).close()  # the schema, exactly as the bridge makes it
    db = sqlite3.connect(folder / DB_FILE)
    db.execute("PRAGMA journal_mode=wal")
    db.execute("PRAGMA synchronous=off")
    start_ms = time.time_ns() // 1_000_000 - messages - 10_000
    chan = [(f"c{i:05d}", f"!bench{i}:localhost", f"channel {i}", None, start_ms, AGENT) for i in range(channels)]
    db.executemany(
        "INSERT INTO sk_channel (id, room_id, name, direct_agent, created, last_agent) VALUES (?, ?, ?, ?, ?, ?)", chan
    )
    text = "A message of an ordinary length, about as long as a sentence or two in a chat. " * 2
    last_seen: dict[str, str] = {}
    per_channel = max(1, messages // channels)
    batch, events = [], []
    for n in range(messages):
        channel = chan[n % channels][0]
        mid = f"{start_ms + n:012x}{0:06x}{secrets.randbits(32):08x}"
        user = (n // channels) % 2 == 0
        event = f"$e{n}:localhost"
        batch.append(
            (
                mid,
                channel,
                "@owner:localhost" if user else AGENT,
                "user" if user else "agent",
                text,
                f'["{event}"]',
                start_ms + n,
            )
        )
        events.append((event, channel, mid))
        if n // channels == per_channel - UNSEEN - 1:
            last_seen[channel] = mid
        if len(batch) >= 50_000:
            _flush(db, batch, events)
    # the queried channel ends the same way at every size: 40 more, the agent saw all but 20
    for k in range(2 * UNSEEN):
        n = messages + k
        mid = f"{start_ms + n:012x}{0:06x}{secrets.randbits(32):08x}"
        batch.append((mid, QUERIED, "@owner:localhost", "user", text, f'["$q{k}:localhost"]', start_ms + n))
        events.append((f"$q{k}:localhost", QUERIED, mid))
        if k == UNSEEN - 1:
            last_seen[QUERIED] = mid
    _flush(db, batch, events)
    db.executemany(
        "INSERT INTO sk_member (channel_id, agent, session_id, fresh, last_seen, joined) VALUES (?, ?, ?, 0, ?, ?)",
        [(c[0], AGENT, f"s{i}", last_seen.get(c[0]), f"{start_ms:012x}000000{i:08x}") for i, c in enumerate(chan)],
    )
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def _flush(db, batch, events) -> None:
    db.executemany(
        "INSERT INTO sk_message (id, channel_id, sender, role, text, event_ids, created, conversation) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, '')",
        batch,
    )
    db.executemany("INSERT INTO sk_message_event (event_id, channel_id, message_id) VALUES (?, ?, ?)", events)
    db.commit()
    batch.clear()
    events.clear()


def measure(folder: Path, reps: int) -> dict:
    store = Store.open("sqlite", folder)
    try:
        append_on, query_on = "c00000", QUERIED
        times: dict[str, list[float]] = {"append": [], "unseen": [], "by_event": []}
        for i in range(reps):
            t = now()
            member = store.member(query_on, AGENT)
            found = store.messages_after(query_on, member.last_seen, UNSEEN + 1)
            times["unseen"].append(now() - t)
            assert found, "the unseen query found nothing"
            t = now()
            store.message_by_event(f"$e{(i * 7919) % 10_000}:localhost")
            times["by_event"].append(now() - t)
            t = now()
            store.add_message(
                append_on, "@owner:localhost", "user", f"bench append {i}", [f"$append{i}-{secrets.token_hex(4)}"]
            )
            times["append"].append(now() - t)
        return times
    finally:
        store.close()


def run(folder: Path, quick: bool) -> dict:
    from common import p50, p99

    sizes = (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000)
    reps = 1000 if quick else 3000
    out = {"sizes": {}, "quick": quick}
    for size in sizes:
        where = folder / f"n{size}"
        t = now()
        fill(where, size)
        fill_s = now() - t
        times = measure(where, reps)
        out["sizes"][size] = {name: (p50(v), p99(v)) for name, v in times.items()}
        out["sizes"][size]["fill_s"] = fill_s
        out["sizes"][size]["bytes"] = (where / DB_FILE).stat().st_size
    return out


def _n(size: int) -> str:
    return f"{size // 1_000_000}M" if size >= 1_000_000 else f"{size // 1000}k"


def rows(r: dict) -> list[tuple]:
    sizes = sorted(r["sizes"])
    base = r["sizes"][sizes[0]]
    out = []
    for name, label in (
        ("append", "message append"),
        ("unseen", "unseen-context query"),
        ("by_event", "message by event id"),
    ):
        for size in sizes[1:]:
            m = r["sizes"][size][name]
            ratio = m[0] / base[name][0]
            goal = name != "by_event" and size == 1_000_000
            out.append(
                (
                    "Store",
                    f"{label} p50 / p99 at {_n(size)} (base {_n(sizes[0])})",
                    f"{m[0] * 1e3:.3f} / {m[1] * 1e3:.3f} ms",
                    f"{base[name][0] * 1e3:.3f} / {base[name][1] * 1e3:.3f} ms",
                    f"{ratio:.2f}×",
                    "≤ 1.5× at 1M" if goal else "(info)",
                    ratio <= 1.5 if goal else None,
                )
            )
    if 1_000_000 not in r["sizes"]:
        out.append(("Store", "1M messages", "skipped (--quick)", "", "", "≤ 1.5×", None))
    return out


def notes(r: dict) -> list[str]:
    return [
        f"store at {_n(s)}: {v['bytes'] / 1e6:.0f} MB on disk, filled in {v['fill_s']:.1f} s "
        f"(1,000 channels, {s // CHANNELS} messages each)"
        for s, v in sorted(r["sizes"].items())
    ]
