"""Who is attached where, and what a turn tells them (docs/sessions.md "Attach an editor").

Each ACP client attached to a conversation (session/load, session/resume, session/new) is told,
while a turn runs there, what the agent sends (`session/update`, forwarded as the agent wrote it)
and, for a turn it did not start, the owner's words as `user_message_chunk`. A permission request
is asked in the room and of every attached client at once: the first answer wins, the others are
withdrawn (`$/cancel_request` to the clients; the room's prompt is edited to say where it was
answered). A client's prompt waits here for the end of the turns of its message: their stop
reason is its answer.

The turns reach it through `ChannelParts.attached` (turns.py calls `began`, `update`, `ended`,
`asker`); nothing in bridge/channels imports this package.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from acp.elicitation import ACCEPT, DECLINE, ElicitationAnswer

from ..channels.asks.permissions import decision_text
from ..coding.render import elicitation_outcome
from . import wire

log = logging.getLogger(__name__)

Where = tuple[str, str]  # (channel id, conversation)


OUTBOX = 10_000  # notifications a client may leave unread before it is let go


@dataclass(eq=False)
class Client:
    """One `sidekicks acp` connection: its ACP peer, the conversations it is attached to, and
    what is still to be sent to it, in order (a client slow to read never holds up an agent)."""

    peer: Any  # its acp.rpc.Peer, once it is made
    agent: str | None  # the agent it was started for (`--agent`), None: any
    name: str = "an ACP client"  # from initialize's clientInfo
    sessions: set[Where] = field(default_factory=set)
    elicitation: bool = False  # it announced form elicitation (clientCapabilities.elicitation.form)
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)

    def send(self, params: dict[str, Any]) -> None:
        """A session/update for this client, sent by `deliver` in order."""
        if self.outbox.qsize() >= OUTBOX:
            log.warning("an attached ACP client reads too slowly: it is let go")
            asyncio.ensure_future(self.peer.close())
            return
        self.outbox.put_nowait(params)

    async def deliver(self) -> None:
        """Sends what `send` queued, until the connection ends."""
        while True:
            params = await self.outbox.get()
            try:
                await self.peer.notify("session/update", params)
            except Exception:
                return
            finally:
                self.outbox.task_done()

    async def flushed(self) -> None:
        """Until everything queued so far is sent (a prompt's answer comes after its updates)."""
        await self.outbox.join()


@dataclass(eq=False)
class PromptWait:
    """A client's prompt, once it is a message in the room: the turns it started, their stop reason."""

    client: Client
    turns: set[str] = field(default_factory=set)
    stop_reason: str = "end_turn"
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Hub:
    def __init__(self) -> None:
        self.clients: set[Client] = set()
        self.prompts: dict[str, PromptWait] = {}  # the prompt's event id → its wait
        self._told: dict[Where, str] = {}  # the last owner message told to a conversation's clients

    def attached(self, where: Where) -> list[Client]:
        return [c for c in self.clients if where in c.sessions]

    def gone(self, client: Client) -> None:
        self.clients.discard(client)
        client.sessions.clear()

    def _notify(self, clients: list[Client], params: dict[str, Any]) -> None:
        for client in clients:
            client.send(params)

    # ---- what turns tell (bridge/channels/turns/turns.py) -----------------------------------------

    def began(self, channel_id: str, conversation: str, event_id: str, text: str) -> None:
        """A turn begins in a conversation: the owner's words go to the clients attached there
        (not to the client that wrote them, nor twice for the turns of one message)."""
        where = (channel_id, conversation)
        if self._told.get(where) == event_id:
            return
        self._told[where] = event_id
        origin = self.prompts.get(event_id)
        clients = [c for c in self.attached(where) if origin is None or c is not origin.client]
        if clients and text:
            self._notify(clients, wire.user_chunk(wire.session_id(*where), text))

    def update(self, channel_id: str, conversation: str, raw: dict[str, Any]) -> None:
        """One of the agent's session/update notifications, forwarded as it came."""
        if not isinstance(raw, dict) or "sessionUpdate" not in raw:
            return  # the bridge's own (a notice, an elicitation completed)
        where = (channel_id, conversation)
        clients = self.attached(where)
        if clients:
            self._notify(clients, {"sessionId": wire.session_id(*where), "update": raw})

    def ended(self, event_id: str, turn_id: str, stop_reason: str) -> None:
        """A turn is over: a client's prompt waiting for it gets its stop reason once all are."""
        wait = self.prompts.get(event_id)
        if wait is None or turn_id not in wait.turns:
            return  # told already (a turn ends once; portal.py tells the ones that never ran)
        wait.stop_reason = stop_reason
        wait.turns.discard(turn_id)
        if not wait.turns:
            wait.done.set()
            self.prompts.pop(event_id, None)

    def asker(
        self, channel_id: str, conversation: str, in_room: Callable[[Any], Awaitable[str | None]]
    ) -> Callable[[Any], Awaitable[str | None]]:
        """The turn's permission asker: in the room (`in_room`) and of every client attached."""
        session = wire.session_id(channel_id, conversation)

        async def ask(request: Any) -> str | None:
            clients = self.attached((channel_id, conversation))
            if not clients:
                return await in_room(request)
            params = {"sessionId": session, "toolCall": request.tool_call, "options": request.options}

            def read(result: Any, client: Client) -> str | None:
                chosen = _chosen(result, request.options)
                if chosen is not None:  # the room's prompt is edited to say it (asks/permissions.py)
                    option = next(o for o in request.options if o.get("optionId") == chosen)
                    _elsewhere(request, f"{decision_text(option)} in {client.name}")
                return chosen

            return await _race(clients, "session/request_permission", params, read, in_room, request)

        return ask

    def questioner(self, channel_id: str, conversation: str, in_room: Callable[[Any], Awaitable[Any]]):
        """The turn's question asker (`elicitation/create`, form mode): in the room and of every
        client attached that announced form elicitation; URL questions in the room only."""
        session = wire.session_id(channel_id, conversation)

        async def ask(request: Any) -> Any:
            clients = [c for c in self.attached((channel_id, conversation)) if c.elicitation]
            if not clients or request.mode != "form":
                return await in_room(request)
            params = {**request.raw, "sessionId": session}

            def read(result: Any, client: Client) -> Any:
                answer = _answer(result)
                if answer is not None:  # the room's question is edited to say it (coding/questions.py)
                    _elsewhere(request, f"{elicitation_outcome(answer.action)} in {client.name}")
                return answer

            return await _race(clients, "elicitation/create", params, read, in_room, request)

        return ask


async def _race(clients: list[Client], method: str, params: dict, read, in_room, request: Any) -> Any:
    """Asked in the room, then — once it is posted there, so that the room always shows it and
    where it was answered — of each client: the first answer wins (`read(result, client)`: the
    answer, or None for a client's that is none — cancelled, an error, gone); the others are
    withdrawn (a client's with `$/cancel_request`, acp/rpc.py)."""
    posted = asyncio.Event()
    object.__setattr__(request, "on_posted", posted.set)  # asks/asks.py `Asking.on_posted`
    room = asyncio.ensure_future(in_room(request))
    asked: dict[asyncio.Future, Client] = {}
    posting = asyncio.ensure_future(posted.wait())
    try:
        await asyncio.wait({room, posting}, return_when=asyncio.FIRST_COMPLETED)
        if room.done():  # answered, or not posted at all: the room decides
            return room.result()
        asked = {asyncio.ensure_future(c.peer.request(method, params)): c for c in clients}
        waiting: set[asyncio.Future] = {room, *asked}
        while waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if room in done:
                return room.result()
            for task in done:
                if task.cancelled() or task.exception() is not None:
                    continue
                answer = read(task.result(), asked[task])
                if answer is not None:
                    return answer
            if waiting == {room}:  # every client said nothing: the room alone decides
                return await room
        return None
    finally:
        for task in [room, posting, *asked]:
            if not task.done():
                task.cancel()
        await asyncio.gather(room, posting, *asked, return_exceptions=True)


def _elsewhere(request: Any, text: str) -> None:
    """What the room's ask says once a client answered it first (a frozen request included)."""
    object.__setattr__(request, "answered_elsewhere", text)


def _answer(result: Any) -> ElicitationAnswer | None:
    """A client's answer to a question: accepted (with its content) or declined; else None."""
    action = result.get("action") if isinstance(result, dict) else None
    if action not in (ACCEPT, DECLINE):
        return None
    content = result.get("content")
    return ElicitationAnswer(action, content if isinstance(content, dict) and action == ACCEPT else None)


def _chosen(result: Any, options: list[dict]) -> str | None:
    """The optionId a client chose, or None (cancelled)."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
        return None
    option_id = outcome.get("optionId")
    return option_id if any(o.get("optionId") == option_id for o in options) else None
