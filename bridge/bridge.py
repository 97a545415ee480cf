"""The bridge: life cycle (start, recovery, ping, stop) and wiring of its parts.

Flow is one way: bridge → acp (agents), store (history), config. Every incoming event passes
the dispatcher (dispatch.py), every outgoing one the Intent of a puppet or of the bot
(intent.py). Events of one transaction are handled in order; answering happens in each portal's
own task so a transaction is acknowledged quickly.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

import aiohttp

from acp import CODING_CLIENT_CAPABILITIES, AgentSpec, ElicitationRequest, Pool, PermissionRequest
from config import Config
from config.registration import Registration
from store import Store, StoreClosed, new_id
from store.offloop import OffLoop

from .matrix.appservice import AppserviceServer, TransactionOrder
from .coding.questions import Questions
from .coding.settings import SessionSettings
from .channels.commands import BotCommands
from .matrix.dispatch import Dispatcher
from .matrix.intent import Outgoing
from .matrix.client import MatrixError
from .matrix.msc4391 import CommandDescriptions
from .channels.portal import Portal
from .channels.permissions import Permissions
from .matrix.presence import Presence
from .matrix.puppet import Puppet
from .channels.recovery import Recovery
from .channels.scheduler import Scheduler
from .mcp.service import McpService
from .channels.stream import notice_parts
from .channels.turns import background_tasks

log = logging.getLogger(__name__)

TXN_ORDER = "appservice/transaction-order"
STORE_CLOSE_WAIT = 10  # seconds a stop waits for the database's last writes
GAP_RETRY_AFTER = 0.05  # seconds after refusing a transaction for a gap before the ping  # the last transaction number handled (appservice.py)


def freeze_startup_objects() -> None:
    """What the start made (modules, classes, the config, the devices) lives as long as the
    bridge: it is moved out of the garbage collector's walks (gc.freeze), so a full collection
    walks only what came after — on this project's machine ~50 ms less of a stalled event loop
    each time one runs (tests/test_fuzz_hostile.py measures the loop)."""
    gc.collect()
    gc.freeze()


class Bridge:
    def __init__(self, config: Config, registration: Registration, store: Store,
                 history_unavailable: bool = False):
        self.config = config
        self.registration = registration
        self.store = store
        # the store's calls from the event loop, awaited on one database thread (store/offloop.py)
        self.db = OffLoop(store)
        self.history_unavailable = history_unavailable
        self.pool = Pool({name: AgentSpec(name=name, command=list(a.command), cwd=a.cwd,
                                          env=dict(a.env), title=a.title, timeout=a.timeout)
                          for name, a in config.agents.items()},
                         agents_in_memory=config.agents_in_memory,
                         on_commands=self._on_commands, on_stopped=self._on_stopped,
                         client_capabilities=CODING_CLIENT_CAPABILITIES,
                         on_state=lambda *args: self.settings.on_state(*args))
        self.aliases = {}
        for name in config.agents:
            self.aliases[name] = name
            self.aliases[f"{config.puppet_prefix}{name}"] = name
        self.dispatcher = Dispatcher(self)  # every incoming event passes it (bridge/matrix/dispatch.py)
        self.server = AppserviceServer(registration.hs_token, self.dispatcher.transaction,
                                       self.handle_user_query, self.db.txn_seen, self.db.mark_txn,
                                       self.dispatcher.refused,
                                       TransactionOrder(lambda: store.get_value(TXN_ORDER),
                                                        lambda value: self.db.soon(
                                                            "the last transaction number",
                                                            lambda: store.set_value(TXN_ORDER, value))),
                                       on_gap=self._retry_soon)
        self._gap_pings: set[asyncio.Task] = set()
        self.halted = asyncio.Event()  # set (with halt_reason) when this bridge must stop
        # set as stop() begins: no turn starts from then on — a message taken meanwhile (the
        # appservice still answers while answers finish) is run by the next start (recovery)
        self.stopping = False
        self.halt_reason = ""
        self.session: aiohttp.ClientSession | None = None
        # how room events leave, per room (bridge/matrix/intent.py): as they are, until encryption
        self.outgoing: Outgoing = Outgoing()
        self.e2ee = None  # with `encryption: on`, a device per identity (bridge/e2ee)
        if config.encryption:
            from .e2ee.crypto import Decrypting, E2EE
            self.e2ee = E2EE(self)
            self.outgoing = self.e2ee.outgoing
            self.dispatcher.encryption = Decrypting(self.dispatcher.inbound, self.e2ee)
        self.bot: Puppet | None = None
        self.puppets: dict[str, Puppet] = {}
        self.portals: dict[str, Portal] = {}
        self.active_turns: dict[str, Portal] = {}
        self.commands = BotCommands(self)
        self.permissions = Permissions(self)
        self.questions = Questions(self)      # agents' elicitations (coding/questions.py)
        self.settings = SessionSettings(self)  # modes, models, options, usage (coding/settings.py)
        self.recovery = Recovery(self)
        # this run's id: every turn it takes or claims is marked with it (store/turns.py)
        self.run_id = new_id()
        self.recovered = asyncio.Event()  # set once the turns earlier runs left are queued
        self.presence = Presence(self)                       # online while running (presence.py)
        self.command_descriptions = CommandDescriptions(self)  # MSC4391 (msc4391.py)
        self.mcp = McpService(self)            # the agents' `matrix` MCP server (bridge/mcp)
        self.scheduler = Scheduler(self)       # scheduled work (channels/scheduler.py)

    # ---- life cycle -------------------------------------------------------------------------

    async def start(self, progress=lambda text: None) -> None:
        self.session = aiohttp.ClientSession()
        hs = self.config.homeserver_url
        self.bot = Puppet(self.config.bot_user_id, "Sidekicks", hs, self.registration.as_token,
                          self.session, outgoing=self.outgoing)
        await self.server.start(self.config.listen_host, self.config.listen_port)
        progress(f"appservice listening on {self.config.appservice_url}")
        await self._wait_for_homeserver(progress)
        await self.bot.ensure_registered()
        for name in self.config.agents:
            await self.puppet(name)
        if self.e2ee is not None:
            progress("encryption: a device for each agent and the bot")
            renewed = await self.e2ee.start([self.bot.user_id, *(p.user_id for p in self.puppets.values())],
                                            self.dispatcher)
            if renewed:
                from .e2ee.crypto import RENEWED
                try:
                    await self.commands.tell_owners(RENEWED)
                except Exception:
                    log.exception("could not tell the owners that the devices are new")
        self.presence.start()
        await self.mcp.start()
        if self.history_unavailable:
            await self._say_history_unavailable(progress)
        # the turns earlier runs left: queued before any portal starts, so they go first
        recovered = await self.recovery.start()
        self.recovered.set()
        self.scheduler.start()  # after recovery: a run an earlier run took goes first, once
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
        """Another bridge holds the database: this run keeps its history in memory (ADR §5)."""
        text = ("⚠️ History is unavailable: the database of this config is used by another running "
                "bridge, so this bridge keeps channels and messages in memory only, and forgets them "
                "when it stops. Stop the other bridge, then restart this one to get the history back.")
        log.warning("the database is used by another running bridge: history is unavailable this time")
        progress("history unavailable: the database is used by another running bridge")
        try:
            await self.commands.tell_owners(text)
        except Exception:
            log.exception("could not tell the owners that history is unavailable")

    async def stop(self) -> None:
        self.stopping = True
        for portal in list(self.portals.values()):
            if portal.worker is not None and not portal.worker.done():
                portal.worker.cancel()
        workers = [p.worker for p in self.portals.values() if p.worker is not None]
        try:
            await self.scheduler.stop()
            if workers:  # each cut answer is edited to say so and stays unstored (turns.py)
                await asyncio.gather(*workers, return_exceptions=True)
            await self.dispatcher.outage.close()
            await self.command_descriptions.close()
            await self.settings.close()
            await self.presence.stop()
            later = [*self.commands.tasks, *background_tasks(), *self._gap_pings]  # replies, receipts on their way
            for task in later:
                task.cancel()
            await asyncio.gather(*later, return_exceptions=True)
            await self.pool.close()
            await self.mcp.stop()
            await self.server.stop()
            if self.e2ee is not None:
                await self.e2ee.stop()
            if self.session is not None:
                await self.session.close()
        finally:
            # after every write queued before it (the turns' last ones); a database that hangs
            # does not hold the stop (the thread is a daemon)
            try:
                await asyncio.wait_for(self.db.run(self.store.close), STORE_CLOSE_WAIT)
            except asyncio.TimeoutError:
                log.warning("the database did not answer within %d s: stopping without closing it",
                            STORE_CLOSE_WAIT)
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
            except (aiohttp.ClientError, asyncio.TimeoutError):
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

    def _retry_soon(self) -> None:
        """A transaction was refused for a gap (appservice.TransactionOrder): once the homeserver
        has its answer, ping it, so it sends what is unsent now instead of after its backoff."""
        async def later() -> None:
            await asyncio.sleep(GAP_RETRY_AFTER)
            await self._ping()
        task = asyncio.ensure_future(later())
        self._gap_pings.add(task)
        task.add_done_callback(self._gap_pings.discard)

    async def _ping(self) -> None:
        """Ask the homeserver to call us now: a backlog of transactions is retried at once."""
        for attempt in range(5):
            try:
                status, body = await self.bot.intent.ping(self.registration.id,
                                                          f"sidekicks-{int(time.time() * 1000)}")
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

    # ---- helpers used by portals and turns ----------------------------------------------------

    async def puppet(self, agent: str) -> Puppet:
        puppet = self.puppets.get(agent)
        if puppet is None:
            title = self.config.agents[agent].title
            puppet = Puppet(self.config.puppet_user_id(agent), title, self.config.homeserver_url,
                            self.registration.as_token, self.session, agent=agent,
                            outgoing=self.outgoing)
            self.puppets[agent] = puppet
        await puppet.ensure_registered()
        return puppet

    def is_owner(self, user_id: str) -> bool:
        return user_id in self.config.owners

    def waiting_note(self, agent: str) -> str:
        """Why a new answer of `agent` cannot start at once: whose turn it is, or starting."""
        from .channels.turns import waiting_note
        return waiting_note(self, agent)

    def permission_handler(self, portal: Portal, puppet: Puppet):
        async def decide(request: PermissionRequest) -> str | None:
            return await self.permissions.ask(portal, puppet, request)
        return decide

    def elicitation_handler(self, portal: Portal, puppet: Puppet):
        async def ask(request: ElicitationRequest):
            return await self.questions.ask(portal, puppet, request)
        return ask

    async def notice(self, portal: Portal, text: str, puppet: Puppet | None = None) -> None:
        sender = puppet
        if sender is None:
            members = portal.member_names()
            sender = await self.puppet(members[0]) if members else self.bot
        await self.send_notice(sender, portal.room_id, text)

    async def send_notice(self, sender: Puppet, room_id: str, text: str, html: str | None = None) -> None:
        """A notice; a long one (a listing, an agent's words: any size) in several, each fitting
        an event, at most MAX_NOTICE_PARTS (stream.notice_parts); then without its HTML."""
        parts = notice_parts(text)
        for part in parts:
            content: dict[str, Any] = {"msgtype": "m.notice", "body": part}
            if html and len(parts) == 1:
                content.update({"format": "org.matrix.custom.html", "formatted_body": html})
            try:
                await sender.intent.send(room_id, content)
            except (MatrixError, aiohttp.ClientError) as exc:
                log.warning("could not send a notice to %s: %s", room_id, exc)
                return
            except Exception:
                log.exception("could not send a notice to %s", room_id)
                return

    async def portal_for(self, room_id: str) -> Portal | None:
        """The room's portal, if the room is a channel (read from the store the first time)."""
        portal = self.portals.get(room_id)
        if portal is None:
            store = self.store
            found = await self.db.run(lambda: _channel_and_members(store, room_id))
            if found is None:
                return None
            portal = self.portals.get(room_id)  # made meanwhile by another event
            if portal is None:
                portal = self.portals[room_id] = Portal(self, *found)
        return portal

    # ---- events ------------------------------------------------------------------------------

    async def handle_user_query(self, user_id: str) -> bool:
        agent = self.config.agent_for_user_id(user_id)
        if agent is None:
            return False
        await self.puppet(agent)
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


def _channel_and_members(store: Store, room_id: str):
    channel = store.channel_by_room(room_id)
    if channel is None:
        return None
    return channel, [member.agent for member in store.members(channel.id)]
