"""The store's schema versions and the ordered steps between them.

The version is one row of `sk_schema`. A store made before versions were counted has no such
row: it is taken as version 1 and every step runs — each step is written to be safe on a store
that already has what it adds (a table made IF NOT EXISTS, a column added only if missing), so
a store of any earlier shape arrives at the current one. A new database gets every table at
once and the current version.

Versions:
1. channels, members, messages (+ their event ids), transaction keys, agent commands, values
2. `sk_pending`: work in progress as a row per item (the two JSON values of version 1 carried over)
3. `sk_member_setting`: a member's mode, model and options, usage, session title
4. `sk_txn.seen`: when a transaction key was handled, so old keys are pruned
5. `sk_turn`: one record per turn (store/turns.py); version 4's pending answers and prompts
   carried over as turn records
6. `sk_member.session_cwd`: the working directory a member's session was opened in (NULL for
   the sessions an older store holds: used as before)
7. `sk_schedule`: work agents scheduled for later (store/schedules.py)
8. `sk_e2ee_pending`, `sk_e2ee_room`: the encrypted events waiting for their room key and the
   encrypted rooms, a row each (store/e2ee.py); the JSON lists of the key-value `e2ee:pending`
   and `e2ee:rooms` carried over, and gone
9. conversations (docs/architecture.md "Conversations and threads"): `sk_message.conversation` (""
   the main timeline — every message an older store holds — else a thread's root event), indexed
   with the channel; `sk_thread_session`: each member's session per thread
10. `sk_session`: the bridge's own record of each member's sessions per conversation (title, last
   used), for `!sessions` (store/sessions.py); the sessions an older store holds are recorded
   there as of the migration, untitled
11. where agents work (store/places.py): `sk_work_dir`, the folder `!cwd` chose for a member of a
   channel; `sk_worktree`, the git worktrees made for threads
12. `sk_schedule.approved`: when the owner approved a repeating schedule; an older store's
   repeating schedules wait for that approval (state `waiting`) instead of running
13. what agents cost (store/spend.py): `sk_spend`, per agent and period, with what `!budget raise`
   added; `sk_session_cost`, the last cumulative cost each session reported
14. an index of `sk_turn` on (channel, conversation, state): a conversation's live turns without
   reading its finished ones
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import peewee as pw

from . import keys
from .ids import new_id, now_ms
from .schema import TABLES, table_name

# Before pending rows, work in progress was one JSON value per kind (version 1).
LEGACY_PENDING = {"answer": "answers/in-progress", "prompt": "prompts/pending"}
ROUTE = ""  # the agent of a turn record that still has to be routed (carried over from version 4)


def _add_pending(db: pw.Database, m: SimpleNamespace) -> None:
    db.create_tables([m.Pending], safe=True)
    V, P = m.Value, m.Pending
    for kind, key in LEGACY_PENDING.items():
        row = V.select(V.value).where(V.key == key).tuples().first()
        if row is None:
            continue
        try:
            found = json.loads(row[0])
        except ValueError:
            found = {}
        for item, data in found.items() if isinstance(found, dict) else ():
            if isinstance(data, dict):
                P.insert(kind=kind, key=item, data=json.dumps(data, sort_keys=True)).on_conflict_ignore().execute()
        V.delete().where(V.key == key).execute()


def _add_member_settings(db: pw.Database, m: SimpleNamespace) -> None:
    db.create_tables([m.MemberSetting], safe=True)


def _add_txn_seen(db: pw.Database, m: SimpleNamespace) -> None:
    if not any(column.name == "seen" for column in db.get_columns("sk_txn")):
        db.execute_sql("ALTER TABLE sk_txn ADD COLUMN seen BIGINT")
        # keys of an older store count as seen now: they are pruned one horizon later
        db.execute_sql(f"UPDATE sk_txn SET seen = {int(now_ms())}")
    db.create_tables([m.Txn], safe=True)  # its index on `seen`


def _add_turns(db: pw.Database, m: SimpleNamespace) -> None:
    """The turn records, and version 4's work in progress carried over: an answer that had
    begun becomes a turn that was prompted (the next start marks it interrupted); an owner
    message not yet answered by every agent becomes a turn to route (the next start routes and
    answers it, leaving out the agents whose answer had begun or ended)."""
    db.create_tables([m.Turn], safe=True)
    P, T, E, C = m.Pending, m.Turn, m.MessageEvent, m.Channel
    items = {
        kind: {key: json.loads(data) for key, data in P.select(P.key, P.data).where(P.kind == kind).tuples()}
        for kind in LEGACY_PENDING
    }
    rows = []
    for key, where in items["answer"].items():
        if not isinstance(where, dict) or where.get("sent") is False:
            continue  # never begun: its message is routed again below
        channel = C.select(C.id).where(C.room_id == str(where.get("room"))).tuples().first()
        if channel is None or not isinstance(where.get("prompt"), str) or not isinstance(where.get("agent"), str):
            continue
        answer = [] if key.startswith("txn:") else [key]
        rows.append(
            dict(
                channel_id=channel[0],
                prompt_event=where["prompt"],
                agent=where["agent"],
                text="",
                state="prompted",
                answer=json.dumps(answer),
            )
        )
    begun = {(row["prompt_event"], row["agent"]) for row in rows}
    for event_id, entry in items["prompt"].items():
        if not isinstance(entry, dict):
            continue
        found = E.select(E.channel_id, E.message_id).where(E.event_id == event_id).tuples().first()
        if found is None:
            continue  # not stored: the homeserver sends it again
        done = [a for a in entry.get("done") or [] if isinstance(a, str)]
        done += [agent for prompt, agent in begun if prompt == event_id]
        rows.append(
            dict(
                channel_id=found[0],
                prompt_event=event_id,
                agent=ROUTE,
                message_id=found[1],
                text=json.dumps(sorted(set(done))),
                state="taken",
            )
        )
    for row in rows:
        T.insert(id=new_id(), updated=now_ms(), **row).on_conflict_ignore().execute()
    P.delete().where(P.kind.in_(list(LEGACY_PENDING))).execute()


def _add_session_cwd(db: pw.Database, m: SimpleNamespace) -> None:
    if not any(column.name == "session_cwd" for column in db.get_columns("sk_member")):
        db.execute_sql("ALTER TABLE sk_member ADD COLUMN session_cwd TEXT")


def _add_schedules(db: pw.Database, m: SimpleNamespace) -> None:
    db.create_tables([m.Schedule], safe=True)


def _legacy_list(m: SimpleNamespace, key: str) -> list:
    """The JSON list of a key-value row of an older store ([] if none, or not a list), and the
    row gone."""
    V = m.Value
    row = V.select(V.value).where(V.key == key).tuples().first()
    V.delete().where(V.key == key).execute()
    try:
        found = json.loads(row[0]) if row is not None and row[0] else []
    except ValueError:
        found = []  # unreadable: the bridge read it as empty too
    return found if isinstance(found, list) else []


def _add_e2ee_tables(db: pw.Database, m: SimpleNamespace) -> None:
    """The encryption's two tables, and what version 7 kept of it as JSON values carried over:
    the events waiting for their room key (in their order; the waiting events are Matrix
    events, read here only for the columns: `room_id`, `event_id`, `content.session_id`) and
    the encrypted rooms."""
    db.create_tables([m.E2eePending, m.E2eeRoom], safe=True)
    now = now_ms()
    for event in _legacy_list(m, keys.E2EE_PENDING):
        if not (
            isinstance(event, dict) and isinstance(event.get("event_id"), str) and isinstance(event.get("room_id"), str)
        ):
            continue  # the bridge could not have used it either
        content = event["content"] if isinstance(event.get("content"), dict) else {}
        session_id = content.get("session_id") if isinstance(content.get("session_id"), str) else ""
        m.E2eePending.insert(
            id=new_id(),
            event_id=event["event_id"],
            room_id=event["room_id"],
            session_id=session_id,
            event=json.dumps(event),
            received=now,
        ).on_conflict_ignore().execute()
    for room_id in _legacy_list(m, keys.E2EE_ROOMS):
        if isinstance(room_id, str):
            m.E2eeRoom.insert(room_id=room_id, marked=now).on_conflict_ignore().execute()


def _add_conversations(db: pw.Database, m: SimpleNamespace) -> None:
    if not any(column.name == "conversation" for column in db.get_columns("sk_message")):
        db.execute_sql("ALTER TABLE sk_message ADD COLUMN conversation TEXT NOT NULL DEFAULT ''")
    db.create_tables([m.Message, m.ThreadSession], safe=True)  # the message index, the new table


def _add_sessions(db: pw.Database, m: SimpleNamespace) -> None:
    """The record of sessions, starting with each member's current one in each conversation."""
    db.create_tables([m.Session], safe=True)
    now = now_ms()
    M, T, S = m.Member, m.ThreadSession, m.Session
    rows = [
        (channel_id, agent, "", session_id)
        for channel_id, agent, session_id in M.select(M.channel_id, M.agent, M.session_id)
        .where(M.session_id.is_null(False))
        .tuples()
    ]
    rows += list(
        T.select(T.channel_id, T.agent, T.conversation, T.session_id).where(T.session_id.is_null(False)).tuples()
    )
    for channel_id, agent, conversation, session_id in rows:
        S.insert(
            channel_id=channel_id, agent=agent, conversation=conversation, session_id=session_id, created=now, used=now
        ).on_conflict_ignore().execute()


