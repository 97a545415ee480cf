"""Agents' slash commands as MSC4391 command descriptions, so that clients which implement it
offer them after `/` even before the agent has started
(docs/architecture.md "Streaming, permissions and cancel", "The store").

Each member's stored commands (the agent's last `available_commands_update`, kept in the store)
are published by its puppet as state events `org.matrix.msc4391.command_description`, one per
command, with the state key MSC4391 derives: the padded base64 of SHA-256(command + the
puppet's user id). They are published when a member joins (from the store: the agent need not
run) and when the agent announces its commands (withdrawn ones are emptied, `{}`); unchanged
commands are not sent again (a digest per room and agent, in the store's values).

The content follows MSC4391 and mautrix-go's `cmdschema` (what gomuks and the clients that
implement it read): `command`, `description` as extensible text (`m.text`), and for a command
that takes input (ACP `input.hint`) one optional string parameter `args` that takes the rest of
the line — described both ways: MSC4391's `type` / `required`, and cmdschema's `schema` /
`optional` / `fi.mau.tail_parameter`.

A message carrying `org.matrix.msc4391.command` ({command, arguments}) runs that command for the
agent it names (its `m.mentions`, else the channel's direct agent, else the member that has the
command) as `/command args` — the same as typing `/agent:command args`.

At most MAX_DESCRIPTIONS commands per agent are published (its first ones, in its order), each
description and hint cut to a few hundred characters: an agent announcing a thousand commands
writes no more than that into every room (docs/SECURITY.md "What an agent cannot do"). The rest
still run as text (`/agent:command`), and `!commands` lists them all.

Sending state needs power in the room. A puppet that made the room (`!dm`) has it; in a room the
bridge bot made (`!new`), the bot raises the puppet to the level the event needs; in a room the
owner made, a refusal is logged once per room and run (the owner may give the puppet that
level), and the text forms work as before.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp

from store import StoreError, keys

from .client import MatrixError

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from .identities import Identities

log = logging.getLogger(__name__)

DESCRIPTION = "org.matrix.msc4391.command_description"
INVOCATION = "org.matrix.msc4391.command"
ARGS = "args"
STATE_DEFAULT = 50  # the Matrix default level for state events a room's power levels leave out
MAX_DESCRIPTIONS = 50  # command descriptions published per agent and room
MAX_NAME = 64  # characters of a command's name; a longer one is not published
MAX_TEXT = 300  # characters of a description or a hint


def _q(value: str) -> str:
    return quote(value, safe="")


# ---- pure ------------------------------------------------------------------------------------


def state_key(command: str, user_id: str) -> str:
    """MSC4391's state key: padded standard base64 of SHA-256(command + sender's user id)."""
    return base64.b64encode(hashlib.sha256((command + user_id).encode("utf-8")).digest()).decode("ascii")


def _text(body: str) -> dict:
    if len(body) > MAX_TEXT:
        body = body[: MAX_TEXT - 1] + "…"
    return {"m.text": [{"body": body}]}


def command_name(command: dict) -> str | None:
    name = command.get("name") if isinstance(command, dict) else None
    name = name.strip().lstrip("/") if isinstance(name, str) else ""
    return name if name and len(name) <= MAX_NAME and not any(c.isspace() for c in name) else None


def description(command: dict) -> dict | None:
    """The content of one command's description; None for a command without a usable name."""
    name = command_name(command)
    if name is None:
        return None
    content: dict[str, Any] = {"command": name, "parameters": []}
    if isinstance(command.get("description"), str) and command["description"].strip():
        content["description"] = _text(command["description"].strip())
    hint = command.get("input", {}).get("hint") if isinstance(command.get("input"), dict) else None
    if isinstance(hint, str):
        parameter: dict[str, Any] = {
            "key": ARGS,
            "type": "string",
            "required": False,  # MSC4391
            "schema": {"schema_type": "primitive", "type": "string"},
            "optional": True,  # cmdschema
        }
        if hint.strip():
            parameter["description"] = _text(hint.strip())
        content["parameters"] = [parameter]
        content["fi.mau.tail_parameter"] = ARGS
    return content


def descriptions(commands: list[dict] | None, user_id: str) -> dict[str, dict]:
    """State key → content of the commands an agent announced (its first MAX_DESCRIPTIONS
    usable ones), as its puppet `user_id`."""
    found: dict[str, dict] = {}
    for command in commands if isinstance(commands, list) else []:
        content = description(command) if isinstance(command, dict) else None
        if content is not None:
            found[state_key(content["command"], user_id)] = content
            if len(found) >= MAX_DESCRIPTIONS:
                break
    return found


