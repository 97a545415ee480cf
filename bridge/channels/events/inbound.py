"""What each kind of incoming room event does (docs/architecture.md "The Matrix side",
"Who answers", "Streaming, permissions and cancel"). `Inbound` makes the dispatcher
(bridge/matrix/dispatch.py) with these handlers; it calls them one event at a time, with its type,
room, sender and content already checked; nothing else calls them.

- `m.room.member`: an owner's invite of a puppet makes the room a channel (or adds a member) and
  the puppet joins; others' invites are declined; a kick removes the member. The bot's own
  memberships go to the bot commands.
- `m.room.message`, `m.sticker`, polls: an owner's `!` command, a numbered answer to a
  permission question, or a prompt — text, an attachment, an MSC4391 command (bridge/matrix/media.py
  says what each kind is) — stored, then queued in the channel's portal. A reply's fallback
  quote is stripped first (bridge/matrix/replies.py).
- `m.reaction`: an owner's answer to a permission question, or 🛑 on the answer being written.
- `m.room.redaction`: the owner withdrew a message.
- `m.room.name`: the owner renamed a channel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from store import StoreClosed

from ...matrix.client import MatrixError
from ...matrix.dispatch import Dispatcher, Encryption, transient
from ...matrix.media import read_message
from ...matrix.replies import replied_to, without_fallback
from ..base.conversations import conversation_of, relation_for
from ..turns import prepare
from ..turns.incoming import Incoming
from ..turns.mentions import named
from .upgrade import RoomUpgrades

if TYPE_CHECKING:
    from ...matrix.dispatch import Handler, Outage
    from ...matrix.msc4391 import CommandDescriptions
    from ...matrix.puppet import Puppet
    from ..asks.asks import Asks
    from ..asks.permissions import Permissions
    from ..base.parts import RoomParts
    from ..commands.commands import BotCommands
    from ..turns.portal import Portal

log = logging.getLogger(__name__)

CATCH_UP_LIMIT = 50  # events a page read back holds (one page when a puppet joins)
# pages read back at most for a time (`since_ms`): a busy room's answers and their edits fill a
# page in seconds, and a message older than the first page is a message lost (or answered late)
CATCH_UP_PAGES = 40


def _q(value: str) -> str:
    return quote(value, safe="")


def invite_state(event: dict, kind: str) -> dict | None:
    """Content of a state event of `kind` in an invite's stripped room state."""
    for state in (event.get("unsigned") or {}).get("invite_room_state") or []:
        if isinstance(state, dict) and state.get("type") == kind:
            content = state.get("content")
            return content if isinstance(content, dict) else {}
    return None


def _room_name(event: dict) -> str | None:
    name = (invite_state(event, "m.room.name") or {}).get("name")
    return name.strip() if isinstance(name, str) and name.strip() else None


def missed_in(chunk: list[dict], since_event_id: str | None, since_ms: int | None, missed: list[dict]) -> bool:
    """Add to `missed` the messages of `chunk` (a page of a room's events, newest first) after
    `since_event_id` or from `since_ms` (origin time) on; True once the page reached that point."""
    for event in chunk:
        if event.get("event_id") == since_event_id:
            return True
        if since_ms is not None and not (
            isinstance(event.get("origin_server_ts"), int) and event["origin_server_ts"] >= since_ms
        ):
            return True
        if event.get("type") in ("m.room.message", "m.room.encrypted"):
            missed.append(event)
    return False


class OpenQuestions(Protocol):
    """The agents' open questions (coding/questions.py): their asks, answered in words."""

    asks: Asks