def _add_places(db: pw.Database, m: SimpleNamespace) -> None:
    db.create_tables([m.WorkDir, m.Worktree], safe=True)


def _add_schedule_approval(db: pw.Database, m: SimpleNamespace) -> None:
    """`sk_schedule.approved`. The repeating schedules an older store holds were never approved
    by the owner: they wait for it now (the bridge asks at its next start) instead of running."""
    if not any(column.name == "approved" for column in db.get_columns("sk_schedule")):
        db.execute_sql("ALTER TABLE sk_schedule ADD COLUMN approved BIGINT")
    S = m.Schedule
    S.update(state="waiting").where((S.state == "active") & S.cron.is_null(False) & S.approved.is_null()).execute()


def _add_spend(db: pw.Database, m: SimpleNamespace) -> None:
    db.create_tables([m.Spend, m.SessionCost], safe=True)


def _add_live_turn_index(db: pw.Database, m: SimpleNamespace) -> None:
    m.Turn._schema.create_indexes(safe=True)  # noqa: SLF001 (peewee's own schema manager)


# (version reached, step): in order
STEPS = [
    (2, _add_pending),
    (3, _add_member_settings),
    (4, _add_txn_seen),
    (5, _add_turns),
    (6, _add_session_cwd),
    (7, _add_schedules),
    (8, _add_e2ee_tables),
    (9, _add_conversations),
    (10, _add_sessions),
    (11, _add_places),
    (12, _add_schedule_approval),
    (13, _add_spend),
    (14, _add_live_turn_index),
]
LATEST = STEPS[-1][0]


