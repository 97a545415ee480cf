"""The Store: the facade the bridge holds. It opens the core (core.py: the connection, the
runner, the models, the compiled queries) and builds the parts with it; a call on the store is
a part's (docs/architecture.md "The store").

Every call is synchronous, runs as one store operation (serialised: a single connection is
shared by all threads) and returns frozen records, never database rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from .channels import Channels
from .core import Core
from .e2ee import E2ee
from .members import Members
from .messages import Messages
from .places import Places
from .schedules import Schedules
from .sessions import Sessions
from .settings import Settings
from .spend import Spending
from .turns import Turns
from .txns import Transactions
from .values import Values

T = TypeVar("T")


@dataclass(frozen=True)
class Parts:
    """Each part of the store, built with the core and the parts it calls."""

    channels: Channels
    members: Members
    messages: Messages
    txns: Transactions
    values: Values
    turns: Turns
    schedules: Schedules
    settings: Settings
    spending: Spending
    places: Places
    sessions: Sessions
    e2ee: E2ee

    @classmethod
    def build(cls, core: Core) -> Parts:
        channels = Channels(core)
        members = Members(core, channels)
        messages = Messages(core, channels)
        txns = Transactions(core)
        turns = Turns(core, txns, messages, members)
        return cls(
            channels=channels,
            members=members,
            messages=messages,
            txns=txns,
            values=Values(core),
            turns=turns,
            schedules=Schedules(core, turns),
            settings=Settings(core, members),
            spending=Spending(core),
            places=Places(core),
            sessions=Sessions(core),
            e2ee=E2ee(core),
        )


class _Call:
    """`store.<name>(…)`: the call of the same name of one part (`store.parts.<part>`); on the
    class, that part's function (for help() and inspect)."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""
        self.function: Any = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.function = getattr(get_type_hints(Parts)[self.part], name)

    def __get__(self, store: Store | None, owner: type | None = None) -> Any:
        if store is None:
            return self.function
        return getattr(getattr(store.parts, self.part), self.name)


class Store:
    """Use Store.open()."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.parts = Parts.build(core)
        # the parts with calls of their own (store/offloop.py awaits them the same way)
        self.turns = self.parts.turns
        self.schedules = self.parts.schedules
        self.settings = self.parts.settings
        self.spending = self.parts.spending
        self.places = self.parts.places
        self.sessions = self.parts.sessions
        self.e2ee = self.parts.e2ee

    @classmethod
    def open(cls, database: str, folder: str | Path | None = None) -> Store:
        return cls(Core.open(database, folder))

    def close(self) -> None:
        self.core.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def together(self, fn: Callable[[], T]) -> T:
        """`fn()`, whose store calls make one operation in one transaction: written all or
        none, with one commit (a hot path's several writes: bridge/attach/service.py)."""

        def whole() -> T:
            with self.core.db.atomic():
                return fn()

        return self.core.run(whole)

    # --- the database going away and coming back (core.py) -------------------------------------
    # Every call raises StoreUnavailable while the database cannot be used (nothing written),
    # StoreLockLost once another bridge has taken it (for good). A bridge waits like this:
    #     while not store.available(): await asyncio.sleep(store.retry_in() or 0.25)

    @property
    def in_memory(self) -> bool:
        return self.core.in_memory

    def available(self) -> bool:
        return self.core.available()

    def retry_in(self) -> float:
        return self.core.retry_in()

    @property
    def reconnects(self) -> int:
        return self.core.reconnects

    # --- processed appservice transactions (txns.py) -------------------------------------------
    txn_seen = _Call("txns")
    mark_txn = _Call("txns")
    prune_txns = _Call("txns")

    @property
    def txn_keep_ms(self) -> int:
        return self.parts.txns.keep_ms

    @txn_keep_ms.setter
    def txn_keep_ms(self, value: int) -> None:  # benchmarks and tests shorten it
        self.parts.txns.keep_ms = value

    @property
    def txn_prune_every_ms(self) -> int:
        return self.parts.txns.prune_every_ms

    @txn_prune_every_ms.setter
    def txn_prune_every_ms(self, value: int) -> None:
        self.parts.txns.prune_every_ms = value

    # --- channels (channels.py) ----------------------------------------------------------------
    create_channel = _Call("channels")
    channel_by_room = _Call("channels")
    channel = _Call("channels")
    channels = _Call("channels")
    rename_channel = _Call("channels")
    move_channel = _Call("channels")
    delete_channel = _Call("channels")

    # --- members (members.py) ------------------------------------------------------------------
    add_member = _Call("members")
    remove_member = _Call("members")
    members = _Call("members")
    member = _Call("members")
    set_session = _Call("members")
    set_fresh = _Call("members")
    set_last_seen = _Call("members")
    mark_seen = _Call("members")
    members_of_agent = _Call("members")

    # --- messages (messages.py) ----------------------------------------------------------------
    add_message = _Call("messages")
    add_event = _Call("messages")
    messages_after = _Call("messages")
    messages_in = _Call("messages")
    lead_up = _Call("messages")
    last_messages = _Call("messages")
    recent_texts = _Call("messages")
    message_by_event = _Call("messages")
    delete_message_by_event = _Call("messages")
    last_agent_sender = _Call("messages")
    count_messages = _Call("messages")
    conversations = _Call("messages")

    # --- agent commands and values (values.py) -------------------------------------------------
    set_agent_commands = _Call("values")
    agent_commands = _Call("values")
    set_value = _Call("values")
    get_value = _Call("values")
    delete_value = _Call("values")
