"""What each tool of the `matrix` MCP server does, always within the caller's own conversation
(`Scope`: its channel's room, its conversation, its agent). Arguments come checked (tools.py);
a refusal is `Refused` with one line for the agent, and nothing is done.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from acp.remote import files_refused
from store.ids import now_ms
from store.schedules import NotYours, TooManySchedules

from ..channels.base.conversations import relation_for
from ..channels.rules.command_parse import resolve_agent
from ..channels.schedules.schedule_frames import agent_line
from ..channels.schedules.schedule_times import first_due, when_text
from ..channels.turns.agent_files import Refused as FileRefused
from ..channels.turns.agent_files import read_agent_file, roots_for
from ..channels.turns.handing import HandoffRefused
from ..channels.turns.handing import hand_off as hand_over
from ..matrix.media import MediaError, OutgoingMedia, mib, post
from ..matrix.puppet import relating
from .tools import history_text, matches

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from ..channels.base.registry import Channels
    from ..matrix.identities import Identities

HISTORY_SCAN = 5000  # messages a `history` query looks through at most (the newest)
HISTORY_READ_CHARS = 4000  # of each message's text, read and searched (the shown part is shorter)
HISTORY_SCAN_CHARS = 2_000_000  # characters a `history` call reads at most (a page past it not read)


class Refused(Exception):
    """The tool did nothing; the line says why."""


@dataclass(frozen=True)
class Scope:
    """What one session's tools can reach: its conversation, and who it is."""

    channel_id: str
    room_id: str
    conversation: str  # "" the room's main timeline
    agent: str


@dataclass(frozen=True)
class Means:
    """What the tools act through: the store, the config, the puppets (each tool acts as the
    caller's), and the scheduler's bell (a schedule added — given — or cancelled)."""

    db: OffLoop
    config: Config
    identities: Identities
    schedules_changed: Callable[..., None]
    channels: Channels | None = None  # the open portals: a hand-off queues its turn in one


async def run(means: Means, scope: Scope, tool: str, args: dict[str, Any]) -> str:
    return await _ACTIONS[tool](means, scope, **args)


async def standing(db: OffLoop, scope: Scope) -> str | None:
    """None while the caller may still act in its conversation, else why not (asked before
    every call, docs/SECURITY.md): it must still be a member of the channel (not left, not
    kicked), and its conversation must still have its session (a deleted thread's are closed)."""
    member = await db.member(scope.channel_id, scope.agent, scope.conversation)
    if member is None:
        return (
            f"{scope.agent} is no longer a member of this channel (it left or was removed): its tools here are revoked"
        )
    if not member.session_id:
        where = "this thread" if scope.conversation else "this conversation"
        return f"the session in {where} was closed (the thread was deleted): its tools are revoked"
    return None


async def history(means: Means, scope: Scope, limit: int, query: str | None) -> str:
    """The conversation's last messages (`limit`), or the last of them holding `query`; what is
    read is bounded in bytes: each text's first HISTORY_READ_CHARS, HISTORY_SCAN_CHARS in all."""
    store = means.db.target
    scan = HISTORY_SCAN if query else limit
    texts = await means.db.run(
        lambda: store.recent_texts(scope.channel_id, scope.conversation, scan, HISTORY_READ_CHARS, HISTORY_SCAN_CHARS)
    )
    found = [line for line in texts if matches(line[2], query)][-limit:]
    return history_text(found, query)


async def _session_dir(means: Means, scope: Scope) -> str | None:
    """The directory the caller's session works in, as stored with the member (a thread's
    worktree, the channel's `!cwd`); None when none is stored (the configured cwd then)."""
    store = means.db.target
    member = await means.db.run(lambda: store.member(scope.channel_id, scope.agent, scope.conversation))
    return member.session_cwd if member is not None else None


def _working_dir(means: Means, agent: str, session_dir: str | None) -> str:
    cwd = session_dir or means.config.agents[agent].cwd
    return os.path.abspath(os.path.expanduser(cwd)) if cwd else os.getcwd()


