"""The bridge: receives the homeserver's events and hands them to portals, puppets and the bot.

Flow is one way: bridge → acp (agents), store (history), config. Events of one transaction are
handled in order; answering happens in each portal's own task so a transaction is acknowledged
quickly.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from urllib.parse import quote

import aiohttp

from acp import AgentCrashed, AgentSpec, Pool, PermissionRequest
from config import Config
from config.registration import Registration
from store import Store, StoreClosed

from .appservice import AppserviceServer
from .commands import BotCommands
from .intent import Outgoing
from .matrix import MatrixError
from .portal import Incoming, Portal
from .permissions import Permissions
from .puppet import Puppet
from .recovery import Recovery
from .render import escape_html

log = logging.getLogger(__name__)

STDERR_LINES = 12


class Bridge:
    def __init__(self, config: Config, registration: Registration, store: Store,
                 history_unavailable: bool = False):
        self.config = config
        self.registration = registration
        self.store = store
        self.history_unavailable = history_unavailable
        self.pool = Pool({name: AgentSpec(name=name, command=list(a.command), cwd=a.cwd,
                                          env=dict(a.env), title=a.title, timeout=a.timeout)
                          for name, a in config.agents.items()},
                         agents_in_memory=config.agents_in_memory,
                         on_commands=self._on_commands, on_stopped=self._on_stopped)
        self.aliases = {}
        for name in config.agents:
            self.aliases[name] = name
            self.aliases[f"{config.puppet_prefix}{name}"] = name
        self.server = AppserviceServer(registration.hs_token, self.handle_transaction,
                                       self.handle_user_query, self._txn_seen, self._mark_txn)
        self.session: aiohttp.ClientSession | None = None
        # how room events leave, per room (bridge/intent.py): as they are, until encryption
        self.outgoing: Outgoing = Outgoing()
        self.bot: Puppet | None = None
        self.puppets: dict[str, Puppet] = {}
        self.portals: dict[str, Portal] = {}
        self.active_turns: dict[str, Portal] = {}
        self._encryption_noted: set[str] = set()
        self.commands = BotCommands(self)
        self.permissions = Permissions(self)
        self.recovery = Recovery(self)

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
        if self.history_unavailable:
            await self._say_history_unavailable(progress)
        repaired = await self.recovery.repair()
        if repaired:
            progress(f"{repaired} answer(s) cut by the last stop marked as interrupted")
        resumed = self.recovery.resume()  # before the ping: older messages first
        if resumed:
            progress(f"{resumed} message(s) the last run did not finish answering: answering now")
        await self._ping()
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
        for portal in list(self.portals.values()):
            if portal.worker is not None and not portal.worker.done():
                portal.worker.cancel()
        workers = [p.worker for p in self.portals.values() if p.worker is not None]
        try:
            if workers:  # each cut answer is edited to say so and stays unstored (turns.py)
                await asyncio.gather(*workers, return_exceptions=True)
            await self.pool.close()
            await self.server.stop()
            if self.session is not None:
                await self.session.close()
        finally:
            self.store.close()  # from now on every store call raises StoreClosed

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
        from .turns import waiting_note
        return waiting_note(self, agent)

    async def session_for(self, portal: Portal, agent_name: str, agent) -> tuple[str, bool]:
        """The agent's ACP session for this channel: kept, loaded, or new and fresh (ADR §4)."""
        member = self.store.member(portal.channel.id, agent_name)
        if member is None:
            member = self.store.add_member(portal.channel.id, agent_name)
        cwd = self.config.agents[agent_name].cwd
        if member.session_id and member.session_id in agent.sessions:
            return member.session_id, member.fresh
        if member.session_id and agent.load_session:
            try:
                await agent.load_session(member.session_id, cwd)
                return member.session_id, member.fresh
            except Exception as exc:  # the agent lost it: fall back to a fresh session
                log.info("session/load of %s failed (%s); opening a new session", agent_name, exc)
        session_id = await agent.new_session(cwd)
        self.store.set_session(portal.channel.id, agent_name, session_id, fresh=True)
        return session_id, True

    def seen(self, portal: Portal, agent: str, message_id: str) -> None:
        """The agent has now seen everything up to `message_id` (its own answer, usually)."""
        try:  # a member removed meanwhile is left alone (no row to update)
            self.store.mark_seen(portal.channel.id, agent, message_id)
        except StoreClosed:
            pass  # the bridge is quitting; the next run sees the message again, which is harmless

    def permission_handler(self, portal: Portal, puppet: Puppet):
        async def decide(request: PermissionRequest) -> str | None:
            return await self.permissions.ask(portal, puppet, request)
        return decide

    async def notice(self, portal: Portal, text: str, puppet: Puppet | None = None) -> None:
        sender = puppet
        if sender is None:
            members = portal.member_names()
            sender = await self.puppet(members[0]) if members else self.bot
        await self.send_notice(sender, portal.room_id, text)

    async def send_notice(self, sender: Puppet, room_id: str, text: str, html: str | None = None) -> None:
        content: dict[str, Any] = {"msgtype": "m.notice", "body": text}
        if html:
            content.update({"format": "org.matrix.custom.html", "formatted_body": html})
        try:
            await sender.intent.send(room_id, content)
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("could not send a notice to %s: %s", room_id, exc)
        except Exception:
            log.exception("could not send a notice to %s", room_id)

    async def crash_notice(self, portal: Portal, puppet: Puppet, agent: str, exc: AgentCrashed) -> None:
        tail = "\n".join((exc.stderr_tail or "").strip().splitlines()[-STDERR_LINES:])
        text = f"⚠️ {agent} stopped unexpectedly (exit code {exc.exit_code})."
        html = f"<p>{text}</p>"
        if tail:
            text += f" The end of its error output:\n{tail}"
            html += f"<p>The end of its error output:</p><pre><code>{escape_html(tail)}</code></pre>"
        text += "\nThe next message starts it again."
        html += "<p>The next message starts it again.</p>"
        await self.send_notice(puppet, portal.room_id, text, html)

    async def add_agent(self, portal: Portal, agent: str, announce: bool = False) -> bool:
        """Make `agent` a member: invite its puppet, which joins at once. False when it could
        not join (no agent left in the room to invite it): the owners are told what to do."""
        puppet = await self.puppet(agent)
        others = [m for m in portal.member_names() if m != agent]
        inviter = await self.puppet(others[0]) if others else self.bot
        self.store.add_member(portal.channel.id, agent)
        if announce and others:  # said by a member already in the room, never by the one not yet joined
            await self.notice(portal, f"Inviting {self.config.agents[agent].title} (@{agent}) to #{portal.channel.name}.",
                              inviter)
        await inviter.intent.invite(portal.room_id, puppet.user_id)
        if await puppet.intent.join(portal.room_id):
            return True
        self.store.remove_member(portal.channel.id, agent)
        await self.commands.tell_owners(
            f"I could not bring {self.config.agents[agent].title} (@{agent}) into #{portal.channel.name}: "
            f"no agent is left in that room to invite it. Invite {puppet.user_id} there yourself.")
        return False

    def portal_for(self, room_id: str) -> Portal | None:
        portal = self.portals.get(room_id)
        if portal is None:
            channel = self.store.channel_by_room(room_id)
            if channel is None:
                return None
            portal = self.portals[room_id] = Portal(self, channel)
        return portal

    # ---- events ------------------------------------------------------------------------------

    def _txn_seen(self, txn_id: str) -> bool:
        return self.store.txn_seen(txn_id)

    def _mark_txn(self, txn_id: str) -> None:
        self.store.mark_txn(txn_id)

    async def handle_user_query(self, user_id: str) -> bool:
        agent = self.config.agent_for_user_id(user_id)
        if agent is None:
            return False
        await self.puppet(agent)
        return True

    async def handle_transaction(self, events: list[dict], ephemeral: list[dict]) -> None:
        log.debug("transaction: %d events, %d ephemeral", len(events), len(ephemeral))
        for event in events:
            try:
                await self.handle_event(event)
            except (MatrixError, aiohttp.ClientError) as exc:
                log.warning("event %s: %s", event.get("event_id"), exc)
            except Exception:
                log.exception("event %s could not be handled", event.get("event_id"))

    async def handle_event(self, event: dict) -> None:
        kind, room_id, sender = event.get("type"), event.get("room_id"), event.get("sender")
        if not isinstance(kind, str) or not isinstance(room_id, str) or not isinstance(sender, str):
            return
        content = event.get("content")
        if not isinstance(content, dict):
            return
        if kind == "m.room.member":
            await self.on_member(event, room_id, sender, content)
        elif kind == "m.room.message":
            await self.on_message(event, room_id, sender, content)
        elif kind == "m.reaction":
            await self.on_reaction(event, room_id, sender, content)
        elif kind == "m.room.redaction":
            await self.on_redaction(event, room_id, sender, content)
        elif kind in ("m.room.encryption", "m.room.encrypted"):
            portal = self.portal_for(room_id)
            if portal is not None:
                await self.say_encrypted(portal)
        elif kind == "m.room.name" and self.is_owner(sender):
            portal = self.portal_for(room_id)
            name = content.get("name")
            if portal is not None and isinstance(name, str) and name.strip():
                self.store.rename_channel(portal.channel.id, name.strip())
                portal.channel = self.store.channel(portal.channel.id)

    async def on_member(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        target = event.get("state_key")
        membership = content.get("membership")
        if not isinstance(target, str):
            return
        if target == self.config.bot_user_id:
            await self.commands.on_bot_member(event, room_id, sender, content)
            return
        agent = self.config.agent_for_user_id(target)
        if agent is None:
            return
        puppet = await self.puppet(agent)
        if membership == "invite":
            if sender == self.config.bot_user_id or self.config.agent_for_user_id(sender):
                return  # the bridge's own invite (add_agent), which joins by itself
            if not self.is_owner(sender):
                log.info("%s invited %s: declined (not an owner)", sender, target)
                await puppet.intent.leave(room_id)
                return
            channel = self.store.channel_by_room(room_id)
            made = channel is None
            if channel is None:
                direct = bool(content.get("is_direct"))
                name = _room_name(event) or (agent if direct else room_id)
                channel = self.store.create_channel(room_id, name, agent if direct else None)
            self.store.add_member(channel.id, agent)
            self.portal_for(room_id)
            if await puppet.intent.join(room_id):
                if _invite_state(event, "m.room.encryption") is not None:
                    await self.say_encrypted(self.portal_for(room_id))
                await self.catch_up(puppet, room_id, event.get("event_id"))
            if made:  # channels sit in the "Sidekicks" space (SPEC §5)
                await self.commands.channel_created(room_id)
        elif membership in ("leave", "ban") and sender != target:
            channel = self.store.channel_by_room(room_id)
            if channel is not None:
                self.store.remove_member(channel.id, agent)

    async def say_encrypted(self, portal: Portal) -> None:
        """Once per room and run: the bridge cannot read end-to-end encrypted rooms."""
        if portal.room_id in self._encryption_noted:
            return
        self._encryption_noted.add(portal.room_id)
        await self.notice(portal, "This room is end-to-end encrypted, and agents cannot read encrypted "
                                  "messages. Make a new room without encryption (or start a new direct "
                                  "message) to talk to agents.")

    async def catch_up(self, puppet: Puppet, room_id: str, since_event_id: str | None) -> None:
        """Handle the owner's messages sent between the invite and the puppet's join.

        The homeserver only sends an appservice the events of rooms where one of its users has
        joined, so a message typed right after opening a DM would otherwise never arrive.
        """
        status, body = await puppet.intent.request(
            "GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/messages?dir=b&limit=50")
        if status != 200:
            return
        missed = []
        for event in body.get("chunk") or []:
            if event.get("event_id") == since_event_id:
                break
            if event.get("type") == "m.room.message":
                missed.append(event)
        for event in reversed(missed):
            event.setdefault("room_id", room_id)
            await self.on_message(event, room_id, event.get("sender", ""), event.get("content") or {})

    async def on_message(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        if sender == self.config.bot_user_id or self.config.agent_for_user_id(sender):
            return  # our own puppets' messages are stored by their turns
        if not self.is_owner(sender):
            return  # strangers never reach an agent (SPEC §5)
        if "m.new_content" in content or (content.get("m.relates_to") or {}).get("rel_type") == "m.replace":
            return  # edits of earlier messages are not new prompts
        body = content.get("body")
        if not isinstance(body, str) or not body.strip():
            return
        if body.lstrip().startswith("!") and await self.commands.handle(event, room_id, sender, body):
            return
        if await self.permissions.on_reply(event, room_id, sender, body):
            return
        portal = self.portal_for(room_id)
        if portal is None:
            return
        event_id = event.get("event_id", "")
        if self.store.message_by_event(event_id) is not None:
            return  # already taken (a transaction delivered again after a crash)
        self.recovery.prompt_taken(event_id, room_id)
        message = self.store.add_message(portal.channel.id, sender, "user", body, [event_id])
        formatted = content.get("formatted_body") if content.get("format") == "org.matrix.custom.html" else None
        mentions = (content.get("m.mentions") or {}).get("user_ids") or []
        portal.submit(Incoming(message.id, event_id, body,
                               formatted if isinstance(formatted, str) else None,
                               [m for m in mentions if isinstance(m, str)]))

    async def on_reaction(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        relates = content.get("m.relates_to")
        if not self.is_owner(sender) or not isinstance(relates, dict):
            return
        if await self.permissions.on_reaction(event, room_id, sender, relates):
            return
        key = relates.get("key")
        if relates.get("rel_type") == "m.annotation" and isinstance(key, str) and key.replace("\ufe0f", "") == "🛑":
            portal = self.portals.get(room_id)
            run = portal.current if portal is not None else None
            if run is not None and relates.get("event_id") in run.answer.event_ids:
                log.info("🛑 on the answer in %s: cancelling", room_id)
                await run.cancel()

    async def on_redaction(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        """The owner redacted a message. A prompt being answered: the answer is cancelled (SPEC
        §9); one still queued is never answered; and the store forgets it, so that no agent is
        told it later as context."""
        if not self.is_owner(sender):
            return
        redacts = content.get("redacts") or event.get("redacts")  # room v11 / older versions
        if not isinstance(redacts, str):
            return
        portal = self.portals.get(room_id)  # a message queued or answered has its portal loaded
        if portal is not None:
            run = portal.current
            if portal.withdraw(redacts):
                log.info("a message in %s was redacted before its answers were done", room_id)
            if run is not None and run.prompt_event_id == redacts:
                log.info("the prompt answered in %s was redacted: cancelling", room_id)
                await run.cancel()
        try:
            if self.store.delete_message_by_event(redacts):
                log.info("a redacted message in %s is forgotten", room_id)
        except StoreClosed:
            pass

    # ---- acp callbacks -------------------------------------------------------------------------

    def _on_commands(self, agent: str, commands: list[dict]) -> None:
        try:
            self.store.set_agent_commands(agent, commands)
        except StoreClosed:
            pass

    def _on_stopped(self, agent: str) -> None:
        log.info("agent %s stopped", agent)


def _invite_state(event: dict, kind: str) -> dict | None:
    """Content of a state event of `kind` in an invite's stripped room state."""
    for state in (event.get("unsigned") or {}).get("invite_room_state") or []:
        if isinstance(state, dict) and state.get("type") == kind:
            content = state.get("content")
            return content if isinstance(content, dict) else {}
    return None


def _room_name(event: dict) -> str | None:
    name = (_invite_state(event, "m.room.name") or {}).get("name")
    return name.strip() if isinstance(name, str) and name.strip() else None


def _q(value: str) -> str:
    return quote(value, safe="")
