"""The store went away under the running bridge: transactions wait at the homeserver, a turn's
last writes wait here, and the rooms whose messages wait are told (docs/reliability.md "The database away").

Beside the store's own resilience (store/resilience.py: reconnecting, the lock taken again),
this is what the bridge does meanwhile. The dispatcher (matrix/dispatch.py) is handed it; the
turns' journal (channels/turns/journal.py) writes through `later`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import quote

from store import StoreClosed, StoreError, StoreLockLost, StoreUnavailable, StoreUnwritable, keys

from .outage_tellers import BOT, tellers

if TYPE_CHECKING:
    from store.offloop import OffLoop

    from .matrix.identities import Identities
    from .matrix.puppet import Puppet

log = logging.getLogger(__name__)

DOWN_NOTICE_AFTER = 5.0  # seconds of a database outage before the owner is told
DOWN_TEXT = (
    "⚠️ The bridge cannot reach its database right now. Your messages are not lost: the "
    "homeserver keeps them, and they are answered as soon as the database is back."
)
FULL_TEXT = (
    "⚠️ The bridge cannot write its database: the disk it is on is full. Your messages are not "
    "lost: the homeserver keeps them, and they are answered as soon as there is room again."
)
BACK_TEXT = "✅ The database is back: the messages that waited are being answered now."


class StoreOutage:
    """The store went away under the running bridge (PostgreSQL restarted, a SQLite file that
    cannot be written). Transactions are refused meanwhile, so the homeserver keeps every owner
    message (in its own store: bounded by it, nothing held here) and sends them again. This
    watches for the store to come back: then it pings the homeserver, so the refused
    transactions come at once instead of after Synapse's backoff (up to minutes). An outage
    longer than DOWN_NOTICE_AFTER is said once to the rooms whose messages wait, and its end
    too. Another bridge that took the database meanwhile stops this one (one line).

    The writes that end a turn (its message answered, its answer no longer in progress, what
    the agent has seen) are not refused like a transaction: nothing would send them again. A
    turn that ends while the database is down leaves them here (`later`), in order; they are
    written when it is back, before any transaction is handled again (`flush`)."""

    def __init__(
        self,
        db: OffLoop | None = None,
        halt: Callable[[str], None] = lambda reason: None,
        ping: Callable[[], Awaitable[None]] | None = None,
        identities: Identities | None = None,
        members_of: Callable[[str], list[str]] = lambda room_id: [],
    ):
        """`db`: the store's calls (None: no database thread, tests of this class alone);
        `halt`: stops this bridge, with the reason; `ping`: asks the homeserver for what it
        keeps; `identities`: who says the outage in the rooms; `members_of`: the agents of a
        room's open channel (none when it is not open)."""
        self.db = db
        self.halt = halt
        self.ping = ping
        self.identities = identities
        self.members_of = members_of
        self.rooms: list[str] = []  # rooms whose messages wait, in the order they came
        self.outages = 0
        self._task: asyncio.Task | None = None
        self._disk_full = False  # the last failure was a full disk (SQLite): said so
        # at most a few per turn in flight (no turn starts while the database is down)
        self._writes: deque[tuple[str, Callable[[], object]]] = deque()

    def later(self, what: str, write: Callable[[], object]) -> None:
        """Do `write` (a store call, safe to repeat) on the database thread, after every store
        call made before it; if the database is down, once it is back, after the ones left
        before it. A closed store (quitting) drops it: the next start repairs from the turn
        records."""
        self._writes.append((what, write))
        db = self.db
        if db is None:  # no database thread (tests of this class alone)
            self._flush_now(what)
            return
        done = db.thread.run(self.flush)
        done.add_done_callback(lambda future: self._flushed_later(future, what))

    def _flush_now(self, what: str) -> None:
        try:
            self.flush()
        except StoreUnavailable as exc:
            log.info("the database is unavailable: %s is written once it is back", what)
            self.hit(exc, {})

    def _flushed_later(self, future: asyncio.Future, what: str) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if isinstance(exc, StoreUnavailable):
            log.info("the database is unavailable: %s is written once it is back", what)
            self.hit(exc, {})
        elif exc is not None:
            log.error("%s not written: %s", what, exc)

    def waiting(self) -> bool:
        """Whether writes wait for the database (or are on their way to it)."""
        return bool(self._writes)

    def flush(self) -> None:
        """Write what waits, oldest first (on the database thread); StoreUnavailable (and the
        rest kept) if it is still down."""
        while self._writes:
            what, write = self._writes[0]
            try:
                write()
            except StoreUnavailable:
                raise
            except StoreError as exc:  # closed while quitting, or refused for good
                log.info("%s not written: %s", what, exc)
            self._writes.popleft()

    def hit(self, exc: BaseException, event: dict) -> None:
        if isinstance(exc, StoreLockLost):
            self.halt(f"another bridge took the database ({exc}): this one stops")
            return
        if not isinstance(exc, StoreUnavailable) or isinstance(exc, StoreClosed):
            return
        self._disk_full = isinstance(exc, StoreUnwritable) and exc.disk_full
        room_id = event.get("room_id")
        if isinstance(room_id, str) and room_id not in self.rooms and len(self.rooms) < 100:
            self.rooms.append(room_id)
        if self._task is None or self._task.done():
            self.outages += 1
            log.warning("the database is unavailable (%s): messages wait at the homeserver", exc)
            self._task = asyncio.create_task(self._watch(), name="store-outage")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        began, told = time.monotonic(), 0  # the first `told` of self.rooms (kept in order) were told
        try:
            while not (await self._back() and await self._flushed()):
                if time.monotonic() - began >= DOWN_NOTICE_AFTER and told < len(self.rooms):
                    # each waiting room once, also one whose message came after the others'
                    fresh = self.rooms[told:]
                    told += len(fresh)
                    await self._say(FULL_TEXT if self._disk_full else DOWN_TEXT, fresh)
                await asyncio.sleep(max(0.5, min(await self.db.retry_in(), 5.0)))
        except StoreLockLost as exc:
            self.halt(f"another bridge took the database ({exc}): this one stops")
            return
        except StoreClosed:
            return
        except Exception:
            log.exception("watching the database failed")
            return
        log.info("the database is back after %.1f s: asking the homeserver for what waits", time.monotonic() - began)
        await self._say(BACK_TEXT, self.rooms[:told])
        self.rooms = []
        if self.ping is not None:
            await self.ping()

    async def _back(self) -> bool:
        """Whether the store takes writes again (a reconnection is tried when one is due)."""
        store = self.db.target

        def probe() -> bool:
            if not store.available():
                return False
            try:
                store.set_value(keys.OUTAGE_PROBE, str(time.time()))  # SQLite: is it writable again?
            except StoreUnavailable:
                return False
            return True

        return await self.db.run(probe)

    async def _flushed(self) -> bool:
        try:
            await self.db.run(self.flush)
        except StoreUnavailable:
            return False
        return True

    async def _say(self, text: str, rooms: list[str]) -> None:
        """A notice in each of `rooms`, by a member of it: its own agent's puppet
        (outage_tellers.py)."""
        for room_id in rooms:
            told = False
            for sender in await self._tellers(room_id):
                try:
                    await sender.intent.send(room_id, {"msgtype": "m.notice", "body": text})
                    told = True
                    break
                except Exception as exc:  # the homeserver refused it: the next member
                    log.info("could not tell %s as %s: %s", room_id, sender.user_id, exc)
            if not told:
                log.info("could not tell %s that the database is away: no member of the bridge's in it", room_id)

    async def _tellers(self, room_id: str) -> list[Puppet]:
        """The bridge's users in `room_id` who may tell it, best first: the open channel's
        agents, else those the homeserver says are joined."""
        identities = self.identities
        if identities is None:
            return []
        config = identities.config
        puppets = {agent: config.puppet_user_id(agent) for agent in config.agents}
        names = tellers(self.members_of(room_id), None, puppets, config.bot_user_id)
        if not names:
            names = tellers([], await self._joined(room_id), puppets, config.bot_user_id)
        found = []
        for name in names:
            try:
                found.append(identities.bot if name == BOT else await identities.puppet(name))
            except Exception as exc:  # the homeserver: not that one
                log.info("could not tell %s as %s: %s", room_id, name or "the bot", exc)
        return [p for p in found if p is not None]

    async def _joined(self, room_id: str) -> set[str] | None:
        """Who is joined to `room_id`, asked as each of the bridge's users until one is in it
        (None: none of them is, or the homeserver does not say)."""
        path = f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/joined_members"
        async for user in self._askers():
            try:
                status, body = await user.intent.request("GET", path)
            except Exception:  # the homeserver: ask as the next one
                continue
            joined = body.get("joined") if status == 200 else None
            if isinstance(joined, dict):
                return set(joined)
        return None

    async def _askers(self) -> AsyncIterator[Puppet]:
        """The bot, then each configured agent's puppet."""
        identities = self.identities
        if identities is None:
            return
        if identities.bot is not None:
            yield identities.bot
        for agent in identities.config.agents:
            try:
                yield await identities.puppet(agent)
            except Exception:  # could not be registered: the next one
                continue
