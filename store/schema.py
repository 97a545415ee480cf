"""Tables, as peewee models built per database.

Models are made by a function rather than at import time so that several stores
(say SQLite and an in-memory fallback, or tests) can be open at once without
rebinding shared classes. Nothing outside the store ever sees these models.
"""

from types import SimpleNamespace

import peewee as pw

# Prefixed, so that the store can live in a database shared with other tables.
TABLES = (
    "sk_message_event",
    "sk_message",
    "sk_member",
    "sk_channel",
    "sk_txn",
    "sk_agent_command",
    "sk_value",
)


def _references(table: str) -> list[pw.SQL]:
    # Declared for integrity only: deletes are explicit, in one transaction.
    return [pw.SQL(f"REFERENCES {table} (id)")]


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

        class Meta:
            table_name = "sk_channel"

    class Member(Base):
        channel_id = pw.TextField(constraints=_references("sk_channel"))
        agent = pw.TextField(index=True)  # members_of_agent
        session_id = pw.TextField(null=True)
        fresh = pw.BooleanField(default=False)
        last_seen = pw.TextField(null=True)
        joined = pw.TextField()  # a new_id(): join order

        class Meta:
            table_name = "sk_member"
            primary_key = pw.CompositeKey("channel_id", "agent")

    class Message(Base):
        id = pw.TextField(primary_key=True)  # a new_id(): chronological
        channel_id = pw.TextField(constraints=_references("sk_channel"))
        sender = pw.TextField()
        role = pw.TextField()
        text = pw.TextField()
        # JSON list, so that reading messages is one query; MessageEvent
        # indexes the same ids for message_by_event.
        event_ids = pw.TextField(default="[]")
        created = pw.BigIntegerField()

        class Meta:
            table_name = "sk_message"
            indexes = (
                # The last n messages of a channel, and those after an id:
                # an index range read whatever the table's size.
                (("channel_id", "id"), False),
                # last_agent_sender without scanning the user's messages.
                (("channel_id", "role", "id"), False),
            )

    class MessageEvent(Base):
        # Not unique: a duplicate event id must not lose a finished message;
        # message_by_event then returns the newest.
        event_id = pw.TextField(index=True)
        message_id = pw.TextField(index=True, constraints=_references("sk_message"))

        class Meta:
            table_name = "sk_message_event"
            primary_key = False

    class Txn(Base):
        id = pw.TextField(primary_key=True)

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

    models = SimpleNamespace(
        Channel=Channel,
        Member=Member,
        Message=Message,
        MessageEvent=MessageEvent,
        Txn=Txn,
        AgentCommand=AgentCommand,
        Value=Value,
    )
    # Parents first, so that REFERENCES finds its table.
    models.all = [Channel, Member, Message, MessageEvent, Txn, AgentCommand, Value]
    assert {m._meta.table_name for m in models.all} == set(TABLES)
    return models


def create_tables(db: pw.Database, models: SimpleNamespace) -> None:
    # IF NOT EXISTS everywhere: cheap at open, even with millions of rows.
    with db.atomic():
        db.create_tables(models.all, safe=True)