def version(db: pw.Database, m: SimpleNamespace) -> int | None:
    """The store's version; None for a new, empty database."""
    tables = set(db.get_tables())
    if "sk_schema" in tables:
        row = m.Schema.select(m.Schema.version).tuples().first()
        if row is not None:
            return int(row[0])

    return 1 if tables & set(TABLES) else None


def migrate(db: pw.Database, m: SimpleNamespace) -> int:
    """Bring the store to LATEST, one step per transaction; returns the version it was at."""
    with db.atomic():
        found = version(db, m)
        if found is None:
            db.create_tables(m.all, safe=True)
            _set_version(m, LATEST)
            return LATEST
    if found > LATEST:
        from .errors import StoreError

        raise StoreError(
            f"the database is of schema version {found}, newer than this bridge's {LATEST}: run the newer bridge"
        )
    with db.atomic():  # the tables of version 1 a partial store lacks
        tables = set(db.get_tables())
        db.create_tables(
            [
                t
                for t in (m.Channel, m.Member, m.Message, m.MessageEvent, m.Txn, m.AgentCommand, m.Value)
                if table_name(t) not in tables
            ]
        )
    for reached, step in STEPS:
        if reached <= found:
            continue
        with db.atomic():
            step(db, m)
            db.create_tables([m.Schema], safe=True)
            _set_version(m, reached)
    return found


def _set_version(m: SimpleNamespace, value: int) -> None:
    m.Schema.delete().execute()
    m.Schema.insert(version=value).execute()