def digest(published: dict[str, dict]) -> str:
    return hashlib.sha256(json.dumps(published, sort_keys=True).encode("utf-8")).hexdigest()


def _argument_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, list):
        return " ".join(_argument_text(v) for v in value)
    if isinstance(value, dict):  # room_id / event_id arguments
        return str(value.get("event_id") or value.get("id") or value.get("room_id") or "")
    return ""


def invocation(
    content: dict,
    members: list[str],
    agent_of: Callable[[str], str | None],
    commands_of: Callable[[str], list[dict] | None],
    direct_agent: str | None,
) -> tuple[str, str, str] | None:
    """(agent, command, arguments) of a message carrying an MSC4391 command; None if it carries
    none or names no member. Arguments: `args` (ours), else every argument's value in order."""
    block = content.get(INVOCATION)
    if not isinstance(block, dict) or not isinstance(block.get("command"), str):
        return None
    name = block["command"].strip().lstrip("/")
    if not name or any(c.isspace() for c in name):
        return None
    arguments = block.get("arguments") if isinstance(block.get("arguments"), dict) else {}
    if isinstance(arguments.get(ARGS), str):
        args = arguments[ARGS]
    else:
        args = " ".join(t for t in (_argument_text(v) for v in arguments.values()) if t)
    mentions = content.get("m.mentions")
    ids = mentions.get("user_ids") if isinstance(mentions, dict) else None
    named = [agent_of(i) for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
    named = [a for a in named if a is not None]
    agent = next((a for a in named if a in members), named[0] if named else None)
    if agent is None:
        agent = direct_agent
    if agent is None:
        having = [m for m in members if any(command_name(c) == name for c in commands_of(m) or [])]
        agent = having[0] if having else (members[0] if len(members) == 1 else None)
    return (agent, name, args.strip()) if agent is not None else None


def raised_levels(levels: dict, user_id: str, granter: str, creators: frozenset = frozenset()) -> dict | None:
    """Power levels with `user_id` at the level DESCRIPTION events need, if `granter` may set
    that; None when it may not (or nothing needs to change). A creator absent from `users`
    has unlimited power (room version 12, MSC4289: creators are never listed)."""
    users = levels.get("users") if isinstance(levels.get("users"), dict) else {}
    events = levels.get("events") if isinstance(levels.get("events"), dict) else {}

    def level(value: Any, default: int) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    users_default = level(levels.get("users_default"), 0)
    state_default = level(levels.get("state_default"), STATE_DEFAULT)
    needed = level(events.get(DESCRIPTION), state_default)
    have = level(users.get(user_id), users_default)
    mine = level(users.get(granter), users_default)
    if granter in creators and granter not in users:
        mine = 1 << 62
    if have >= needed or mine < needed or mine < level(events.get("m.room.power_levels"), state_default):
        return None
    return {**levels, "users": {**users, user_id: needed}}


def _forbidden(exc: MatrixError) -> bool:
    return getattr(exc, "status", None) == 403 or "M_FORBIDDEN" in str(exc)


async def _send(puppet, room_id: str, key: str, content: dict) -> bool:
    """Send one description as `puppet`; False if the room forbids it (other errors raise)."""
    try:
        await puppet.intent.send_state(room_id, DESCRIPTION, key, content)
    except MatrixError as exc:
        if not _forbidden(exc):
            raise
        return False
    return True


# ---- publishing ---------------------------------------------------------------------------------


class CommandDescriptions:
    """Keeps each member's command descriptions in its channel rooms."""

    def __init__(self, db: OffLoop, config: Config, identities: Identities):
        self.db, self.config, self.identities = db, config, identities
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._refused: set[tuple[str, str]] = set()  # said once per room and agent, per run
        self._tasks: set[asyncio.Task] = set()

    # entry points

    def member_joined(self, room_id: str, agent: str) -> None:
        """A puppet joined a channel: its stored commands go up (the agent need not run)."""
        self._later(room_id, agent)

    def commands_changed(self, agent: str) -> None:
        """The agent announced its commands (their write is on its way, on the database
        thread before this read): every channel of it is updated."""
        task = asyncio.create_task(self._changed(agent), name=f"msc4391-{agent}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _changed(self, agent: str) -> None:
        store = self.db.target
        try:
            rooms = await self.db.run(
                lambda: [
                    channel.room_id
                    for member in store.members_of_agent(agent)
                    if (channel := store.channel(member.channel_id)) is not None
                ]
            )
        except StoreError:
            return
        for room_id in rooms:
            self._later(room_id, agent)

    async def invoked(self, members: list[str], direct_agent: str | None, content: dict) -> str | None:
        """The text form (`/agent:command args`) of an MSC4391 invocation in a channel of
        `members` (`direct_agent`: a direct channel's), or None."""
        if not isinstance(content.get(INVOCATION), dict):
            return None
        store = self.db.target
        known = await self.db.run(lambda: {m: store.agent_commands(m) for m in members})
        found = invocation(content, members, self.config.agent_for_user_id, known.get, direct_agent)
        if found is None:
            return None
        agent, name, args = found
        return f"/{agent}:{name} {args}".rstrip()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def idle(self) -> None:
        """Wait until every publication under way is done (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # the work

    def _later(self, room_id: str, agent: str) -> None:
        task = asyncio.create_task(self.publish(room_id, agent), name=f"msc4391-{agent}-{room_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def publish(self, room_id: str, agent: str) -> None:
        """Make the room's descriptions by `agent`'s puppet match its stored commands."""
        lock = self._locks.setdefault((room_id, agent), asyncio.Lock())
        async with lock:
            try:
                await self._publish(room_id, agent)
            except (TimeoutError, MatrixError, aiohttp.ClientError, StoreError) as exc:
                log.warning("command descriptions of %s in %s: %s", agent, room_id, exc)
            except Exception:
                log.exception("command descriptions of %s in %s", agent, room_id)

    async def _publish(self, room_id: str, agent: str) -> None:
        db = self.db
        if agent not in self.config.agents:
            return
        commands = await db.agent_commands(agent)
        if commands is None:
            return  # never announced: nothing to offer yet
        puppet = await self.identities.puppet(agent)
        wanted = descriptions(commands, puppet.user_id)
        key = keys.command_digest(room_id, agent)
        if await db.get_value(key) == digest(wanted):
            return
        status, state = await puppet.intent.request("GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/state")
        if status != 200 or not isinstance(state, list):
            log.info("command descriptions of %s in %s: cannot read the room state (%s)", agent, room_id, status)
            return
        present = {
            e.get("state_key"): e.get("content")
            for e in state
            if isinstance(e, dict) and e.get("type") == DESCRIPTION and e.get("sender") == puppet.user_id
        }
        changes = {k: v for k, v in wanted.items() if present.get(k) != v}
        changes.update({k: {} for k, v in present.items() if k not in wanted and v})
        for state_key_, content in changes.items():
            if not await self._put(puppet, room_id, agent, state_key_, content):
                return
        await db.set_value(key, digest(wanted))
        if changes:
            log.info("%s: %d command description(s) in %s updated", agent, len(changes), room_id)

    async def _put(self, puppet, room_id: str, agent: str, key: str, content: dict) -> bool:
        if await _send(puppet, room_id, key, content):
            return True
        if await self._grant(room_id, puppet.user_id) and await _send(puppet, room_id, key, content):
            return True
        if (room_id, agent) not in self._refused:
            self._refused.add((room_id, agent))
            log.info(
                "%s's commands are not offered after / in %s: the room does not let %s send %s "
                "(give it the power level for that event); the text forms work as before",
                agent,
                room_id,
                puppet.user_id,
                DESCRIPTION,
            )
        return False

    async def _grant(self, room_id: str, user_id: str) -> bool:
        """Raise `user_id` to the level descriptions need, as the bridge bot, if it can (a room
        it made). False when it cannot."""
        bot = self.identities.bot
        status, state = await bot.intent.request("GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/state")
        if status != 200 or not isinstance(state, list):
            return False
        found = {e.get("type"): e for e in state if isinstance(e, dict) and e.get("state_key") == ""}
        levels = (found.get("m.room.power_levels") or {}).get("content")
        create = found.get("m.room.create") or {}
        extra = (create.get("content") or {}).get("additional_creators")
        creators = frozenset([create.get("sender"), *(extra if isinstance(extra, list) else [])])
        if not isinstance(levels, dict):
            return False
        raised = raised_levels(levels, user_id, bot.user_id, creators)
        if raised is None:
            return False
        try:
            await bot.intent.send_state(room_id, "m.room.power_levels", "", raised)
        except MatrixError as exc:
            log.info("could not raise %s in %s: %s", user_id, room_id, exc)
            return False
        return True
