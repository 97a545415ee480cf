"""The store at 10k, 100k and 1M messages (1,000 channels), SQLite and PostgreSQL: size, append
and the queries a turn reads.

The history is written straight into the database (the store's own schema, through its own
connection: executemany / execute_values), one finished turn for each agent message, then timed
through the Store's public methods, as the bridge calls them:
    append      Store.add_message (one user message with its event id)
    unseen      Store.member + Store.messages_after(channel, last_seen, 21): turns.unseen_lines'
    recent      Store.messages_in(channel, "", None, 10): a conversation's last messages
    by event    Store.message_by_event (the duplicate check of every incoming message)
    speaker     turns.last_live_agent + Store.last_agent_sender: routing's last speaker, read for
                every owner message before its prompt
    journal     turns.unfinished(): the turns not over, read once at start (recovery)
The channels grow with the store (10, 100, 1,000 messages each): a query that walks a channel's
range grows 100× from 10k to 1M; one that goes straight to its rows stays flat.
PostgreSQL: a throwaway cluster (tests/unit/store/conftest.py's, the local initdb and pg_ctl).
"""

from __future__ import annotations

import importlib.util
import secrets
import time
from pathlib import Path

from common import ROOT  # noqa: F401  (sys.path)

from store import Store
from store.connect import DB_FILE

CHANNELS = 1000
AGENT = "echo"
UNSEEN = 20
RECENT = 10  # a channel holds 10 messages at 10k: the same rows read at every size
QUERIED = "c00001"
now = time.perf_counter
TEXT = "A message of an ordinary length, about as long as a sentence or two in a chat. " * 2


def fill(folder: Path, messages: int, channels: int = CHANNELS, agents: tuple[str, ...] = (AGENT,)) -> None:
    """A SQLite store with `channels` channels holding `messages` messages in all, oldest first,
    at rest (no turn left unfinished: a start has nothing to recover)."""
    store = Store.open("sqlite", folder)  # the schema, exactly as the bridge makes it
    try:
        fill_store(store, messages, channels, agents, live=False)
    finally:
        store.close()


def _insert(store: Store, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:
    if not rows:
        return
    conn = store.core.db.connection()
    names = ", ".join(columns)
    if store.core.reconnector is not None:  # PostgreSQL
        from psycopg2.extras import execute_values

        with conn.cursor() as cursor:
            execute_values(cursor, f"INSERT INTO {table} ({names}) VALUES %s", rows, page_size=2000)
    else:
        conn.executemany(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})", rows)


MESSAGE = ("id", "channel_id", "sender", "role", "text", "event_ids", "created", "conversation")
EVENT = ("event_id", "channel_id", "message_id")
TURN = ("id", "channel_id", "conversation", "prompt_event", "agent", "message_id", "text", "alone", "state", "attempt")
TURN += ("answer", "updated")