class Inbound:
    """The way in and what it leads to: it makes the `Dispatcher` (bridge/matrix/dispatch.py)
    with its handlers, so that the messages a puppet catches up on pass the same dispatcher
    as a transaction's events."""

    def __init__(
        self,
        rooms: RoomParts,
        commands: BotCommands,
        permissions: Permissions,
        questions: OpenQuestions,
        descriptions: CommandDescriptions,
        outage: Outage,
        encryption: Encryption | None = None,
        redacted: Callable[[str, str], None] | None = None,
    ):
        """`outage`: the watch over a store gone away (bridge/outage.py); `encryption`: the
        dispatcher's crypto seam (bridge/e2ee `Decrypting`), None for rooms it cannot read (said
        once per room); `redacted`: told of every message the owner redacts (room, event id): a
        deleted thread's worktrees (coding/workplaces.py)."""
        self.config, self.db, self.channels = rooms.config, rooms.db, rooms.channels
        self.identities, self.notices, self.commands = rooms.identities, rooms.notices, commands
        self.permissions, self.questions, self.descriptions = permissions, questions, descriptions
        self.redacted = redacted
        self._encryption_noted: set[str] = set()
        self.encryption = encryption if encryption is not None else Encryption(self.say_encrypted, self.is_owner)
        # a room upgraded: the channel moves (upgrade.py)
        self.upgrades = RoomUpgrades(rooms.db, rooms.channels, rooms.identities, rooms.notices, descriptions)
        # every incoming event passes it, to its kind's handler below
        self.dispatcher = Dispatcher(
            rooms.config,
            rooms.db,
            self._handlers(),
            outage,
            self.encryption,
            is_channel=rooms.channels.portals.__contains__,
        )

    def _handlers(self) -> dict[str, Handler]:
        """The dispatcher's handler of each event kind."""
        return {
            "m.room.member": self.member,
            "m.room.message": self.message,
            "m.sticker": self.message,  # as an image (bridge/matrix/media.py)
            "m.poll.start": self.message,  # as its question and answers
            "org.matrix.msc3381.poll.start": self.message,
            "m.reaction": self.reaction,
            "m.room.redaction": self.redaction,
            "m.room.name": self.room_name,
            "m.room.tombstone": self.upgrades.room_upgraded,
        }

    def is_owner(self, user_id: str) -> bool:
        return user_id in self.config.owners

    # ---- memberships --------------------------------------------------------------------------

    async def member(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        config, channels = self.config, self.channels
        target = event.get("state_key")
        membership = content.get("membership")
        if not isinstance(target, str):
            return
        if target == config.bot_user_id:
            await self.commands.on_bot_member(event, room_id, sender, content)
            return
        agent = config.agent_for_user_id(target)
        if agent is None:
            return
        puppet = await self.identities.puppet(agent)
        if membership == "invite":
            if sender == config.bot_user_id or config.agent_for_user_id(sender):
                return  # the bridge's own invite (add_agent), which joins by itself
            if not self.is_owner(sender):
                log.info("%s invited %s: declined (not an owner)", sender, target)
                await puppet.intent.leave(room_id)
                return
            # joined first, a member after: a join the homeserver refuses leaves no member that
            # is not in the room; one it could not do now (5xx) raises, and the invite comes again
            if not await puppet.intent.join(room_id):
                return
            portal = await channels.portal_for(room_id)
            made = portal is None
            if portal is None:
                direct = bool(content.get("is_direct"))
                name = _room_name(event) or (agent if direct else room_id)
                await self.db.create_channel(room_id, name, agent if direct else None)
                portal = await channels.portal_for(room_id)
            await portal.joined(agent)
            self.descriptions.member_joined(room_id, agent)  # MSC4391, from the store
            if invite_state(event, "m.room.encryption") is not None:
                await self.encryption.room_encrypted(room_id)
            await self.catch_up(puppet, room_id, event.get("event_id"))
            if made:  # channels sit in the "Sidekicks" space (docs/architecture.md "The Matrix side")
                await self.commands.channel_created(room_id)
        elif membership in ("leave", "ban") and sender != target:
            portal = await channels.portal_for(room_id)
            if portal is not None:
                await portal.left(agent)

    async def catch_up(
        self, puppet: Puppet, room_id: str, since_event_id: str | None, since_ms: int | None = None
    ) -> int:
        """Handle the owner's messages sent between the invite and the puppet's join (back to
        `since_event_id`, one page), or since `since_ms` (origin time; page after page, up to
        CATCH_UP_PAGES: a read-back after a gap or an outage must reach that far back). The
        homeserver's status: anything but 200 read nothing.

        The homeserver only sends an appservice the events of rooms where one of its users has
        joined, so a message typed right after opening a DM would otherwise never arrive. They
        go through the dispatcher like any other event (one it handled already is passed over).
        """
        path = f"/_matrix/client/v3/rooms/{_q(room_id)}/messages?dir=b&limit={CATCH_UP_LIMIT}"
        missed: list[dict] = []
        page_from: str | None = None
        for _page in range(CATCH_UP_PAGES if since_ms is not None else 1):
            status, body = await puppet.intent.request("GET", path + (f"&from={_q(page_from)}" if page_from else ""))
            if status != 200:
                return status
            chunk = [event for event in body.get("chunk") or [] if isinstance(event, dict)]
            page_from = body.get("end") if isinstance(body.get("end"), str) else None
            if missed_in(chunk, since_event_id, since_ms, missed) or not chunk or page_from is None:
                break
        else:
            if since_ms is not None:
                log.warning("reading %s back: %d pages did not reach back far enough", room_id, CATCH_UP_PAGES)
        for event in reversed(missed):
            event.setdefault("room_id", room_id)
            await self.dispatcher.event(event)
        return status

    async def catch_up_since(self, since_ms: int) -> int:
        """The homeserver answers again after failing (matrix/reachability.py): every loaded
        channel's messages since `since_ms` go through the dispatcher — a homeserver killed can
        lose events before they reach the appservice. How many channels were read."""
        read = 0
        for portal in list(self.channels.portals.values()):
            read += bool(await self._read_back(portal, since_ms, "after the homeserver was away"))
        return read

    async def catch_up_rooms(self, since_ms: dict[str, int]) -> tuple[int, list[str]]:
        """The messages of these rooms (those that are channels) since their time (origin, ms),
        through the dispatcher: a transaction came after a gap in the homeserver's numbering, and
        one left behind may hold earlier messages of its rooms (matrix/appservice.py
        `TransactionOrder`). How many channels were read, and the rooms that could not be read
        for now (the homeserver or the store away: worth trying again)."""
        read, failed = 0, []
        for room_id, since in since_ms.items():
            portal = await self.channels.portal_for(room_id)
            if portal is None:
                continue
            done = await self._read_back(portal, since, "after a gap in the transactions")
            read += bool(done)
            if done is False:
                failed.append(room_id)
        return read, failed

    async def _read_back(self, portal: Portal, since_ms: int, why: str) -> bool | None:
        """True once read back; False when that failed for now (transient: dispatch.py), None
        when there is no one to read with or the homeserver refuses it for good (a 4xx)."""
        members = portal.member_names()
        if not members:
            return None
        try:
            status = await self.catch_up(await self.identities.puppet(members[0]), portal.room_id, None, since_ms)
            if status != 200:
                raise MatrixError(f"the homeserver answered {status}", status)
            return True
        except Exception as exc:  # the next room still gets its turn
            log.warning("catching up %s %s: %s", portal.room_id, why, exc)
            return False if transient(exc) else None

    async def say_encrypted(self, room_id: str) -> None:
        """Once per room and run: the bridge cannot read end-to-end encrypted rooms."""
        portal = await self.channels.portal_for(room_id)
        if portal is None or portal.room_id in self._encryption_noted:
            return
        self._encryption_noted.add(portal.room_id)
        await self.notices.notice(
            portal,
            "This room is end-to-end encrypted, and agents cannot read encrypted "
            "messages. Make a new room without encryption (or start a new direct "
            "message) to talk to agents.",
        )

    # ---- messages -----------------------------------------------------------------------------

    async def message(self, event: dict, room_id: str, sender: str, content: dict) -> bool | None:
        """An owner's message; True once it is taken (store/turns.py `take` records the event
        as handled in the same write, Dispatcher)."""
        if not self.is_owner(sender):
            return  # strangers never reach an agent (docs/architecture.md "The Matrix side")
        relates = content.get("m.relates_to")
        if "m.new_content" in content or (isinstance(relates, dict) and relates.get("rel_type") == "m.replace"):
            return  # edits of earlier messages are not new prompts
        conversation = conversation_of(content)  # the main timeline, or a thread
        # (docs/architecture.md "Conversations and threads")
        content = without_fallback(content)  # a reply's quote is neither a mention nor history
        # what this kind of message says to agents (bridge/matrix/media.py;
        # docs/using.md "What each message kind does")
        read = read_message(event.get("type", "m.room.message"), content, self.config.attachment_bytes)
        body = read.text
        if read.plain and await self._taken_as_text(event, room_id, sender, body, content, conversation):
            return  # empty, a command, an answer to an ask, or a steer
        portal = await self.channels.portal_for(room_id)
        if portal is None or read.silent:
            return
        event_id = event.get("event_id", "")
        if read.note is not None:
            await self.notices.notice(portal, read.note, relates_to=relation_for(conversation, event_id))
            return
        formatted = read.formatted
        mentions = mentioned(content)
        # MSC4391: `/agent:command args`
        command = await self.descriptions.invoked(portal.member_names(), portal.channel.direct_agent, content)
        stored = read.stored
        if command is not None:
            body, formatted, mentions, stored = command, None, [], command
        elif not read.passed_on:
            return
        else:  # a pill's display name reaches agents as `@name`, now and in context lines
            # (docs/architecture.md "Who answers")
            config = self.config
            titles = {name: agent.title for name, agent in config.agents.items()}
            body, stored = (
                named(text, formatted, mentions, config.agent_for_user_id, titles) for text in (body, stored)
            )
        mentions = [m for m in mentions if isinstance(m, str)]
        # routed and stored with its turns together (store/turns.py): from here on every turn
        # starts once, whatever stops the bridge and whichever path finds it first
        decision, taken = await portal.take(sender, stored, event_id, body, formatted, mentions, conversation)
        if taken is None:
            return True  # already taken (a transaction delivered again)
        message, turns = taken
        if decision.nobody:
            await self._nobody_answers(portal, conversation, event_id)
            return True
        incoming = Incoming(message.id, event_id, body, formatted, mentions, attachment=read.attachment, sender=sender)
        for turn in turns:
            portal.submit(turn, incoming)
        answering = {turn.agent for turn in turns}  # the others have one more unseen message
        prepare.soon(portal, [m for m in portal.member_names() if m not in answering], conversation)
        return True

    async def _nobody_answers(self, portal, conversation: str, event_id: str) -> None:
        members = portal.member_names()
        await self.notices.notice(
            portal,
            "Nobody answers this one: mention an agent, like "
            + ", ".join(f"@{name}" for name in members[:3] or self.config.agents)
            + ", to get an answer.",
            relates_to=relation_for(conversation, event_id),
        )

    async def _taken_as_text(
        self, event: dict, room_id: str, sender: str, body: str, content: dict, conversation: str
    ) -> bool:
        """A plain text message that is not a prompt: empty, a `!command`, the answer to an
        agent's question or permission ask, or a reply that steers a running answer."""
        if not body.strip():
            return True
        if body.lstrip().startswith("!") and await self.commands.handle(event, room_id, sender, body):
            return True
        reply_to = replied_to(content)
        # an ask of this conversation: answered by the owner whose message started its turn
        if await self.questions.asks.on_words(
            room_id, body, reply_to, loose=False, sender=sender, conversation=conversation
        ):
            return True  # a reply to an agent's question (bridge/coding/questions.py)
        if await self.permissions.asks.on_number(
            room_id,
            body,
            reply_to,
            sender,
            conversation,
            relates_to=relation_for(conversation, event.get("event_id")),
        ):
            return True
        if await self.questions.asks.on_words(room_id, body, None, sender=sender, conversation=conversation):
            return True  # the answer to the conversation's open question
        # a reply to the answer being written steers it (docs/sessions.md)
        return reply_to is not None and await self._steer(room_id, reply_to, body)

    async def _steer(self, room_id: str, reply_to: str, body: str) -> bool:
        """A reply to an answer still being written: that turn is steered with it (turns.py
        `RunningTurn.steer`); False when the answer replied to is not running (an ordinary message)."""
        portal = self.channels.portals.get(room_id)
        for run in list(portal.runs.values()) if portal is not None else ():
            if reply_to in run.answer.event_ids:
                return await run.steer(body)
        return False

    async def reaction(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        relates = content.get("m.relates_to")
        if not self.is_owner(sender) or not isinstance(relates, dict):
            return
        if await self.permissions.asks.on_reaction(room_id, relates, sender):
            return
        key = relates.get("key")
        if relates.get("rel_type") == "m.annotation" and isinstance(key, str) and key.replace("\ufe0f", "") == "🛑":
            portal = self.channels.portals.get(room_id)
            for run in list(portal.runs.values()) if portal is not None else ():  # whichever conversation's
                if relates.get("event_id") in run.answer.event_ids:
                    log.info("🛑 on the answer in %s: cancelling", room_id)
                    await run.cancel()

    async def _prompt_key(self, event_id: str) -> str:
        """The key the message `event_id` carries was taken under: its first event's — a prompt
        from an attached ACP client is taken under its quote's transaction id before the quote
        is posted (bridge/attach/service.py) — else the event itself."""
        try:
            message = await self.db.message_by_event(event_id)
        except StoreClosed:
            return event_id
        first = message.event_ids[0] if message is not None and message.event_ids else event_id
        return first if message is not None and message.role == "user" else event_id

    async def redaction(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        """The owner redacted a message. A prompt being answered: the answer is cancelled
        (docs/architecture.md "Streaming, permissions and cancel"); one still queued is never
        answered; and the store forgets it, so that no agent is told it later as context."""
        if not self.is_owner(sender):
            return
        redacts = content.get("redacts") or event.get("redacts")  # room v11 / older versions
        if not isinstance(redacts, str):
            return
        prompt = await self._prompt_key(redacts)
        portal: Portal | None = self.channels.portals.get(room_id)  # a message queued or answered has its portal loaded
        if portal is not None:
            runs = list(portal.runs.values())
            if portal.withdraw(prompt):
                log.info("a message in %s was redacted before its answers were done", room_id)
            for run in runs:
                if run.prompt_event_id == prompt:
                    log.info("the prompt answered in %s was redacted: cancelling", room_id)
                    await run.cancel()
        try:
            await self.db.turns.drop_prompt(prompt)  # its turns not begun never start, also after a restart
            if await self.db.delete_message_by_event(redacts):
                log.info("a redacted message in %s is forgotten", room_id)
            await self.commands.thread_gone(room_id, redacts)  # a thread's root: its sessions close
        except StoreClosed:
            pass
        if self.redacted is not None:
            self.redacted(room_id, redacts)

    async def room_name(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        if not self.is_owner(sender):
            return
        portal = await self.channels.portal_for(room_id)
        name = content.get("name")
        if portal is not None and isinstance(name, str) and name.strip():
            await self.db.rename_channel(portal.channel.id, name.strip())
            portal.channel = await self.db.channel(portal.channel.id)


def mentioned(content: dict) -> list:
    """The user ids a message's `m.mentions` names (a list, whatever the sender put there)."""
    mentions = content.get("m.mentions")
    ids = (mentions.get("user_ids") if isinstance(mentions, dict) else None) or []
    return ids if isinstance(ids, list) else []
