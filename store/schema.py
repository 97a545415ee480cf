"""Tables, as peewee models built per database.

Models are made by a function rather than at import time so that several stores
(say SQLite and an in-memory fallback, or tests) can be open at once without
rebinding shared classes. Nothing outside the store ever sees these models.
"""

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import peewee as pw

# Prefixed, so that the store can live in a database shared with other tables.
TABLES = (
    "sk_member_setting",
    "sk_thread_session",
    "sk_session",
    "sk_message_event",
    "sk_message",
    "sk_member",
    "sk_channel",
    "sk_txn",
    "sk_agent_command",
    "sk_value",
    "sk_pending",
    "sk_turn",
    "sk_schedule",
    "sk_e2ee_pending",
    "sk_e2ee_room",
    "sk_work_dir",
    "sk_worktree",
    "sk_spend",
    "sk_session_cost",
    "sk_schema",
)


def _references(table: str) -> list[pw.Node]:
    # Declared for integrity only: deletes are explicit, in one transaction.
    return [pw.SQL(f"REFERENCES {table} (id)")]


def table_name(model: type[pw.Model]) -> str:
    return model._meta.table_name  # noqa: SLF001 (peewee's model metadata has no other name)


def select(table: Any, columns: Sequence[str]) -> pw.ModelSelect:
    """SELECT `columns` (by name, in that order) of `table`: the rows a record is made of."""
    return table.select(*(getattr(table, name) for name in columns))


def next_number(table: Any, channel_id: str) -> int:
    """The number the channel's next row of `table` takes (schedules, worktrees: 1, 2, …)."""
    row = (
        table.select(table.number)
        .where(table.channel_id == channel_id)
        .order_by(table.number.desc())
        .limit(1)
        .tuples()
        .first()
    )
    return (int(row[0]) if row else 0) + 1


