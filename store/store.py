"""The Store: channels, members, finished messages and a few values.

Every method is synchronous, runs under one lock (a single connection is
shared by all threads) and returns frozen records, never database rows.
"""

import functools
import json
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import peewee as pw

from . import schema
from .connect import DB_FILE, connect
from .e2ee import E2ee
from .errors import StoreClosed, StoreError, StoreLockLost, StoreUnavailable
from .ids import new_id, now_ms
from .locks import PgAdvisoryLock
from .places import Places
from .queries import hot_queries
from .records import Channel, Member, Message
from .resilience import Reconnector, diagnose
from .schedules import Schedules
from .sessions import Sessions
from .settings import Settings
from .spend import Spending
from .turns import TERMINAL, Turns

ROLES = ("user", "agent")

# Processed transaction keys are kept this long, then pruned: a homeserver retries a transaction
# it got no answer for within minutes (Synapse backs off to 512 s at most), so days are plenty.
TXN_KEEP_MS = 7 * 24 * 3600 * 1000
TXN_PRUNE_EVERY_MS = 3600 * 1000  # mark_txn prunes at most this often


def _operation(method):
    """Serialise, refuse once closed (or once the lock is lost), and turn driver errors into
    the store's (resilience.diagnose). A lost PostgreSQL connection is got back at once and the
    call made again, once (`self._retrying` lets a write that cannot be repeated check whether
    its first try was written); while it cannot be got back, calls raise StoreUnavailable at
    once, with backoff between reconnection attempts (`retry_in`)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._mutex:
            if self._db is None:
                raise StoreClosed()
            if self._lock_lost is not None:
                raise self._lock_lost
            self._reconnect_if_lost()
            try:
                return method(self, *args, **kwargs)
            except pw.PeeweeException as exc:
                problem = diagnose(exc, self._db, method.__name__, self._path)
                if not (
                    isinstance(problem, StoreUnavailable) and problem.connection_lost and self._reconnector is not None
                ):
                    raise problem from exc
            self._reconnector.lost()
            self._reconnect_if_lost()  # at once: the server may already be back
            self._retrying = True
            try:
                return method(self, *args, **kwargs)
            except pw.PeeweeException as exc:
                problem = diagnose(exc, self._db, method.__name__, self._path)
                if isinstance(problem, StoreUnavailable) and problem.connection_lost:
                    self._reconnector.lost()
                raise problem from exc
            finally:
                self._retrying = False

    return wrapper


class Store:
    """Use Store.open(); the constructor takes an open, locked database."""

    def __init__(self, db: pw.Database, lock, in_memory: bool, path: Path | None = None) -> None:
        self._db: pw.Database | None = db
        self._lock = lock
        self._mutex = threading.RLock()
        self.in_memory = in_memory
        self._path = path  # the SQLite file, for messages
        self._lock_lost: StoreLockLost | None = None
        self._retrying = False
        self._reconnector = (
            Reconnector(db, lock, db.connect_params.get("application_name", ""))
            if isinstance(db, pw.PostgresqlDatabase)
            else None
        )
        self.txn_keep_ms = TXN_KEEP_MS  # benchmarks and tests shorten these
        self.txn_prune_every_ms = TXN_PRUNE_EVERY_MS
        self._next_prune = 0  # ms: the first mark_txn prunes (keys left by the last run)

    @classmethod
    def open(cls, database: str, folder: str | Path | None = None) -> "Store":
        db, lock = connect(database, folder)
        path = Path(folder) / DB_FILE if database == "sqlite" else None
        store = cls(db, lock, in_memory=database == ":memory:", path=path)
        try:
            store._m = schema.build(db)
            schema.create_tables(db, store._m)
            store._hot = hot_queries(db, store._m)
        except BaseException as exc:
            store.close()  # releases the lock: a failed open must not hold it
            if isinstance(exc, pw.PeeweeException):
                raise StoreError(f"cannot create the tables: {exc}") from exc
            raise
        return store

    def close(self) -> None:
        with self._mutex:
            if self._db is None:
                return
            db, self._db = self._db, None
            try:
                if isinstance(self._lock, PgAdvisoryLock):
                    self._lock.release()  # unlock while still connected
                if self._reconnector is not None:
                    self._reconnector._drop()  # whatever state a lost connection left
                else:
                    db.close()
            finally:
                if self._lock is not None:
                    self._lock.release()  # a file lock: only once the database is closed

    @cached_property
    def settings(self) -> Settings:
        """Each member's session settings (store/settings.py)."""
        return Settings(self)

    @cached_property
    def turns(self) -> Turns:
        """The turn records (store/turns.py)."""
        return Turns(self)

    @cached_property
    def schedules(self) -> Schedules:
        """Work agents scheduled for later (store/schedules.py)."""
        return Schedules(self)

    @cached_property
    def spending(self) -> Spending:
        """What agents cost per period, for their budgets (store/spend.py)."""
        return Spending(self)

    @cached_property
    def places(self) -> Places:
        """Where agents work: `!cwd` folders, the threads' worktrees (store/places.py)."""
        return Places(self)

    @cached_property
    def sessions(self) -> Sessions:
        """The bridge's record of each member's sessions per conversation (store/sessions.py)."""
        return Sessions(self)

    @cached_property
    def e2ee(self) -> E2ee:
        """What the bridge's encryption keeps: events waiting for a key, encrypted rooms (store/e2ee.py)."""
        return E2ee(self)

    def _run(self, operation, *args, **kwargs):
        """Run `operation(self, ...)` as a store operation: for the store's other modules."""
        return _operation(operation)(self, *args, **kwargs)

    # --- the database going away and coming back -----------------------------
    # Every call raises StoreUnavailable while the database cannot be used (nothing written),
    # StoreLockLost once another bridge has taken it (for good). A bridge waits like this:
    #     while not store.available(): await asyncio.sleep(store.retry_in() or 0.25)

    def _reconnect_if_lost(self) -> None:
        if self._reconnector is None or not self._reconnector.broken:
            return
        try:
            self._reconnector.reconnect()
        except StoreLockLost as exc:
            self._lock_lost = exc
            raise

    def retry_in(self) -> float:
        """Seconds until the next reconnection attempt is due (0: connected, or due now)."""
        with self._mutex:
            if self._db is None:
                raise StoreClosed()
            return self._reconnector.retry_in() if self._reconnector is not None else 0.0

    def available(self) -> bool:
        """Whether the database can be used now; tries to reconnect when an attempt is due.
        Raises StoreLockLost once another bridge has taken it, StoreClosed once closed.
        SQLite has no connection to lose: this is always True there, and a StoreUnwritable
        write (disk full, read-only) is simply tried again later, at the caller's pace."""
        with self._mutex:
            if self._db is None:
                raise StoreClosed()
            if self._lock_lost is not None:
                raise self._lock_lost
            try:
                self._reconnect_if_lost()
            except StoreUnavailable:
                return False
            return True

    @property
    def reconnects(self) -> int:
        """How many times a lost connection was got back (for figures and logs)."""
        return self._reconnector.reconnects if self._reconnector is not None else 0

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- processed appservice transactions -------------------------------

    @_operation
    def txn_seen(self, txn_id: str) -> bool:
        return bool(self._hot.txn_seen.rows(id=txn_id))

    @_operation
    def mark_txn(self, txn_id: str) -> None:
        self._mark_txn(txn_id)

    def _mark_txn(self, txn_id: str) -> None:
        """Record a key as handled; every `txn_prune_every_ms`, prune the old ones (whichever
        write records keys: the dispatcher's, or an owner message's taken with its turns)."""
        now = now_ms()
        self._hot.mark_txn.run(id=txn_id, seen=now)
        if now >= self._next_prune:
            self._prune_txns(now)

    @_operation
    def prune_txns(self) -> int:
        """Forget the transaction keys older than `txn_keep_ms`; how many went."""
        return self._prune_txns(now_ms())

    def _prune_txns(self, now: int) -> int:
        """Transaction keys, and the records of turns over, older than `txn_keep_ms`."""
        self._next_prune = now + self.txn_prune_every_ms
        T = self._m.Turn
        T.delete().where(T.state.in_(TERMINAL) & (T.updated < now - self.txn_keep_ms)).execute()
        return self._hot.prune_txns.run(before=now - self.txn_keep_ms).rowcount

    # --- channels ----------------------------------------------------------

    def _channels(self, where=None) -> list[Channel]:
        C = self._m.Channel
        query = C.select(C.id, C.room_id, C.name, C.direct_agent, C.created)
        if where is not None:
            query = query.where(where)
        return [Channel(*row) for row in query.order_by(C.id).tuples()]

    @_operation
    def create_channel(self, room_id: str, name: str, direct_agent: str | None = None) -> Channel:
        C = self._m.Channel
        existing = self._channels(C.room_id == room_id)
        if existing and self._retrying:
            return existing[0]  # the first try was written before the connection went
        if existing:
            raise ValueError(f"room {room_id} already has a channel")
        channel = Channel(new_id(), room_id, name, direct_agent, now_ms())
        C.insert(
            id=channel.id, room_id=room_id, name=name, direct_agent=direct_agent, created=channel.created
        ).execute()
        return channel

    @_operation
    def channel_by_room(self, room_id: str) -> Channel | None:
        found = self._channels(self._m.Channel.room_id == room_id)
        return found[0] if found else None

    @_operation
    def channel(self, channel_id: str) -> Channel | None:
        found = self._channels(self._m.Channel.id == channel_id)
        return found[0] if found else None

    @_operation
    def channels(self) -> list[Channel]:
        return self._channels()

    @_operation
    def rename_channel(self, channel_id: str, name: str) -> None:
        C = self._m.Channel
        C.update(name=name).where(C.id == channel_id).execute()

    @_operation
    def move_channel(self, channel_id: str, room_id: str) -> Channel:
        """The channel now lives in `room_id` (its room was upgraded: m.room.tombstone). Its
        members, sessions, history and settings hang on its id and go with it. A channel already
        in `room_id` without history (an invite came before the tombstone) makes way; one with
        history raises ValueError."""
        m = self._m
        with self._db.atomic():
            self._require_channel(channel_id)
            for other in self._channels(m.Channel.room_id == room_id):
                if other.id == channel_id:
                    continue
                if m.Message.select().where(m.Message.channel_id == other.id).exists():
                    raise ValueError(f"room {room_id} already has a channel with history")
                m.Member.delete().where(m.Member.channel_id == other.id).execute()
                m.ThreadSession.delete().where(m.ThreadSession.channel_id == other.id).execute()
                m.Session.delete().where(m.Session.channel_id == other.id).execute()
                m.Turn.delete().where(m.Turn.channel_id == other.id).execute()
                m.Channel.delete().where(m.Channel.id == other.id).execute()
            m.Channel.update(room_id=room_id).where(m.Channel.id == channel_id).execute()
            return self._channels(m.Channel.id == channel_id)[0]

    @_operation
    def delete_channel(self, channel_id: str) -> None:
        m = self._m
        with self._db.atomic():
            m.MessageEvent.delete().where(m.MessageEvent.channel_id == channel_id).execute()
            m.Message.delete().where(m.Message.channel_id == channel_id).execute()
            m.Member.delete().where(m.Member.channel_id == channel_id).execute()
            m.ThreadSession.delete().where(m.ThreadSession.channel_id == channel_id).execute()
            m.Session.delete().where(m.Session.channel_id == channel_id).execute()
            m.Turn.delete().where(m.Turn.channel_id == channel_id).execute()
            m.Schedule.delete().where(m.Schedule.channel_id == channel_id).execute()
            m.WorkDir.delete().where(m.WorkDir.channel_id == channel_id).execute()
            m.Worktree.delete().where(m.Worktree.channel_id == channel_id).execute()
            m.Channel.delete().where(m.Channel.id == channel_id).execute()

    def _require_channel(self, channel_id: str) -> None:
        if not self._hot.channel_exists.rows(id=channel_id):
            raise LookupError(f"no channel {channel_id}")

    # --- members -----------------------------------------------------------

    def _members(self, where) -> list[Member]:
        M = self._m.Member
        query = M.select(M.channel_id, M.agent, M.session_id, M.fresh, M.last_seen, M.session_cwd).where(where)
        return self._to_members(query.order_by(M.joined).tuples())

    @staticmethod
    def _to_members(rows: list[tuple]) -> list[Member]:
        return [
            Member(channel_id, agent, session_id, bool(fresh), last_seen, session_cwd)
            for channel_id, agent, session_id, fresh, last_seen, session_cwd in rows
        ]

    def _one_member(self, channel_id: str, agent: str, conversation: str = "") -> Member | None:
        found = self._to_members(self._hot.member.rows(channel_id=channel_id, agent=agent))
        if not found or not conversation:
            return found[0] if found else None
        # a member's session in a thread: its own row, none before its first turn there
        rows = self._hot.thread_member.rows(channel_id=channel_id, agent=agent, conversation=conversation)
        session_id, fresh, last_seen, cwd = rows[0] if rows else (None, False, None, None)
        return Member(channel_id, agent, session_id, bool(fresh), last_seen, cwd, conversation)

    def _update_member(self, channel_id: str, agent: str, **values) -> None:
        # A member removed meanwhile (an answer ending late) is not an error.
        M = self._m.Member
        M.update(**values).where((M.channel_id == channel_id) & (M.agent == agent)).execute()

    @_operation
    def add_member(self, channel_id: str, agent: str) -> Member:
        with self._db.atomic():
            self._require_channel(channel_id)
            M = self._m.Member
            M.insert(channel_id=channel_id, agent=agent, fresh=False, joined=new_id()).on_conflict_ignore().execute()
            return self._one_member(channel_id, agent)

    @_operation
    def remove_member(self, channel_id: str, agent: str) -> None:
        M, S = self._m.Member, self._m.ThreadSession
        with self._db.atomic():
            S.delete().where((S.channel_id == channel_id) & (S.agent == agent)).execute()
            R = self._m.Session
            R.delete().where((R.channel_id == channel_id) & (R.agent == agent)).execute()
            M.delete().where((M.channel_id == channel_id) & (M.agent == agent)).execute()

    @_operation
    def members(self, channel_id: str) -> list[Member]:
        return self._to_members(self._hot.members.rows(channel_id=channel_id))

    @_operation
    def member(self, channel_id: str, agent: str, conversation: str = "") -> Member | None:
        """The member, with its session in `conversation` ("" the main timeline, else a thread:
        no session, not fresh, nothing seen before its first turn there). None if not a member."""
        return self._one_member(channel_id, agent, conversation)

    @_operation
    def set_session(
        self,
        channel_id: str,
        agent: str,
        session_id: str | None,
        fresh: bool,
        cwd: str | None = None,
        conversation: str = "",
    ) -> None:
        """The member's session in `conversation` (None: none), and the working directory it was
        opened in."""
        if not conversation:
            self._update_member(channel_id, agent, session_id=session_id, fresh=bool(fresh), session_cwd=cwd)
            return
        S = self._m.ThreadSession
        S.insert(
            channel_id=channel_id,
            agent=agent,
            conversation=conversation,
            session_id=session_id,
            fresh=bool(fresh),
            session_cwd=cwd,
            updated=now_ms(),
        ).on_conflict(
            conflict_target=[S.channel_id, S.agent, S.conversation],
            update={S.session_id: session_id, S.fresh: bool(fresh), S.session_cwd: cwd, S.updated: now_ms()},
        ).execute()

    @_operation
    def set_fresh(self, channel_id: str, agent: str, fresh: bool) -> None:
        self._update_member(channel_id, agent, fresh=bool(fresh))

    @_operation
    def set_last_seen(self, channel_id: str, agent: str, message_id: str) -> None:
        self._update_member(channel_id, agent, last_seen=message_id)

    @_operation
    def mark_seen(self, channel_id: str, agent: str, message_id: str, conversation: str = "") -> None:
        """After a turn: seen up to `message_id` in `conversation`, and its session is no longer fresh."""
        self._mark_seen(channel_id, agent, message_id, conversation)

    def _mark_seen(self, channel_id: str, agent: str, message_id: str, conversation: str = "") -> None:
        """mark_seen, inside an operation (store/turns.py, with a turn's end)."""
        if not conversation:
            self._hot.mark_seen.run(channel_id=channel_id, agent=agent, last_seen=message_id)
            return
        S = self._m.ThreadSession
        S.update(last_seen=message_id, fresh=False, updated=now_ms()).where(
            (S.channel_id == channel_id) & (S.agent == agent) & (S.conversation == conversation)
        ).execute()

    @_operation
    def members_of_agent(self, agent: str) -> list[Member]:
        return self._members(self._m.Member.agent == agent)

    # --- messages ------------------------------------------------------------

    @staticmethod
    def _to_messages(rows: list[tuple]) -> list[Message]:
        # Rows come newest first; callers want chronological order.
        found = [
            Message(id, channel_id, sender, role, text, tuple(json.loads(event_ids)), created, conversation or "")
            for id, channel_id, sender, role, text, event_ids, created, conversation in rows
        ]
        found.reverse()
        return found

    @_operation
    def add_message(
        self,
        channel_id: str,
        sender: str,
        role: str,
        text: str,
        event_ids: Sequence[str] = (),
        conversation: str = "",
    ) -> Message:
        return self._add_message(channel_id, sender, role, text, event_ids, conversation)

    def _add_message(
        self, channel_id: str, sender: str, role: str, text: str, event_ids: Sequence[str], conversation: str = ""
    ) -> Message:
        """add_message, inside an operation (store/turns.py stores a message with its turn)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        if isinstance(event_ids, str):
            raise TypeError("event_ids must be a sequence of event ids, not one string")
        hot = self._hot
        if self._retrying and event_ids:
            # the first try may have been written before the connection went: not twice
            for found in self._to_messages(hot.by_event.rows(event_id=event_ids[0])):
                if found.channel_id == channel_id and found.text == text and found.role == role:
                    return found
        message = Message(new_id(), channel_id, sender, role, text, tuple(event_ids), now_ms(), conversation)
        with self._db.atomic():
            self._require_channel(channel_id)
            hot.insert_message.run(
                id=message.id,
                channel_id=channel_id,
                sender=sender,
                role=role,
                text=text,
                event_ids=json.dumps(message.event_ids),
                created=message.created,
                conversation=conversation,
            )
            for event_id in message.event_ids:
                hot.insert_event.run(event_id=event_id, channel_id=channel_id, message_id=message.id)
            if role == "agent" and not conversation:  # the main timeline's last speaker
                hot.set_last_agent.run(id=channel_id, agent=sender)
        return message

    @_operation
    def messages_after(self, channel_id: str, after_id: str | None, limit: int) -> list[Message]:
        if limit <= 0:
            return []
        if after_id is None:
            return self._to_messages(self._hot.last.rows(channel_id=channel_id, limit=limit))
        return self._to_messages(self._hot.after.rows(channel_id=channel_id, after=after_id, limit=limit))

    @_operation
    def messages_in(self, channel_id: str, conversation: str, after_id: str | None, limit: int) -> list[Message]:
        """The last `limit` messages of one conversation after `after_id` (None: from the
        start), oldest first: the main timeline's (no thread's), or a thread's — its root (a
        main-timeline message) first, then its own; no main-timeline message after the root."""
        if limit <= 0:
            return []
        hot = self._hot
        if after_id is None:
            rows = hot.conv_last.rows(channel_id=channel_id, conversation=conversation, limit=limit)
        else:
            rows = hot.conv_after.rows(channel_id=channel_id, conversation=conversation, after=after_id, limit=limit)
        found = self._to_messages(rows)
        if conversation:
            root = self._thread_root(channel_id, conversation)
            if root is not None and (after_id is None or root.id > after_id):
                found = [root, *found][-limit:]
        return found

    def _thread_root(self, channel_id: str, conversation: str) -> Message | None:
        """The stored message a thread hangs on (None: not stored, or of another channel)."""
        found = self._to_messages(self._hot.by_event.rows(event_id=conversation))
        return found[0] if found and found[0].channel_id == channel_id else None

    @_operation
    def last_messages(self, channel_id: str, limit: int) -> list[Message]:
        if limit <= 0:
            return []
        return self._to_messages(self._hot.last.rows(channel_id=channel_id, limit=limit))

    @_operation
    def message_by_event(self, event_id: str) -> Message | None:
        found = self._to_messages(self._hot.by_event.rows(event_id=event_id))
        return found[0] if found else None

    @_operation
    def delete_message_by_event(self, event_id: str) -> bool:
        """Forget the message carried by `event_id` (all its events); False if none is."""
        found = self._to_messages(self._hot.by_event.rows(event_id=event_id))
        if not found:
            return False
        message, m = found[0], self._m
        with self._db.atomic():
            E = m.MessageEvent
            E.delete().where((E.channel_id == message.channel_id) & (E.message_id == message.id)).execute()
            M = m.Message
            M.delete().where((M.channel_id == message.channel_id) & (M.id == message.id)).execute()
        return True

    @_operation
    def last_agent_sender(self, channel_id: str, conversation: str = "") -> str | None:
        """The agent of the newest stored answer in `conversation`; in a thread with none yet,
        the agent whose message is its root (the owner answered it in a thread)."""
        if not conversation:
            rows = self._hot.last_agent_sender.rows(id=channel_id)
            return rows[0][0] if rows else None
        rows = self._hot.conv_last_agent.rows(channel_id=channel_id, conversation=conversation, role="agent")
        if rows:
            return rows[0][0]
        root = self._thread_root(channel_id, conversation)
        return root.sender if root is not None and root.role == "agent" else None

    @_operation
    def count_messages(self, channel_id: str | None = None) -> int:
        M = self._m.Message
        query = M.select()
        if channel_id is not None:
            query = query.where(M.channel_id == channel_id)
        return query.count()

    # --- agent commands and values ------------------------------------------

    @_operation
    def set_agent_commands(self, agent: str, commands: list[dict]) -> None:
        A = self._m.AgentCommand
        A.insert(agent=agent, commands=json.dumps(list(commands))).on_conflict(
            conflict_target=[A.agent], preserve=[A.commands]
        ).execute()

    @_operation
    def agent_commands(self, agent: str) -> list[dict] | None:
        A = self._m.AgentCommand
        row = A.select(A.commands).where(A.agent == agent).tuples().first()
        return json.loads(row[0]) if row else None

    @_operation
    def set_value(self, key: str, value: str) -> None:
        V = self._m.Value
        V.insert(key=key, value=value).on_conflict(conflict_target=[V.key], preserve=[V.value]).execute()

    @_operation
    def get_value(self, key: str) -> str | None:
        rows = self._hot.get_value.rows(key=key)
        return rows[0][0] if rows else None

    @_operation
    def delete_value(self, key: str) -> None:
        V = self._m.Value
        V.delete().where(V.key == key).execute()