def fill_store(
    store: Store, messages: int, channels: int = CHANNELS, agents: tuple[str, ...] = (AGENT,), live: bool = True
) -> None:
    """Fill an open, empty store: owner and agent messages alternating round the channels, a
    finished turn for each agent message; every agent a member of every channel, having seen all
    but the last UNSEEN of each; QUERIED ends the same way at every size (40 owner messages)."""
    db = store.core.db
    start_ms = time.time_ns() // 1_000_000 - messages - 10_000
    chan = [(f"c{i:05d}", f"!bench{i}:localhost", f"channel {i}", None, start_ms, agents[0]) for i in range(channels)]
    with db.atomic():
        _insert(store, "sk_channel", ("id", "room_id", "name", "direct_agent", "created", "last_agent"), chan)
    last_seen: dict[str, str] = {}
    per_channel = max(1, messages // channels)
    batch: list[tuple] = []
    events: list[tuple] = []
    turns: list[tuple] = []
    last_user: dict[str, tuple[str, str]] = {}

    def flush() -> None:
        with db.atomic():
            _insert(store, "sk_message", MESSAGE, batch)
            _insert(store, "sk_message_event", EVENT, events)
            _insert(store, "sk_turn", TURN, turns)
        batch.clear(), events.clear(), turns.clear()

    for n in range(messages):
        channel = chan[n % channels][0]
        mid = f"{start_ms + n:012x}{0:06x}{secrets.randbits(32):08x}"
        user = (n // channels) % 2 == 0
        event = f"$e{n}:localhost"
        agent = agents[(n // channels // 2) % len(agents)]
        sender, role = ("@owner:localhost", "user") if user else (agent, "agent")
        batch.append((mid, channel, sender, role, TEXT, f'["{event}"]', start_ms + n, ""))
        events.append((event, channel, mid))
        if user:
            last_user[channel] = (event, mid)
        elif channel in last_user:
            prompt, prompt_mid = last_user.pop(channel)
            turns.append(
                (mid, channel, "", prompt, agent, prompt_mid, "x", False, "done", 1, f'["{event}"]', start_ms + n)
            )
        if n // channels == per_channel - UNSEEN - 1:
            last_seen[channel] = mid
        if len(batch) >= 50_000:
            flush()
    for k in range(2 * UNSEEN):
        n = messages + k
        mid = f"{start_ms + n:012x}{0:06x}{secrets.randbits(32):08x}"
        batch.append((mid, QUERIED, "@owner:localhost", "user", TEXT, f'["$q{k}:localhost"]', start_ms + n, ""))
        events.append((f"$q{k}:localhost", QUERIED, mid))
        if k == UNSEEN - 1:
            last_seen[QUERIED] = mid
    # one turn not over, as a bridge stopped mid-answer leaves it
    last = (mid + "t", QUERIED, "", f"$q{2 * UNSEEN - 1}:localhost", agents[0], mid, "x", False, "prompted", 1)
    if live:
        turns.append(last + ("[]", 0))
    flush()
    members = [
        (c[0], agent, f"s{i}-{agent}", False, last_seen.get(c[0]), f"{start_ms:012x}000000{i:08x}")
        for i, c in enumerate(chan)
        for agent in agents
    ]
    with db.atomic():
        _insert(store, "sk_member", ("channel_id", "agent", "session_id", "fresh", "last_seen", "joined"), members)
    if store.core.reconnector is not None:
        db.execute_sql("ANALYZE")
    else:
        db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")


def measure(store: Store, reps: int) -> dict:
    append_on, query_on = "c00000", QUERIED
    times: dict[str, list[float]] = {k: [] for k in ("append", "unseen", "recent", "by_event", "speaker", "journal")}
    for i in range(reps):
        t = now()
        member = store.member(query_on, AGENT)
        found = store.messages_after(query_on, member.last_seen, UNSEEN + 1)
        times["unseen"].append(now() - t)
        assert len(found) == UNSEEN, f"the unseen query found {len(found)}"
        t = now()
        recent = store.messages_in(f"c{i % CHANNELS:05d}", "", None, RECENT)
        times["recent"].append(now() - t)
        assert recent, "no recent history"
        t = now()
        store.message_by_event(f"$e{(i * 7919) % 10_000}:localhost")
        times["by_event"].append(now() - t)
        t = now()
        channel = f"c{(i * 31) % CHANNELS:05d}"
        store.turns.last_live_agent(channel) or store.last_agent_sender(channel)
        times["speaker"].append(now() - t)
        if i % 10 == 0:
            t = now()
            live = store.turns.unfinished()
            times["journal"].append(now() - t)
            assert len(live) == 1, f"{len(live)} unfinished turns"
        t = now()
        store.add_message(
            append_on, "@owner:localhost", "user", f"bench append {i}", [f"$append{i}-{secrets.token_hex(4)}"]
        )
        times["append"].append(now() - t)
    return times


def _size(store: Store, folder: Path) -> int:
    if store.core.reconnector is not None:
        return int(store.core.db.execute_sql("SELECT pg_database_size(current_database())").fetchone()[0])
    return (folder / DB_FILE).stat().st_size


def _postgres():
    """tests/unit/store/conftest.py's throwaway cluster (imported by path: it is a conftest)."""
    path = ROOT / "tests" / "unit" / "store" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_bench_pg_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._Cluster()


def _drop_all(url: str) -> None:
    from store.schema import TABLES

    store = Store.open(url)
    try:
        for table in TABLES:
            store.core.db.execute_sql(f"DROP TABLE IF EXISTS {table} CASCADE")
    finally:
        store.close()


def run(folder: Path, quick: bool, engines: tuple[str, ...] = ("sqlite", "postgresql")) -> dict:
    from common import p50, p99

    sizes = (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000)
    reps = 300 if quick else 1000
    out: dict = {"sizes": {}, "quick": quick}
    cluster = _postgres() if "postgresql" in engines else None
    url = cluster.start() if cluster else ""
    try:
        for engine in engines:
            for size in sizes:
                where = folder / f"{engine}-n{size}"
                if engine == "postgresql":
                    _drop_all(url)
                store = Store.open("sqlite", where) if engine == "sqlite" else Store.open(url)
                try:
                    t = now()
                    fill_store(store, size)
                    fill_s = now() - t
                    times = measure(store, reps)
                    figures: dict = {name: (p50(v), p99(v)) for name, v in times.items()}
                    figures["fill_s"] = fill_s
                    figures["bytes"] = _size(store, where)
                    out["sizes"][(engine, size)] = figures
                finally:
                    store.close()
    finally:
        if cluster:
            cluster.stop()
    return out


def _n(size: int) -> str:
    return f"{size // 1_000_000}M" if size >= 1_000_000 else f"{size // 1000}k"


LABELS = (
    ("append", "message append"),
    ("unseen", "unseen messages for an agent"),
    ("recent", f"recent history (last {RECENT})"),
    ("by_event", "message by event id"),
    ("speaker", "last speaker (live turn, last answer)"),
    ("journal", "journal: unfinished turns"),
)


def rows(r: dict) -> list[tuple]:
    out = []
    engines = sorted({e for e, _ in r["sizes"]}, reverse=True)
    for engine in engines:
        sizes = sorted(s for e, s in r["sizes"] if e == engine)
        base = r["sizes"][(engine, sizes[0])]
        for name, label in LABELS:
            for size in sizes[1:]:
                m = r["sizes"][(engine, size)][name]
                ratio = m[0] / base[name][0]
                goal = size == 1_000_000
                out.append(
                    (
                        f"Store ({engine})",
                        f"{label} p50 / p99 at {_n(size)} (base {_n(sizes[0])})",
                        f"{m[0] * 1e3:.3f} / {m[1] * 1e3:.3f} ms",
                        f"{base[name][0] * 1e3:.3f} / {base[name][1] * 1e3:.3f} ms",
                        f"{ratio:.2f}×",
                        "≤ 1.5× at 1M" if goal else "(info)",
                        ratio <= 1.5 if goal else None,
                    )
                )
    if not any(s == 1_000_000 for _, s in r["sizes"]):
        out.append(("Store", "1M messages", "skipped (--quick)", "", "", "≤ 1.5×", None))
    return out


def notes(r: dict) -> list[str]:
    return [
        f"store ({engine}) at {_n(s)}: {v['bytes'] / 1e6:.0f} MB on disk ({v['bytes'] / (s + 2 * UNSEEN):.0f} "
        f"bytes a message, its event and half a turn), filled in {v['fill_s']:.1f} s "
        f"({CHANNELS:,} channels, {s // CHANNELS} messages each)"
        for (engine, s), v in sorted(r["sizes"].items())
    ]


if __name__ == "__main__":
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(description="the store benchmark alone")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--engine", nargs="*", default=["sqlite", "postgresql"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sidekicks-bench-store-") as tmp:
        result = run(Path(tmp), args.quick, tuple(args.engine))
    for row in rows(result):
        print(" | ".join(str(c) for c in row))
    print("\n".join(notes(result)))
    print(json.dumps({f"{e}:{s}": v for (e, s), v in result["sizes"].items()}, default=str))