async def send_file(means: Means, scope: Scope, path: str, caption: str | None) -> str:
    """Through the one gate for files an agent hands the bridge (channels/turns/agent_files.py), from
    the directory its session works in (a relative path is read from there too)."""
    config = means.config
    session_dir = await _session_dir(means, scope)
    wanted = (
        path
        if os.path.isabs(os.path.expanduser(path))
        else os.path.join(_working_dir(means, scope.agent, session_dir), path)
    )
    wanted = os.path.expanduser(wanted)
    roots = roots_for(config, scope.agent, session_dir)
    if roots.remote is not None:
        raise Refused(f"{path} was not posted: {files_refused(scope.agent, roots.remote)}")
    read = await asyncio.to_thread(read_agent_file, wanted, roots.allowed, roots.forbidden, config.attachment_bytes)
    name = Path(wanted).name or "file"
    if isinstance(read, FileRefused):
        raise Refused(f"{path} was not posted: {read.reason}")
    mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
    msgtype = (
        "m.image"
        if mime.startswith("image/") and mime != "image/svg+xml"
        else ("m.audio" if mime.startswith("audio/") else "m.file")
    )
    # into the caller's conversation: a thread's file goes into the thread
    puppet = relating(await means.identities.puppet(scope.agent), scope.room_id, relation_for(scope.conversation))
    try:
        event_id = await post(
            puppet.intent, scope.room_id, OutgoingMedia(msgtype, name, mime, read), config.attachment_bytes
        )
    except MediaError as exc:
        raise Refused(f"{path} was not posted: {exc}") from None
    if caption:
        await puppet.intent.send(scope.room_id, {"msgtype": "m.text", "body": caption})
    return f"Posted {name} ({mib(len(read))}) in the conversation as {event_id}."


async def react(means: Means, scope: Scope, event_id: str, key: str) -> str:
    """Only on an event of this room: the homeserver is asked for it in this room."""
    puppet = await means.identities.puppet(scope.agent)
    status, event = await puppet.intent.request(
        "GET", f"/_matrix/client/v3/rooms/{quote(scope.room_id, safe='')}/event/{quote(event_id, safe='')}"
    )
    if status != 200 or not isinstance(event, dict) or event.get("room_id", scope.room_id) != scope.room_id:
        raise Refused(f"there is no message {event_id} in this conversation")
    await puppet.intent.react(scope.room_id, event_id, key)
    return f"Reacted {key} to {event_id}."


async def schedule(
    means: Means,
    scope: Scope,
    prompt: str,
    in_seconds: float | None = None,
    at: str | None = None,
    cron: str | None = None,
) -> str:
    """A repeating schedule waits for the owner's approval (the scheduler asks in the room); a
    single run is posted in the room with the command that cancels it."""
    due = first_due(now_ms(), in_seconds=in_seconds, at=at, cron=cron)
    try:
        made = await means.db.schedules.add(
            scope.channel_id,
            scope.conversation,
            scope.agent,
            prompt,
            due,
            cron.strip() if cron else None,
            means.config.schedules_per_conversation,
            waiting=cron is not None,
        )
    except TooManySchedules as exc:
        raise Refused(f"not scheduled: {exc} (limits.schedules_per_conversation); cancel one first") from None
    means.schedules_changed(made)
    if made.cron is not None:
        return (
            f"Schedule id {made.number} (on cron {made.cron}) waits for the owner's approval, asked in "
            "the room: it does not run before. `schedules` says whether it was approved or declined."
        )
    return (
        f"Scheduled as id {made.number}: {when_text(made.due, made.cron)}. It was posted in the room "
        f"with the command that cancels it (!unschedule {made.number})."
    )


async def schedules(means: Means, scope: Scope) -> str:
    """The caller's own schedules in this conversation, and the ones the owner declined since
    it last asked."""
    declined = await means.db.schedules.declined_news(scope.channel_id, scope.conversation, scope.agent)
    listed = await means.db.schedules.listed(scope.channel_id, scope.conversation, scope.agent)
    lines = [agent_line(s.number, s.state, s.due, s.cron, s.prompt) for s in declined + listed]
    return "\n".join(lines) if lines else "You have nothing scheduled in this conversation."


async def cancel_schedule(means: Means, scope: Scope, id: int) -> str:
    try:
        cancelled = await means.db.schedules.cancel(scope.channel_id, id, scope.conversation, scope.agent)
    except NotYours:
        raise Refused(f"schedule {id} is another agent's: you see and cancel only your own (see `schedules`)") from None
    if cancelled is None:
        raise Refused(f"you have no schedule {id} in this conversation (see `schedules`)")
    record, _ = cancelled
    means.schedules_changed(None, record.id)
    return f"Cancelled schedule {id}: {record.prompt}"


async def handoff(means: Means, scope: Scope, agent: str, request: str) -> str:
    """The next turn of the caller's conversation to another member (channels/turns/handing.py)."""
    portal = means.channels.portals.get(scope.room_id) if means.channels is not None else None
    if portal is None:
        raise Refused("this channel is not open in the running bridge: nothing was handed on")
    resolved = resolve_agent(agent, portal.parts.aliases) or agent  # `@bob`, a title, a puppet's id
    try:
        return await hand_over(portal, scope.conversation, scope.agent, resolved, request)
    except HandoffRefused as exc:
        raise Refused(str(exc)) from None


_ACTIONS = {
    "history": history,
    "send_file": send_file,
    "react": react,
    "schedule": schedule,
    "schedules": schedules,
    "cancel_schedule": cancel_schedule,
    "handoff": handoff,
}
