"""The bridge: life cycle (start, recovery, ping, stop) and wiring of its parts.

It builds each part and hands it what it needs (the store's calls, the config, the pool, the
identities, the open channels…); no part is handed the bridge, and only the command line imports
this module (pyproject.toml's import rules). Flow is one way: bridge → acp (agents), store
(history), config. Every incoming event passes the dispatcher (dispatch.py), every outgoing one
the Intent of a puppet or of the bot (intent.py). Events of one transaction are handled in
order; answering happens in each portal's own task so a transaction is acknowledged quickly.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable

import aiohttp

from acp import CODING_CLIENT_CAPABILITIES, Pool
from config import Config
from config.registration import Registration
from store import Channel, Store, keys, new_id
from store.offloop import OffLoop

from . import agent_specs
from .attach.server import AttachServer
from .attach.service import AttachService
from .channels.asks.permissions import Permissions
from .channels.base.notices import Notices
from .channels.base.parts import ChannelParts, RoomParts
from .channels.base.registry import Channels
from .channels.commands.budgets import COMMANDS as BUDGET_COMMANDS
from .channels.commands.budgets import Budgets
from .channels.commands.commands import BotCommands
from .channels.events.inbound import Inbound
from .channels.recovery.recovery import Recovery
from .channels.rules.command_parse import SESSION_COMMANDS
from .channels.schedules.scheduler import Scheduler
from .channels.turns import prepare
from .channels.turns.portal import Portal
from .channels.turns.sessions import SessionCommands
from .coding import render as coding_render
from .coding.questions import Questions
from .coding.settings import COMMANDS as SETTINGS_COMMANDS
from .coding.settings import SessionSettings
from .coding.work import Work
from .coding.workplaces import COMMANDS as PLACE_COMMANDS
from .coding.workplaces import WorkPlaces
from .matrix import avatars, left_behind
from .matrix.appservice import AppserviceServer, Transaction, TransactionOrder, TransactionRefused
from .matrix.identities import Identities
from .matrix.intent import Outgoing
from .matrix.msc4391 import CommandDescriptions
from .matrix.presence import Presence
from .matrix.puppet import Puppet
from .matrix.quiet import Quiet
from .matrix.reachability import Reachability
from .mcp.actions import Means
from .mcp.service import McpService
from .outage import StoreOutage
from .roster import Roster
from .voice.spoken import COMMANDS as VOICE_COMMANDS
from .voice.spoken import VoiceCommand

log = logging.getLogger(__name__)

STORE_CLOSE_WAIT = 10  # seconds a stop waits for the database's last writes
STOP_STEP_WAIT = 30  # seconds each other step of a clean stop may take before the stop goes on
# seconds after refusing a transaction for a gap before each ping, until a transaction comes
# (the first as soon as the homeserver has its answer; later ones in case it had not started its
# recovery yet, or its own retry never fires — seen with Synapse 1.163 after a restart)
GAP_RETRY_AFTER = (0.05, 0.5, 2.0, 5.0, 10.0, 20.0, 40.0)
# seconds before the homeserver's first failed request from which its channels' messages are read
# back once it answers again (it may have taken a message and not handed it on before it went)
CATCH_UP_BEFORE = 120.0


def freeze_startup_objects() -> None:
    """What the start made (modules, classes, the config, the devices) lives as long as the
    bridge: it is moved out of the garbage collector's walks (gc.freeze), so a full collection
    walks only what came after — on this project's machine ~50 ms less of a stalled event loop
    each time one runs (tests/unit/bridge/test_fuzz_hostile.py measures the loop)."""
    gc.collect()
    gc.freeze()


async def stop_step(what: str, step: Awaitable[object]) -> None:
    """One step of the clean stop, given STOP_STEP_WAIT seconds: a step that hangs (a homeserver
    that does not answer, an agent that does not end) is left, said in the log, and the stop goes
    on."""
    try:
        await asyncio.wait_for(step, STOP_STEP_WAIT)
    except TimeoutError:
        log.warning("stopping: %s took more than %d s; going on without them", what, STOP_STEP_WAIT)


class Bridge:
    def __init__(self, config: Config, registration: Registration, store: Store, history_unavailable: bool = False):
        self.config, self.registration, self.store = config, registration, store
        self.history_unavailable = history_unavailable
        # the store's calls from the event loop, awaited on one database thread (store/offloop.py)
        self.db = OffLoop(store)
        # this run's id: every turn it takes or claims is marked with it (store/turns.py)
        self.run_id = new_id()
        self._life_cycle()
        # the parts, in the order of the pipeline, each handed what it needs (nothing imports
        # this module back; docs/architecture.md "Design notes")
        self._build_agents()
        self._build_way_out()
        self._build_channels()
        self._build_way_in()

    def _life_cycle(self) -> None:
        """What start, stop and halt share."""
        self.halted = asyncio.Event()  # set (with halt_reason) when this bridge must stop
        self.halt_reason = ""
        # set as stop() begins: no turn starts from then on — a message taken meanwhile (the
        # appservice still answers while answers finish) is run by the next start (recovery)
        self.stopping = asyncio.Event()
        self.recovered = asyncio.Event()  # set once the turns earlier runs left are queued
        self._gap_pings: set[asyncio.Task] = set()
        self._read_back_at: dict[str, float] = {}  # room → when it was last read back for a gap
        self._catching_up: set[asyncio.Task] = set()
        self._watching: asyncio.Future | None = None  # the homeserver asked when idle (reachability.py)
        # rooms read back while the homeserver is quiet after activity (matrix/quiet.py)
        self.quiet = Quiet()
        self._quiet_news = asyncio.Event()  # a transaction came: the quiet watch looks again
        self._watching_quiet: asyncio.Future | None = None

    def _build_agents(self) -> None:
        """The agents: how each starts, in its sandbox (agent_specs.py; the MCP socket added at
        start), their processes (acp), the names each is called by."""
        config = self.config
        self.specs = agent_specs.specs(config)
        self.pool = Pool(
            self.specs,
            agents_in_memory=config.agents_in_memory,
            on_commands=self._on_commands,
            on_stopped=self._on_stopped,
            client_capabilities=CODING_CLIENT_CAPABILITIES,
            on_state=self._on_state,
        )
        self.aliases = {alias: name for name in config.agents for alias in (name, f"{config.puppet_prefix}{name}")}

    def _build_way_out(self) -> None:
        """Who the bridge sends as and how events leave (bridge/matrix/intent.py): as they are,
        or, with `encryption: on`, encrypted by a device per identity (bridge/e2ee)."""
        config, token = self.config, self.registration.as_token
        self.e2ee = None
        self.outgoing = Outgoing()
        if config.encryption:
            from .e2ee.crypto import E2EE

            self.e2ee = E2EE(config, self.db, token)
            self.outgoing = self.e2ee.outgoing
        self.identities = Identities(config, token, self.outgoing)  # the bot and the puppets
        self.notices = Notices(self.identities)  # what the bridge says in rooms
        self.presence = Presence(self.identities)  # online while running
        self.command_descriptions = CommandDescriptions(self.db, config, self.identities)  # MSC4391

    def _build_channels(self) -> None:
        """The open channels and the parts their portals and commands work with."""
        config, db, pool, aliases = self.config, self.db, self.pool, self.aliases
        identities, notices = self.identities, self.notices
        # the open channels, the turns between them (channels/base/registry.py). The one part
        # wired late: a portal is made with `self.parts`, which hold parts that look portals up
        # in these channels (docs/architecture.md "Design notes")
        self.channels: Channels[Portal] = Channels(db, self._open_portal)
        channels = self.channels
        self.rooms = rooms = RoomParts(config, db, channels, identities, notices)  # what a part in rooms works with
        # asks the owner; a request shown as coding/render.py draws it
        self.permissions = Permissions(config, channels, identities, notices, coding_render.permission)
        self.questions = Questions(config, notices)  # agents' elicitations (coding/questions.py)
        self.settings = SessionSettings(rooms, pool, aliases)  # modes, models, options, usage
        self.budgets = Budgets(config, db, channels, notices, aliases)  # what agents cost, !budget
        self.places = WorkPlaces(rooms, aliases)  # where each conversation's agent works: !cwd, worktrees
        self.recovery = Recovery(db, config, channels, identities, self.run_id)
        self.scheduler = Scheduler(db, channels, identities, self.run_id)  # scheduled work
        # the agents' `matrix` MCP server (bridge/mcp)
        self.mcp = McpService(config, db, channels, Means(db, config, identities, self.scheduler.changed, channels))
        self.sessions = SessionCommands()  # !sessions, !resume, !reset, !fork (channels/turns/sessions.py)
        self.roster = Roster(  # agents added and removed while running: !agents add | remove
            config,
            self.specs,
            pool,
            aliases,
            identities,
            (db, channels, notices),
            lambda: self.mcp.path,
            self.e2ee.add if self.e2ee is not None else None,
        )
        self.commands = self._bot_commands(rooms)
        # while the store is away; a room is told by its own agents (the open channels' members)
        self.outage = StoreOutage(db, self.halt, self.ping, identities, self._members_of)
        # ACP clients attached to conversations through `sidekicks acp` (bridge/attach)
        self.attach = AttachService(config, db, channels, identities)
        self.attach.direct_channel = self.commands.direct_channel  # a new session's DM, as `!dm` makes it
        self.attach_server = AttachServer(config.data_dir, self.attach)
        self.parts = self._channel_parts()

    def _bot_commands(self, rooms: RoomParts) -> BotCommands:
        """The bot's commands, and the channel commands of the parts `_build_channels` made."""
        db, notices = self.db, self.notices
        return BotCommands(
            rooms,
            self.pool,
            self.command_descriptions,
            self.scheduler,
            {
                **{name: self.settings.command for name in SETTINGS_COMMANDS},
                **{name: self.places.command for name in PLACE_COMMANDS},
                **{name: self.sessions.command for name in SESSION_COMMANDS},
                **{name: VoiceCommand(db, notices).command for name in VOICE_COMMANDS},
                **{name: self.budgets.command for name in BUDGET_COMMANDS},
            },
            self.aliases,
            self.mcp.forget_channel,
            self.roster,
        )

    def _channel_parts(self) -> ChannelParts:
        """What a portal and its turns work with (channels/base/parts.py)."""
        config, db, pool, aliases = self.config, self.db, self.pool, self.aliases
        return ChannelParts(
            config=config,
            db=db,
            pool=pool,
            channels=self.channels,
            identities=self.identities,
            notices=self.notices,
            presence=self.presence,
            descriptions=self.command_descriptions,
            permissions=self.permissions,
            questions=self.questions,
            settings=self.settings,
            scheduler=self.scheduler,
            later=self.outage.later,
            mcp_servers=self.mcp.servers_for,
            tell_owners=self.commands.tell_owners,
            work=Work,
            stop_line=coding_render.stop_reason,
            run_id=self.run_id,
            recovered=self.recovered,
            stopping=self.stopping,
            aliases=aliases,
            places=self.places,
            budgets=self.budgets,
            attached=self.attach.hub,
        )

    def _build_way_in(self) -> None:
        """Every incoming event: the appservice (matrix/appservice.py) hands each transaction to
        the dispatcher Inbound makes (channels/events/inbound.py), which reads encrypted rooms
        through the e2ee seam; the homeserver away and back is watched (matrix/reachability.py)."""
        db, store, channels = self.db, self.store, self.channels
        encryption = None  # rooms that cannot be read, said once (matrix/dispatch.py `Encryption`)
        if self.e2ee is not None:
            from .e2ee.crypto import Decrypting

            encryption = Decrypting(self.e2ee, channels, self.identities, self.notices)
        self.inbound = Inbound(
            self.rooms,
            self.commands,
            self.permissions,
            self.questions,
            self.command_descriptions,
            self.outage,
            encryption,
            redacted=self.places.redacted,  # a deleted thread's worktrees
        )
        self.dispatcher = self.inbound.dispatcher
        self.server = AppserviceServer(
            self.registration.hs_token,
            self._transaction,
            self.handle_user_query,
            db.txn_seen,
            db.mark_txn,
            self.dispatcher.refused,
            TransactionOrder(
                lambda: store.get_value(keys.TRANSACTION_ORDER),
                lambda value: db.soon(
                    "the last transaction number", lambda: store.set_value(keys.TRANSACTION_ORDER, value)
                ),
            ),
            on_gap=self._retry_soon,
            on_sender_gone=self._sender_gone,
            on_gap_passed=self._read_back_before,
        )
        # the homeserver answers again after failing: what it may have lost is read back
        self.reachability = Reachability(self._back)

    def _on_state(self, *args) -> None:
        """A session's state changed (the Pool's callback): its settings, usage and title
        (coding/settings.py), and what it cost (channels/commands/budgets.py)."""
        self.settings.on_state(*args)
        self.budgets.on_state(*args)

    # ---- life cycle -------------------------------------------------------------------------

    async def start(self, progress=lambda text: None) -> None:
        # the HTTP session (watched: the homeserver away and back, matrix/reachability.py), and the bot
        session = aiohttp.ClientSession(trace_configs=[self.reachability.trace_config()])
        bot = self.identities.open(session)
        # an idle bridge asks the homeserver now and then: one gone meanwhile is noticed
        self._watching = asyncio.ensure_future(
            self.reachability.watch(session, self.config.homeserver_url, self.registration.as_token)
        )
        self._watching_quiet = asyncio.ensure_future(self._watch_quiet())
        await self.server.start(self.config.listen_host, self.config.listen_port)
        progress(f"appservice listening on {self.config.appservice_url}")
        await self._wait_for_homeserver(progress)
        await bot.ensure_registered()
        for name in self.config.agents:
            await self.identities.puppet(name)
        # their avatars, beside the start: uploaded once, kept in the store (matrix/avatars.py)
        pictures = {name: agent.avatar for name, agent in self.config.agents.items() if agent.avatar}
        self.commands.tasks.start(avatars.ensure(self.identities.everyone(), self.db, pictures), "avatars")
        if self.e2ee is not None:
            progress("encryption: a device for each agent and the bot")
            renewed = await self.e2ee.start(
                [identity.user_id for identity in self.identities.everyone()], self.dispatcher
            )
            if renewed:
                from .e2ee.crypto import RENEWED

                try:
                    await self.commands.tell_owners(RENEWED)
                except Exception:
                    log.exception("could not tell the owners that the devices are new")
        self.presence.start()
        await self.mcp.start()
        agent_specs.reach_socket(self.specs, self.mcp.path, self.mcp.http_url)
        if self.history_unavailable:
            await self._say_history_unavailable(progress)
        # the quotes of client prompts an earlier run took and may not have shown: before their answers
        await self.attach.post_pending()
        # the turns earlier runs left: queued before any portal starts, so they go first
        recovered = await self.recovery.start()
        self.recovered.set()
        self.scheduler.start()  # after recovery: a run an earlier run took goes first, once
        # ACP clients (after recovery: a client's prompt an earlier run wrote down is taken once)
        await self.attach_server.start()
        await self.attach.take_pending()
        if recovered.interrupted:
            progress(f"{recovered.interrupted} answer(s) cut by the last stop marked as interrupted")
        if recovered.refinished:
            progress(f"{recovered.refinished} answer(s) the last stop cut while sending their final text: finished")
        if recovered.rerun:
            progress(f"{recovered.rerun} answer(s) the last stop left before they began: answering now")
        await self._ping()
        freeze_startup_objects()
        progress("bridge ready")

    async def _say_history_unavailable(self, progress) -> None:
        """Another bridge holds the database: this run keeps its history in memory
        (docs/architecture.md "The store")."""
        text = (
            "⚠️ History is unavailable: the database of this config is used by another running "
            "bridge, so this bridge keeps channels and messages in memory only, and forgets them "
            "when it stops. Stop the other bridge, then restart this one to get the history back."
        )
        log.warning("the database is used by another running bridge: history is unavailable this time")
        progress("history unavailable: the database is used by another running bridge")
        try:
            await self.commands.tell_owners(text)
        except Exception:
            log.exception("could not tell the owners that history is unavailable")

    async def stop(self) -> None:
        """The clean stop: each step bounded (STOP_STEP_WAIT, the one that overran logged), the
        store closed last, after every write queued before it."""
        self.stopping.set()
        await stop_step("the attached clients", self.attach_server.stop())  # they see their agent end
        workers = [w for p in self.channels.portals.values() for w in p.workers()]
        for worker in workers:
            worker.cancel()
        try:
            await stop_step("the scheduler", self.scheduler.stop())
            if workers:  # each cut answer is edited to say so and stays unstored (turns.py)
                await stop_step("the cut answers", asyncio.gather(*workers, return_exceptions=True))
            for what, closing in (
                ("the outage watch", self.outage.close),
                ("the command descriptions", self.command_descriptions.close),
                ("the session settings", self.settings.close),
                ("the budgets", self.budgets.tasks.close),
                ("the URL questions", self.questions.close),
                ("the work places", self.places.close),
                ("the presence", self.presence.stop),
            ):
                await stop_step(what, closing())
            later = [
                *self.commands.tasks,
                *self.channels.courtesy_tasks(),
                *self._gap_pings,
                *self._catching_up,
                *prepare.pending(),
                *([self._watching] if self._watching else []),
                *([self._watching_quiet] if self._watching_quiet else []),
            ]  # replies, receipts on their way
            for task in later:
                task.cancel()
            await stop_step("the replies on their way", asyncio.gather(*later, return_exceptions=True))
            await stop_step("the agents", self.pool.close())
            await stop_step("the MCP server", self.mcp.stop())
            await stop_step("the appservice listener", self.server.stop())
            if self.e2ee is not None:
                await stop_step("the encryption", self.e2ee.stop())
            if self.session is not None:
                await stop_step("the HTTP session", self.session.close())
        finally:
            await self._close_store()

    async def _close_store(self) -> None:
        # after every write queued before it (the turns' last ones); a database that hangs
        # does not hold the stop (the thread is a daemon)
        try:
            await asyncio.wait_for(self.db.run(self.store.close), STORE_CLOSE_WAIT)
        except TimeoutError:
            log.warning("the database did not answer within %d s: stopping without closing it", STORE_CLOSE_WAIT)
        except Exception:
            log.exception("closing the store failed")
        self.db.thread.close()  # from now on every store call raises StoreClosed

    async def _wait_for_homeserver(self, progress) -> None:
        delay, said = 0.5, False
        url = f"{self.config.homeserver_url}/_matrix/client/versions"
        while True:
            try:
                async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                    if response.status == 200:
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            if not said:
                progress(f"waiting for the homeserver at {self.config.homeserver_url} …")
                said = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10)

    def halt(self, reason: str) -> None:
        """This bridge cannot go on (another one took its database): `run` stops it, one line."""
        if not self.halted.is_set():
            log.error("%s", reason)
            self.halt_reason = reason
            self.halted.set()

    async def ping(self) -> None:
        await self._ping()

    def _retry_soon(self, transaction: Transaction | None = None) -> None:
        """A transaction was refused for a gap (appservice.TransactionOrder): once the homeserver
        has its answer, ping it, so it sends what is unsent now instead of after its backoff —
        again and again (GAP_RETRY_AFTER) until a transaction comes: a ping made before the
        homeserver started its recovery finds nothing to hurry, and Synapse 1.163 was seen, after
        its own restart, never running the retry it had scheduled (a test waited 60 s for it).
        Its rooms are active for the quiet watch (matrix/quiet.py): should the homeserver not send
        it again, they are read back once it has been quiet for QUIET seconds."""
        if transaction is not None:
            self.quiet.came(self._rooms_of(transaction), time.time())
            self._quiet_news.set()
        if any(not task.done() for task in self._gap_pings):
            return  # the pings of an earlier refusal go on

        async def later() -> None:
            answered = self.server.acknowledged
            for delay in GAP_RETRY_AFTER:
                await asyncio.sleep(delay)
                if self.server.acknowledged != answered:
                    return  # the homeserver sends again
                await self._ping()

        task = asyncio.ensure_future(later())
        self._gap_pings.add(task)
        task.add_done_callback(self._gap_pings.discard)

    async def _read_back_before(self, transaction: Transaction, gap_at: float) -> None:
        """A transaction was let through after a gap in the homeserver's numbering (at `gap_at`,
        appservice.TransactionOrder): one Synapse left behind at the end of a recovery may hold
        earlier messages, and would come only at its next failure. The rooms of the owners'
        events in `transaction` not read back since are read back first (matrix/left_behind.py):
        such a message is taken before the ones after it — answered in its place — and skipped
        when its own transaction comes (docs/reliability.md "Restarts"). A room that could not be
        read back for now refuses the transaction: Synapse sends it again (after any it left
        behind), and the room is read back then."""
        now = time.time()
        rooms = left_behind.rooms_to_read(transaction.events, self.config.owners, gap_at, self._read_back_at, now)
        if not rooms:
            return
        read, failed = await self.inbound.catch_up_rooms(rooms)
        self._read_back_at.update(dict.fromkeys((room for room in rooms if room not in failed), now))
        if failed:  # its messages would go before one left behind: the homeserver sends it again
            raise TransactionRefused(
                f"transaction {transaction.txn_id}: {len(failed)} room(s) not read back after a gap"
            )
        log.info("transaction %s: read back %s channel(s) after a gap in the transactions", transaction.txn_id, read)

    async def _transaction(self, transaction: Transaction) -> None:
        """A transaction from the homeserver: its rooms are active (matrix/quiet.py), then the
        dispatcher handles it."""
        self.quiet.came(self._rooms_of(transaction), time.time())
        self._quiet_news.set()
        await self.dispatcher.transaction(transaction)

    def _rooms_of(self, transaction: Transaction) -> set[str]:
        """The rooms of a transaction's events that the quiet watch cares for: an owner's, or an
        open channel's."""
        owners = self.config.owners
        return {
            e["room_id"]
            for e in transaction.events
            if isinstance(e.get("room_id"), str)
            and (e.get("sender") in owners or e["room_id"] in self.channels.portals)
        }

    async def _watch_quiet(self) -> None:
        """Until cancelled: while the homeserver sends nothing for a while after some activity,
        the active rooms are read back (matrix/quiet.py): a message its appservice sender left
        behind when it was killed is answered without waiting for a later event. Idle (no
        room active): it waits for the next transaction, asking nothing."""
        while True:
            wait = self.quiet.next_check(time.time())
            if wait is None or wait > 0:
                self._quiet_news.clear()
                try:
                    await asyncio.wait_for(self._quiet_news.wait(), wait)
                except TimeoutError:
                    pass
                continue
            if self.stopping.is_set():
                return
            rooms = self.quiet.due(time.time())
            if not rooms:  # not due after all (a clock step): look again shortly
                await asyncio.sleep(1)
                continue
            try:
                read, _ = await self.inbound.catch_up_rooms(rooms)  # the next quiet period reads again
            except Exception as exc:  # the store or the homeserver: the next quiet period again
                read = 0
                log.info("reading back quiet rooms failed: %s", exc)
            self.quiet.read(rooms, time.time())
            if read:
                log.debug("read back %d active channel(s): the homeserver was quiet", read)

    def _back(self, since: float) -> None:
        """The homeserver answers again; it failed from `since` (matrix/reachability.py). Its
        channels' messages from shortly before are read back (inbound.catch_up_since)."""
        if self.stopping.is_set():
            return
        log.info(
            "the homeserver answers again (away for %.1f s): reading back what it may have lost", time.time() - since
        )
        self._read_back(since, "after the homeserver was away")

    def _sender_gone(self, since: float) -> None:
        """The homeserver hung up before our answer to a transaction that came at `since`
        (matrix/appservice.py): its sender was killed, and what it queued behind that transaction
        is lost to the appservice API. It is in the rooms already: read back at once."""
        if self.stopping.is_set():
            return
        self._read_back(since, "after the homeserver hung up mid-transaction")

    def _read_back(self, since: float, why: str) -> None:
        """The channels' messages from CATCH_UP_BEFORE before `since` pass the dispatcher again."""

        async def catch_up() -> None:
            read = await self.inbound.catch_up_since(int((since - CATCH_UP_BEFORE) * 1000))
            log.info("read back %s channel(s) %s", read, why)

        task = asyncio.ensure_future(catch_up())
        self._catching_up.add(task)
        task.add_done_callback(self._catching_up.discard)

    async def _ping(self) -> None:
        """Ask the homeserver to call us now: a backlog of transactions is retried at once."""
        for attempt in range(5):
            try:
                status, body = await self.identities.bot.intent.ping(
                    self.registration.id, f"sidekicks-{int(time.time() * 1000)}"
                )
            except aiohttp.ClientError as exc:
                status, body = 0, {"error": str(exc)}
            if status == 200:
                return
            if 400 <= status < 500:  # no ping on this homeserver (older than Matrix 1.7)
                log.info("the homeserver has no appservice ping (%s): a backlog waits for its retry", status)
                return
            # Synapse answers 502 when its own scheduled retry fired at that very moment
            # ("AlreadyCalled"); a moment later the ping goes through
            log.info("homeserver ping failed (%s %s); trying again", status, body.get("error", body))
            await asyncio.sleep(0.5 * (attempt + 1))
        log.warning("homeserver ping failed: a backlog of messages may arrive late")

    # ---- wiring -------------------------------------------------------------------------------

    def _open_portal(self, channel: Channel, members: list[str]) -> Portal:
        """A channel's portal, made the first time the channel is asked for (registry.py)."""
        return Portal(self.parts, channel, members)

    def _members_of(self, room_id: str) -> list[str]:
        """The agents of `room_id`'s open channel, in join order (none when it is not open)."""
        portal = self.channels.portals.get(room_id)
        return portal.member_names() if portal is not None else []

    # for the command line and tests: the parts' state, read through the bridge that owns them

    @property
    def session(self) -> aiohttp.ClientSession | None:
        return self.identities.session

    @session.setter
    def session(self, session: aiohttp.ClientSession | None) -> None:
        self.identities.session = session

    @property
    def bot(self) -> Puppet | None:
        return self.identities.bot

    @bot.setter
    def bot(self, bot: Puppet | None) -> None:
        self.identities.bot = bot

    @property
    def puppets(self) -> dict[str, Puppet]:
        return self.identities.puppets

    async def puppet(self, agent: str) -> Puppet:
        return await self.identities.puppet(agent)

    @property
    def portals(self) -> dict[str, Portal]:
        return self.channels.portals

    # ---- events ------------------------------------------------------------------------------

    async def handle_user_query(self, user_id: str) -> bool:
        agent = self.config.agent_for_user_id(user_id)
        if agent is None:
            return False
        await self.identities.puppet(agent)
        return True

    # ---- acp callbacks -------------------------------------------------------------------------

    def _on_commands(self, agent: str, commands: list[dict]) -> None:
        """An agent announced its commands: kept (on the database thread, in order), then
        published (MSC4391), which reads them back after the write."""
        store = self.store
        self.db.soon(f"the commands of {agent}", lambda: store.set_agent_commands(agent, commands))
        self.command_descriptions.commands_changed(agent)

    def _on_stopped(self, agent: str) -> None:
        log.info("agent %s stopped", agent)