def build(db: pw.Database) -> SimpleNamespace:
    class Base(pw.Model):
        class Meta:
            database = db
            legacy_table_names = False

    class Channel(Base):
        id = pw.TextField(primary_key=True)
        room_id = pw.TextField(unique=True)
        name = pw.TextField()
        direct_agent = pw.TextField(null=True)
        created = pw.BigIntegerField()
        # Sender of the newest agent message, kept by add_message: a lookup
        # that no query planner can turn into a scan of the history.
        last_agent = pw.TextField(null=True)

        class Meta:
            table_name = "sk_channel"

    class Member(Base):
        channel_id = pw.TextField(constraints=_references("sk_channel"))
        agent = pw.TextField(index=True)  # members_of_agent
        session_id = pw.TextField(null=True)
        fresh = pw.BooleanField(default=False)
        last_seen = pw.TextField(null=True)
        joined = pw.TextField()  # a new_id(): join order
        # the working directory the session was opened in: a session belongs to it, and is not
        # loaded once the agent works elsewhere (NULL: opened before it was kept); added by
        # migration step 6 (store/migrations.py)
        session_cwd = pw.TextField(null=True)

        class Meta:
            table_name = "sk_member"
            primary_key = pw.CompositeKey("channel_id", "agent")

    class MemberSetting(Base):
        # A member's session settings (store/settings.py): the owner's choices of mode, model
        # and config options, applied again to every new or loaded session, and what the agent
        # last reported. Its own table, so that an existing store gains it at open (a new table
        # is created there; nothing else changes), and it goes with the membership.
        channel_id = pw.TextField()
        agent = pw.TextField()
        choices = pw.TextField(default="{}")  # JSON {mode, model, config: {id: value}}
        snapshot = pw.TextField(null=True)  # JSON: the session's offers, for !mode / !status
        used = pw.BigIntegerField(null=True)  # context tokens in use
        size = pw.BigIntegerField(null=True)  # context window
        cost = pw.DoubleField(null=True)
        currency = pw.TextField(null=True)
        title = pw.TextField(null=True)  # the session's title (session_info_update)
        updated = pw.BigIntegerField(default=0)

        class Meta:
            table_name = "sk_member_setting"
            primary_key = pw.CompositeKey("channel_id", "agent")
            constraints = [
                pw.SQL("FOREIGN KEY (channel_id, agent) REFERENCES sk_member (channel_id, agent) ON DELETE CASCADE")
            ]

    class ThreadSession(Base):
        # A member's ACP session in one thread of its channel
        # (docs/architecture.md "Conversations and threads"): what `sk_member` keeps for the main
        # timeline — session, fresh flag, last seen message, working directory — per (channel,
        # agent, thread root). A row is made at the member's first turn in the thread; it goes with
        # the membership. Added by migration step 9 (store/migrations.py).
        channel_id = pw.TextField()
        agent = pw.TextField()
        conversation = pw.TextField()  # the thread's root event id
        session_id = pw.TextField(null=True)
        fresh = pw.BooleanField(default=False)
        last_seen = pw.TextField(null=True)
        session_cwd = pw.TextField(null=True)
        updated = pw.BigIntegerField(default=0)  # ms: when its session was last set or used

        class Meta:
            table_name = "sk_thread_session"
            primary_key = pw.CompositeKey("channel_id", "agent", "conversation")

    class Session(Base):
        # The bridge's own record of a member's sessions in one conversation of its channel
        # (store/sessions.py): each session it opened, resumed, loaded or forked there, with a
        # title (the agent's, else the first prompt's first line) and when it was last used:
        # what `!sessions` lists when the agent cannot list its sessions. It goes with the
        # membership. Added by migration step 10 (store/migrations.py).
        channel_id = pw.TextField()
        agent = pw.TextField()
        conversation = pw.TextField(default="")  # "" the main timeline; else a thread's root event
        session_id = pw.TextField()
        title = pw.TextField(null=True)
        created = pw.BigIntegerField()  # ms
        used = pw.BigIntegerField()  # ms: when it was last opened or prompted

        class Meta:
            table_name = "sk_session"
            primary_key = pw.CompositeKey("channel_id", "agent", "session_id")
            indexes = ((("channel_id", "agent", "conversation", "used"), False),)

    class Message(Base):
        channel_id = pw.TextField(constraints=_references("sk_channel"))
        id = pw.TextField()  # a new_id(): chronological, unique by construction
        sender = pw.TextField()
        role = pw.TextField()
        text = pw.TextField()
        # JSON list, so that reading messages is one query; MessageEvent
        # indexes the same ids for message_by_event.
        event_ids = pw.TextField(default="[]")
        created = pw.BigIntegerField()
        # "" the main timeline; else the event id of the thread's root (channels/base/conversations.py);
        # added by migration step 9 (store/migrations.py)
        conversation = pw.TextField(default="")

        class Meta:
            table_name = "sk_message"
            # (channel_id, id) and deliberately no index on id alone: given one,
            # PostgreSQL may read "the last n of a channel" by walking all
            # messages backwards, a full scan for a quiet channel. This way the
            # only ordered path is the channel's own range, whatever the size.
            primary_key = pw.CompositeKey("channel_id", "id")
            # the same for one conversation's range: its last messages, its last speaker
            indexes = ((("channel_id", "conversation", "id"), False),)

    class MessageEvent(Base):
        # Not unique: a duplicate event id must not lose a finished message;
        # message_by_event then returns the newest.
        event_id = pw.TextField(index=True)
        channel_id = pw.TextField()
        message_id = pw.TextField()

        class Meta:
            table_name = "sk_message_event"
            primary_key = False
            # Also serves the foreign key check when a channel's messages go.
            indexes = ((("channel_id", "message_id"), False),)
            constraints = [pw.SQL("FOREIGN KEY (channel_id, message_id) REFERENCES sk_message (channel_id, id)")]

    class Txn(Base):
        id = pw.TextField(primary_key=True)
        # when it was handled (ms): keys older than the store's horizon are pruned (a homeserver
        # retries a transaction minutes after, not weeks); added by migration step 4 (store/migrations.py)
        seen = pw.BigIntegerField(null=True, index=True)

        class Meta:
            table_name = "sk_txn"

    class AgentCommand(Base):
        agent = pw.TextField(primary_key=True)
        commands = pw.TextField()  # JSON list of the announced commands

        class Meta:
            table_name = "sk_agent_command"

    class Value(Base):
        key = pw.TextField(primary_key=True)
        value = pw.TextField()

        class Meta:
            table_name = "sk_value"

    class Pending(Base):
        # Work in progress that must survive a crash, one row per item: a row
        # is written or crossed out in constant time however many are open
        # (a backlog of thousands of messages), unlike one JSON value.
        kind = pw.TextField()
        key = pw.TextField()
        data = pw.TextField()  # JSON object

        class Meta:
            table_name = "sk_pending"
            primary_key = pw.CompositeKey("kind", "key")

    class Turn(Base):
        # One turn: one agent answering one prompt in one conversation (store/turns.py). Its
        # state moves taken → claimed → posted → prompted → finishing → done (or ended,
        # interrupted, dropped); every path that starts a turn claims it here, once per run.
        id = pw.TextField(primary_key=True)  # a new_id(): the order turns were taken in
        channel_id = pw.TextField(index=True)
        conversation = pw.TextField(default="")  # "" the main timeline; else a thread's root event
        prompt_event = pw.TextField()  # the owner message's event id (or a scheduled run's key)
        agent = pw.TextField()
        message_id = pw.TextField(null=True)  # the stored owner message it answers
        text = pw.TextField()  # what the agent is told after its context (routing.Answerer.text)
        alone = pw.BooleanField(default=False)  # a slash command: no context
        state = pw.TextField(index=True)
        run = pw.TextField(null=True)  # the bridge run that took or claimed it last
        attempt = pw.IntegerField(default=0)  # claims so far: part of its transaction ids
        answer = pw.TextField(default="[]")  # JSON: event ids of the answer's messages
        final = pw.TextField(null=True)  # JSON: the final send in flight {event, content, txn, text}
        updated = pw.BigIntegerField(default=0)

        class Meta:
            table_name = "sk_turn"
            # the second: routing's last speaker (a conversation's newest live turn), read
            # for every owner message, goes straight to the few live turns instead of walking
            # every turn the channel ever had (migration step 14; docs/performance.md)
            indexes = (
                (("prompt_event", "agent", "conversation"), True),
                (("channel_id", "conversation", "state"), False),
            )

    class Schedule(Base):
        # Work an agent scheduled for later (its `schedule` tool, bridge/mcp): each run is a turn
        # whose prompt key is `schedule:<id>:<due>` (store/schedules.py); added by migration step 7
        id = pw.TextField(primary_key=True)  # a new_id()
        channel_id = pw.TextField(index=True)
        conversation = pw.TextField(default="")  # "" the main timeline; else a thread's root event
        number = pw.IntegerField()  # per channel: what `!schedules` shows and `!unschedule N` takes
        agent = pw.TextField()
        prompt = pw.TextField()
        cron = pw.TextField(null=True)  # a cron expression: runs again after each run
        due = pw.BigIntegerField(null=True, index=True)  # the next run (ms); NULL once over
        state = pw.TextField(default="active")  # waiting | active | declined | done | cancelled
        created = pw.BigIntegerField()
        approved = pw.BigIntegerField(null=True)  # when the owner approved a cron (ms); step 12

        class Meta:
            table_name = "sk_schedule"
            indexes = ((("channel_id", "number"), True),)

    class E2eePending(Base):
        # An encrypted event waiting for its room key (store/e2ee.py), a row each: written and
        # crossed out one at a time; added by migration step 8 (before: the JSON list of the
        # key-value `e2ee:pending`)
        id = pw.TextField(primary_key=True)  # a new_id(): the order they came in
        event_id = pw.TextField(unique=True)
        room_id = pw.TextField()
        session_id = pw.TextField()  # the key it waits for, in its room
        event = pw.TextField()  # JSON: the event as it came
        received = pw.BigIntegerField()  # ms

        class Meta:
            table_name = "sk_e2ee_pending"
            indexes = ((("room_id", "session_id"), False),)

    class E2eeRoom(Base):
        # A room known to be encrypted (store/e2ee.py); added by migration step 8 (before: the
        # JSON list of the key-value `e2ee:rooms`)
        room_id = pw.TextField(primary_key=True)
        marked = pw.BigIntegerField()  # ms: when it was known (the migration's time for older ones)

        class Meta:
            table_name = "sk_e2ee_room"

    class WorkDir(Base):
        # The folder `!cwd` chose for a member in a channel (store/places.py); none: its
        # configured cwd. Added by migration step 11 (store/migrations.py).
        channel_id = pw.TextField()
        agent = pw.TextField()
        path = pw.TextField()
        updated = pw.BigIntegerField(default=0)

        class Meta:
            table_name = "sk_work_dir"
            primary_key = pw.CompositeKey("channel_id", "agent")

    class Worktree(Base):
        # A git worktree the bridge made for a thread (store/places.py): one per thread and
        # repository, numbered per channel. Added by migration step 11 (store/migrations.py).
        id = pw.TextField(primary_key=True)  # a new_id()
        channel_id = pw.TextField()
        conversation = pw.TextField()  # the thread's root event id
        repo = pw.TextField()  # the top of the checkout it was made from
        number = pw.IntegerField()
        branch = pw.TextField()
        path = pw.TextField()
        created = pw.BigIntegerField()

        class Meta:
            table_name = "sk_worktree"
            indexes = ((("channel_id", "number"), True), (("channel_id", "conversation", "repo"), True))

    class Spend(Base):
        # What an agent (or a channel: "#" and its id) cost in a period ("day:2026-12-06",
        # "month:2026-12", UTC), as its `usage_update`s reported, and what `!budget raise` added
        # to its budget for that period (store/spend.py). Added by migration step 12 (store/migrations.py).
        agent = pw.TextField()
        period = pw.TextField()
        amount = pw.DoubleField(default=0.0)
        raised = pw.DoubleField(default=0.0)
        currency = pw.TextField(null=True)

        class Meta:
            table_name = "sk_spend"
            primary_key = pw.CompositeKey("agent", "period")

    class SessionCost(Base):
        # The last cumulative cost an agent's session reported: the next report adds only what
        # is new (store/spend.py). Added by migration step 12.
        agent = pw.TextField()
        session_id = pw.TextField()
        amount = pw.DoubleField(default=0.0)

        class Meta:
            table_name = "sk_session_cost"
            primary_key = pw.CompositeKey("agent", "session_id")

    class Schema(Base):
        # One row: the store's schema version (store/migrations.py).
        version = pw.IntegerField()

        class Meta:
            table_name = "sk_schema"
            primary_key = False

    # Parents first, so that REFERENCES finds its table.
    every = [
        Channel,
        Member,
        MemberSetting,
        ThreadSession,
        Session,
        Message,
        MessageEvent,
        Txn,
        AgentCommand,
        Value,
        Pending,
        Turn,
        Schedule,
        E2eePending,
        E2eeRoom,
        WorkDir,
        Worktree,
        Spend,
        SessionCost,
        Schema,
    ]
    models = SimpleNamespace(**{model.__name__: model for model in every}, all=every)
    assert {table_name(m) for m in every} == set(TABLES)
    return models
