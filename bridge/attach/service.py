"""The bridge's conversations as ACP sessions, for an ACP client attached through `sidekicks acp`
(docs/sessions.md "Attach an editor"): the bridge is the ACP *agent* on the socket (server.py).

- `initialize`: loadSession, sessionCapabilities list / resume / close, embedded context in
  prompts, no authentication.
- `session/list`: each conversation with the agent (`--agent`, else every agent) that holds a
  message: DMs, channels' main timelines, threads; `cwd` filter and cursor (wire.py).
- `session/new`: a new thread in the agent's direct chat (found, or made as `!dm` makes it),
  its root a notice of the agent's saying which client opened it: visible in Matrix at once, one
  room per agent as before.
- `session/load`: the conversation's stored messages as `user_message_chunk` /
  `agent_message_chunk`, then live; `session/resume`: nothing replayed, then live.
- `session/prompt`: a message in the room, quoted by a notice ("💻 from Zed: …"), routed, stored
  and queued as the owner's own (`Portal.take`, `Portal.submit`). It is written down first, then
  taken under its transaction id at once while the notice is posted beside its turn, whose own
  events wait for the notice's send (the room shows the prompt first); a stop before it is
  forgotten posts the notice again (the same event) and takes it again (once). The answer is
  the stop reason of the turns it started.
- `session/cancel`: the conversation's running turn is stopped as `!stop` does;
  `session/close`: the client detaches, the conversation is untouched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from acp import framing
from acp.errors import RpcError
from store import keys, new_id

from ..channels.base.conversations import MAIN, relation_for
from ..channels.rules.command_parse import opens_threads
from ..channels.turns import prepare
from ..channels.turns.incoming import Incoming
from . import wire
from .hub import Client, Hub, PromptWait

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from ..channels.base.registry import Channels
    from ..matrix.identities import Identities

log = logging.getLogger(__name__)

HISTORY = 1000  # messages a session/load replays at most
PENDING = "attach.pending"  # the store's value: client prompts written down, not yet taken
VERSION = "1"


def _bad(message: str) -> RpcError:
    return RpcError(framing.INVALID_PARAMS, message)


class AttachService:
    def __init__(self, config: Config, db: OffLoop, channels: Channels, identities: Identities) -> None:
        self.config, self.db, self.channels, self.identities = config, db, channels, identities
        self.hub = Hub()
        self._tasks: set[asyncio.Task] = set()  # quotes being posted beside their turns (`_shown`)
        # the owner's direct channel with an agent, found or made (commands.py `direct_channel`)
        self.direct_channel: Callable[[str, str], Awaitable[tuple[str, bool]]] = _no_direct_channel

    # ---- one client's requests ------------------------------------------------------------------

    async def request(self, client: Client, method: str, params: Any) -> Any:
        params = params if isinstance(params, dict) else {}
        handlers = {
            "initialize": self._initialize,
            "authenticate": lambda c, p: _empty(),
            "session/list": self._list,
            "session/new": self._new,
            "session/load": self._load,
            "session/resume": self._resume,
            "session/close": self._close,
            "session/prompt": self._prompt,
            "session/set_mode": self._unsupported,
        }
        handler = handlers.get(method)
        if handler is None:
            raise RpcError(framing.METHOD_NOT_FOUND, f"method not found: {method}")
        return await handler(client, params)

    async def notification(self, client: Client, method: str, params: Any) -> None:
        if method == "session/cancel" and isinstance(params, dict):
            await self._cancel(params)

    async def _unsupported(self, client: Client, params: dict) -> Any:
        raise RpcError(framing.METHOD_NOT_FOUND, "use !mode in the room to change the agent's mode")

    async def _initialize(self, client: Client, params: dict) -> dict:
        client.name = wire.client_name(params)
        client.elicitation = wire.asks_forms(params)
        return {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            },
            "authMethods": [],
            "agentInfo": {"name": "sidekicks", "title": "Sidekicks for Matrix", "version": VERSION},
        }

    # ---- sessions -------------------------------------------------------------------------------

    def _cwd_of(self, agent: str | None) -> str:
        configured = self.config.agents[agent].cwd if agent in self.config.agents else None
        return os.path.abspath(configured or os.getcwd())

    async def _list(self, client: Client, params: dict) -> dict:
        entries: list[wire.Listed] = []
        for channel in await self.db.channels():
            members = [m.agent for m in await self.db.members(channel.id)]
            if client.agent is not None and client.agent not in members:
                continue
            agent = client.agent or (members[0] if members else None)
            place = f"direct chat with {channel.direct_agent}" if channel.direct_agent else f"#{channel.name}"
            cwd = self._cwd_of(agent)
            for conversation, last, first in await self.db.conversations(channel.id):
                where = place if not conversation else f"{place}, thread"
                entries.append(
                    wire.Listed(wire.session_id(channel.id, conversation), cwd, wire.title_of(where, first), last)
                )
        entries.sort(key=lambda e: -e.updated_ms)
        return wire.page(entries, params.get("cwd"), params.get("cursor"))

    async def _where(self, client: Client, params: dict):
        """(channel, conversation, portal) of the request's session; an error if unknown."""
        found = wire.conversation_of(params.get("sessionId"))
        channel = await self.db.channel(found[0]) if found is not None else None
        portal = await self.channels.portal_for(channel.room_id) if channel is not None else None
        if found is None or portal is None:
            raise _bad(f"no such conversation: {params.get('sessionId')!r} (session/list lists them)")
        if client.agent is not None and client.agent not in portal.member_names():
            raise _bad(f"{client.agent} is not in that conversation")
        return found[0], found[1], portal

    async def _load(self, client: Client, params: dict) -> dict:
        channel_id, conversation, _ = await self._where(client, params)
        messages = await self.db.messages_in(channel_id, conversation, None, HISTORY)
        session = wire.session_id(channel_id, conversation)
        for update in wire.history(session, [(m.role, m.text) for m in messages]):
            await client.peer.notify("session/update", update)
        client.sessions.add((channel_id, conversation))
        return {}

    async def _resume(self, client: Client, params: dict) -> dict:
        channel_id, conversation, _ = await self._where(client, params)
        client.sessions.add((channel_id, conversation))
        return {}

    async def _close(self, client: Client, params: dict) -> dict:
        found = wire.conversation_of(params.get("sessionId"))
        if found is not None:
            client.sessions.discard(found)
        return {}

    async def _new(self, client: Client, params: dict) -> dict:
        agent = self._agent_for(client, params.get("cwd"))
        room_id, _ = await self.direct_channel(agent, self.config.owners[0])  # as `!dm` finds or makes it
        portal = await self.channels.portal_for(room_id)
        if portal is None:
            raise _bad(f"the direct chat with {agent} could not be opened")
        puppet = await self.identities.puppet(agent)
        text = f"💻 {client.name} opened this conversation: it goes on in this thread."
        root = await puppet.intent.send(portal.room_id, {"msgtype": "m.notice", "body": text})
        client.sessions.add((portal.channel.id, root))
        return {"sessionId": wire.session_id(portal.channel.id, root)}

    def _agent_for(self, client: Client, cwd: Any) -> str:
        """The agent a new conversation is with: `--agent`, else the one working in `cwd`, else the first."""
        agents = self.config.agents
        if client.agent is not None:
            return client.agent
        if isinstance(cwd, str):
            for name, agent in agents.items():
                if agent.cwd and os.path.abspath(agent.cwd) == os.path.abspath(cwd):
                    return name
        if not agents:
            raise _bad("the bridge has no agents")
        return next(iter(agents))

    async def _cancel(self, params: dict) -> None:
        found = wire.conversation_of(params.get("sessionId"))
        channel = await self.db.channel(found[0]) if found is not None else None
        portal = self.channels.portals.get(channel.room_id) if channel is not None else None
        run = portal.run_in(found[1]) if portal is not None and found is not None else None
        if run is not None:  # as `!stop` (commands.py)
            await run.cancel()

    # ---- prompts --------------------------------------------------------------------------------

    async def _prompt(self, client: Client, params: dict) -> dict:
        channel_id, conversation, portal = await self._where(client, params)
        text = wire.prompt_text(params.get("prompt"))
        if not text.strip():
            raise _bad("an empty prompt")
        if not portal.member_names():
            raise _bad("no agent is in this conversation any more")
        client.sessions.add((channel_id, conversation))
        txn = f"sk-acp-{new_id()}"
        pending = {"channel": channel_id, "conversation": conversation, "text": text, "client": client.name}
        wait = PromptWait(client)
        self.hub.prompts[txn] = wait  # before its turns can begin (Hub.began)
        # written down before it can be posted (exactly once), and taken in the same call
        try:
            pending, took = await self._write_down(portal, txn, pending)
        except BaseException:
            self.hub.prompts.pop(txn, None)
            raise
        if took is not None:
            stop_reason = await self._keyed(portal, txn, pending, wait, took)
        else:
            self.hub.prompts.pop(txn, None)
            stop_reason = await self._post_and_take(portal, txn, pending, wait)
        await client.flushed()  # ACP: a prompt's updates come before its answer
        return {"stopReason": stop_reason}

    async def _write_down(self, portal, txn: str, pending: dict) -> tuple[dict, Any]:
        """The prompt written down (`_pending`) with the key it is taken under, and taken: one
        call on the database thread, one transaction (`Store.together`), the agent asked
        without waiting for the homeserver (`_keyed`). Its key is its transaction id, unless
        its answer opens a thread under the quote (`!threads on`, the main timeline), whose
        event id names that thread: then it is not taken yet (None) but once its quote is
        posted (`_post_and_take`)."""
        store, threads = self.db.target, keys.threads(pending["channel"])
        owner, text = self.config.owners[0], pending["text"]
        take = portal.taker(owner, text, txn, text, None, [], pending["conversation"])

        def change() -> tuple[dict, Any]:
            threaded = pending["conversation"] == MAIN and opens_threads(store.get_value(threads))
            written = pending if threaded else {**pending, "key": txn}
            found = json.loads(store.get_value(PENDING) or "{}")
            found[txn] = written
            store.set_value(PENDING, json.dumps(found))
            return written, None if threaded else take()

        return await self.db.run(lambda: store.together(change))

    async def _send_quote(self, portal, txn: str, pending: dict) -> str:
        """The prompt quoted in the room by the conversation's first agent; posted again (after a
        stop) with the same transaction id, the same event."""
        members = portal.member_names()
        if not members:
            raise _bad("no agent is in this conversation any more")
        quoting = await self.identities.puppet(members[0])  # the notices' sender (notices.py)
        content: dict[str, Any] = {"msgtype": "m.notice", "body": wire.quoted(pending["client"], pending["text"])}
        relation = relation_for(pending["conversation"])
        if relation is not None:
            content["m.relates_to"] = relation
        return await quoting.intent.send(portal.room_id, content, txn_id=txn)

    async def _keyed(self, portal, txn: str, pending: dict, wait: PromptWait | None, took) -> str:
        """A prompt taken under its key (its transaction id) before its quote is posted: its
        turns are queued at once and the quote is sent beside them; every event of its turns
        waits for the quote's (`Incoming.shown`: the room shows the prompt first). Once the
        quote is posted, the message is found by its event too and the prompt is forgotten
        (`_shown`); a stop before that posts it again and takes it again, once."""
        event_id = pending.get("event")
        sent: asyncio.Future = asyncio.ensure_future(
            _ready(event_id) if isinstance(event_id, str) else self._send_quote(portal, txn, pending)
        )
        turns = self._queue(portal, txn, pending, wait, took, sent)
        self._later(self._shown(txn, pending["channel"], sent))
        return await self._answered(portal, txn, pending["conversation"], turns, wait)

    async def _take(self, portal, key: str, pending: dict, wait: PromptWait | None) -> list:
        """The prompt taken as the owner's message under `key` (taking a key twice takes it
        once: store/turns.py) and its turns queued; the turns (none when taken already)."""
        conversation, text = pending["conversation"], pending["text"]
        if wait is not None:
            self.hub.prompts[key] = wait
        took = await portal.take(self.config.owners[0], text, key, text, None, [], conversation)
        return self._queue(portal, key, pending, wait, took)

    def _queue(self, portal, key: str, pending: dict, wait: PromptWait | None, took, shown=None) -> list:
        """The turns of a prompt just taken (`Portal.take`'s answer) queued; the turns."""
        decision, taken = took
        turns = taken[1] if taken is not None and not decision.nobody else []
        if wait is not None:
            wait.turns = {turn.id for turn in turns}
        if taken is not None and turns:
            owner = self.config.owners[0]
            incoming = Incoming(taken[0].id, key, pending["text"], None, [], sender=owner, shown=shown)
            for turn in turns:
                portal.submit(turn, incoming)
        return turns

    async def _answered(self, portal, key: str, conversation: str, turns: list, wait: PromptWait | None) -> str:
        """The stop reason of the prompt's turns, once they are over ("end_turn": none)."""
        if not turns:
            self.hub.prompts.pop(key, None)
            return "end_turn"
        answering = {turn.agent for turn in turns}
        prepare.soon(portal, [m for m in portal.member_names() if m not in answering], conversation)
        if wait is None:
            return "end_turn"
        await wait.done.wait()
        return wait.stop_reason

    async def _shown(self, txn: str, channel_id: str, sent: asyncio.Future, taken: bool = True) -> str | None:
        """The quote posted: its event carries the stored message too (a thread opened on it, a
        redaction of it find the prompt) and the prompt is forgotten — or, not yet taken (at
        start, before recovery), its event written down with it. None: not posted (kept for the
        next start)."""
        try:
            event_id = await sent
        except Exception:
            log.exception("the quote of a prompt from an ACP client could not be posted")
            return None
        store = self.db.target

        def change() -> None:
            message = store.message_by_event(txn)
            if message is not None:
                store.add_event(channel_id, message.id, event_id)
            found = json.loads(store.get_value(PENDING) or "{}")
            if taken:
                found.pop(txn, None)
            elif txn in found:
                found[txn] = {**found[txn], "event": event_id}
            store.set_value(PENDING, json.dumps(found))

        await self.db.run(change)
        return event_id

    def _later(self, work: Awaitable) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post_and_take(self, portal, txn: str, pending: dict, wait: PromptWait | None) -> str:
        """The prompt quoted in the room, its event written down, then taken as the owner's
        message under that event id (its answer opens a thread under the quote). Posted again
        after a stop before its event was written down, its transaction id makes it the same
        event."""
        event_id = pending.get("event")
        if not isinstance(event_id, str):  # posted, and its event written down, once
            event_id = await self._send_quote(portal, txn, pending)
            await self._pending(txn, {**pending, "event": event_id})
        turns = await self._take(portal, event_id, pending, wait)
        # taken (or taken already: an earlier run's, whose turns recovery runs): forgotten, once
        # the turns are queued — this write keeps no prompt waiting
        await self._pending(txn, None)
        return await self._answered(portal, event_id, pending["conversation"], turns, wait)

    async def _pending(self, txn: str, pending: dict | None) -> None:
        """Write down (or forget, None) a client's prompt not yet taken."""
        store = self.db.target

        def change() -> None:
            found = json.loads(store.get_value(PENDING) or "{}")
            if pending is None:
                found.pop(txn, None)
            else:
                found[txn] = pending
            store.set_value(PENDING, json.dumps(found))

        await self.db.run(change)

    async def _pending_portals(self):
        """(txn, what was written down, its portal) of each prompt an earlier run left; one
        whose channel is gone is forgotten."""
        found = json.loads(await self.db.get_value(PENDING) or "{}")
        for txn, pending in found.items():
            channel = await self.db.channel(pending.get("channel", ""))
            portal = await self.channels.portal_for(channel.room_id) if channel is not None else None
            if portal is None:
                await self._pending(txn, None)
                continue
            yield txn, pending, portal

    async def post_pending(self) -> None:
        """At start, before recovery runs the turns an earlier run left: the quotes of the
        prompts taken under their key and perhaps not yet shown are posted (the same event, by
        their transaction id), so that the room shows each before its answer."""
        async for txn, pending, portal in self._pending_portals():
            if pending.get("key") != txn or isinstance(pending.get("event"), str):
                continue
            try:
                sent = asyncio.ensure_future(self._send_quote(portal, txn, pending))
                await self._shown(txn, pending["channel"], sent, taken=False)
            except Exception:
                log.exception("the quote of a prompt from an ACP client could not be posted again")

    async def take_pending(self) -> int:
        """At start, after recovery: the client prompts an earlier run wrote down and may not have
        taken are posted (the same event, by their transaction id) and taken (once)."""
        count = 0
        async for txn, pending, portal in self._pending_portals():
            count += 1
            try:
                if pending.get("key") == txn:  # taken again under its key (once), its quote posted
                    took = await portal.take(
                        self.config.owners[0], pending["text"], txn, pending["text"], None, [], pending["conversation"]
                    )
                    await self._keyed(portal, txn, pending, None, took)
                else:
                    await self._post_and_take(portal, txn, pending, None)
            except Exception:
                log.exception("a prompt from an ACP client could not be taken again")
        return count


async def _ready(event_id: str) -> str:
    return event_id


async def _no_direct_channel(agent: str, owner: str) -> tuple[str, bool]:
    raise _bad(f"there is no direct chat with {agent}: open one in Matrix first (!dm {agent})")


async def _empty() -> dict:
    return {}
