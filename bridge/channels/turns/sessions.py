"""Sessions the owner can see and change, per member and conversation
(docs/architecture.md "Conversations and threads", "Slots and sessions").

Each member has one ACP session per conversation of its channel (the main timeline, each thread:
Portal.session_for). In a conversation:

- `!sessions [AGENT]` lists the member's sessions there: the agent's own list (session/list)
  where it announces one — all its sessions in that working directory, less those the bridge
  keeps for another conversation or channel; those another client made (Zed, the agent's CLI)
  are marked "elsewhere", and `!resume` carries one on here (docs/sessions.md, "Handoff") —
  else the bridge's record (store/sessions.py).
  Each has a number, a title and when it was last used; the current one is marked.
- `!resume [AGENT] N` goes back to session N of that list: session/resume where announced (the
  agent goes on, nothing is replayed), else session/load (its replay is not shown,
  docs/architecture.md "Slots and sessions").
- `!reset [AGENT]` starts a new session there.
- `!sessions [AGENT] delete N` deletes session N (session/delete, where announced), never the
  current one.
- `!fork [AGENT]` goes on with a copy of the session (session/fork) in a new thread: the member
  posts its root ("Forked from …") and the copy is its session of that thread.

With one member AGENT may be left out; with several, `!sessions` lists them all and the others
ask which. Deleting a conversation closes its sessions (`close_sessions`: session/close where
announced): a channel's when it is deleted, a thread's when its root is redacted.

The words are parsed in command_parse.py; the list is drawn by `format_sessions` (pure).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from acp import AcpError

from ..base.conversations import Here, relation_for
from ..rules.command_parse import BadSessionArgs, resolve_agent, session_args
from . import prepare

if TYPE_CHECKING:
    from acp import Pool
    from store import SessionRecord

# A portal (portal.py), not imported: turns.py, which portal.py imports, uses this module.
Portal = Any

log = logging.getLogger(__name__)

TITLE_CHARS = 60  # a title made of the first prompt's first line is cut to this


@dataclass(frozen=True)
class Listed:
    """A session as `!sessions` shows it."""

    session_id: str
    title: str | None
    used: int | None  # ms since the epoch; None: not known
    elsewhere: bool = False  # made by another client (Zed, the agent's CLI…), not by the bridge


def title_line(text: str, limit: int = TITLE_CHARS) -> str | None:
    """A session's title made of its first prompt: the first line with words, spaces squeezed,
    cut at a word to `limit` characters (with "…"). None if there is no such line."""
    for line in text.splitlines():
        line = " ".join(line.split())
        if not line:
            continue
        if len(line) <= limit:
            return line
        head = line[: limit - 1]
        if line[limit - 1] != " " and " " in head:  # a word goes on past the cut: left out
            head = head.rsplit(" ", 1)[0]
        return head.rstrip() + "…"
    return None


def iso_ms(text: str | None) -> int | None:
    """An ISO 8601 time (session/list's `updatedAt`) in ms since the epoch; None if unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def ago(used: int | None, now: int) -> str:
    """How long ago, in words: "just now", "5 min ago", "3 h ago", "2 days ago"."""
    if used is None:
        return "last use unknown"
    seconds = max(0, (now - used) // 1000)
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    days = seconds // 86400
    return f"{days} day{'s' if days > 1 else ''} ago"


def format_sessions(
    title: str, agent: str, listed: list[Listed], current: str | None, now: int, in_thread: bool
) -> list[str]:
    """The lines of one member's sessions: numbered as `!resume N` takes them, the current one
    marked; untitled ones called by the start of their id."""
    where = "in this thread" if in_thread else "here"
    if not listed:
        return [f"{title} (@{agent}): no sessions {where} yet."]
    lines = [f"{title} (@{agent}), sessions {where}:"]
    for number, session in enumerate(listed, 1):
        name = _one_line(session.title) or f"untitled ({session.session_id[:12]})"
        mark = " ← current" if session.session_id == current else ""
        if session.elsewhere and session.session_id != current:
            mark = " — elsewhere (another client's: !resume carries it on here)"
        lines.append(f"  {number}. {name} — {ago(session.used, now)}{mark}")
    return lines


def footer(several: bool) -> str:
    who = " AGENT" if several else ""
    return (
        f"!resume{who} N goes back to one, !reset{who} starts a new one, "
        f"!fork{who} goes on with a copy in a new thread."
    )


def _one_line(text: str | None) -> str | None:
    """An agent's title as one line (an agent's output is not trusted to be tidy)."""
    if not text:
        return None
    line = re.sub(r"\s+", " ", text).strip()
    return line[: TITLE_CHARS * 2] or None


def merged(listed: Iterable[Listed], records: list[SessionRecord], channel_id: str, conversation: str) -> list[Listed]:
    """The agent's session/list, less the sessions the bridge keeps for another conversation or
    channel (they belong there), with the bridge's titles where the agent gave none."""
    owner = {r.session_id: r for r in records}
    kept = []
    for session in listed:
        record = owner.get(session.session_id)
        if record is not None and (record.channel_id, record.conversation) != (channel_id, conversation):
            continue
        title = session.title or (record.title if record is not None else None)
        used = session.used if session.used is not None else (record.used if record is not None else None)
        kept.append(Listed(session.session_id, title, used, elsewhere=record is None))
    return kept


def _now() -> int:
    return int(time.time() * 1000)


class SessionCommands:
    """`!sessions`, `!resume`, `!reset`, `!fork` in a channel's conversation. Everything they
    use comes with the portal (its parts): the pool, the store, notices, settings."""

    async def command(self, portal: Portal, name: str, args: tuple[str, ...], here: Here = Here()) -> None:
        """`!sessions`, `!resume`, `!reset`, `!fork`: on the sessions of the conversation they
        were typed in (`here`: the main timeline or a thread), answered there."""
        conversation, relates = here.conversation, here.relates_to

        async def say(text: str, puppet=None) -> None:
            await portal.parts.notices.notice(portal, text, puppet, relates_to=relates)

        try:
            words = session_args(name, args)
        except BadSessionArgs as exc:
            await say(str(exc))
            return
        members = portal.member_names()
        if not members:
            await say("This channel has no agents.")
            return
        if words.agent is not None:
            agent = resolve_agent(words.agent, portal.parts.aliases)
            if agent not in members:
                await say(f"{words.agent} is not in this channel.")
                return
            targets = [agent]
        elif len(members) == 1 or name == "sessions":
            targets = members
        else:
            example = f"!{name} {members[0]}" + (f" {words.number}" if words.number else "")
            await say(f"Which agent? e.g. {example}")
            return
        try:
            if name == "sessions" and words.delete:
                if len(targets) != 1:
                    await say(f"Which agent? e.g. !sessions {members[0]} delete {words.number}")
                    return
                await say(await self._delete(portal, targets[0], conversation, words.number))
            elif name == "sessions":
                lines = []
                for agent_name in targets:
                    lines += await self._listing(portal, agent_name, conversation)
                lines.append(footer(len(members) > 1))
                await say("\n".join(lines))
            elif name == "resume":
                await say(await self._resume(portal, targets[0], conversation, words.number))
            elif name == "reset":
                await say(await self._reset(portal, targets[0], conversation))
            else:
                await self._fork(portal, targets[0], conversation, say)
        except AcpError as exc:
            await say(f"!{name} failed: {exc}")

    # -- the list --------------------------------------------------------------------------

    async def _entries(self, portal: Portal, agent_name: str, agent, conversation: str) -> list[Listed]:
        """What `!sessions` numbers: the agent's list where it has one, else the bridge's record."""
        db, channel_id = portal.parts.db, portal.channel.id
        if agent.session_capabilities.list:
            place = await portal.parts.places.where(portal, agent_name, conversation)
            found = await agent.list_sessions(place.cwd)
            # a title the agent gave since (session_info_update) shows at once
            listed = [
                Listed(s.session_id, _live_title(agent, s.session_id) or s.title, iso_ms(s.updated_at)) for s in found
            ]
            return merged(listed, await db.sessions.of_agent(agent_name), channel_id, conversation)
        records = await db.sessions.listed(channel_id, agent_name, conversation)
        # a title the agent gave since (session_info_update) wins over the recorded one
        return [Listed(r.session_id, _live_title(agent, r.session_id) or r.title, r.used) for r in records]

    async def _listing(self, portal: Portal, agent_name: str, conversation: str) -> list[str]:
        agent = await portal.parts.pool.get(agent_name)
        entries = await self._entries(portal, agent_name, agent, conversation)
        member = await portal.parts.db.member(portal.channel.id, agent_name, conversation)
        current = member.session_id if member is not None else None
        return format_sessions(
            portal.parts.config.agents[agent_name].title, agent_name, entries, current, _now(), bool(conversation)
        )

    # -- changing the session ----------------------------------------------------------------

    async def _resume(self, portal: Portal, agent_name: str, conversation: str, number: int) -> str:
        parts = portal.parts
        title = parts.config.agents[agent_name].title
        agent = await parts.pool.get(agent_name)
        entries = await self._entries(portal, agent_name, agent, conversation)
        if number > len(entries):
            return f"{title} has no session {number} here (!sessions lists them)."
        chosen = entries[number - 1]
        caps = agent.session_capabilities
        if not caps.resume and not agent.load_session:
            return f"{title} cannot go back to an earlier session (it offers neither session/resume nor session/load)."
        async with portal.session_lock(agent_name, conversation):
            member = await parts.db.member(portal.channel.id, agent_name, conversation)
            if member is not None and member.session_id == chosen.session_id and chosen.session_id in agent.sessions:
                return f"{title} is in that session already."
            cwd = (await parts.places.where(portal, agent_name, conversation)).cwd
            servers = parts.mcp_servers(portal, agent_name, agent, conversation)
            if caps.resume:  # the agent goes on with it, nothing replayed
                await agent.resume_session(chosen.session_id, cwd, servers)
            else:  # its replay is not for the room (acp/client.py drops it)
                await agent.load_session(chosen.session_id, cwd, servers)
            await self._became(
                portal,
                agent_name,
                agent,
                conversation,
                chosen.session_id,
                cwd,
                fresh=False,
                new=False,
                left=member.session_id if member is not None else None,
            )
        name = _one_line(chosen.title) or "untitled"
        return f"{title} goes on in session {number} ({name})."

    async def _delete(self, portal: Portal, agent_name: str, conversation: str, number: int) -> str:
        """`!sessions delete N`: session/delete where the agent announces it; never the
        current one of this conversation (`!reset` first)."""
        parts = portal.parts
        title = parts.config.agents[agent_name].title
        agent = await parts.pool.get(agent_name)
        if not agent.session_capabilities.delete:
            return f"{title} cannot delete sessions (it offers no session/delete)."
        entries = await self._entries(portal, agent_name, agent, conversation)
        if number > len(entries):
            return f"{title} has no session {number} here (!sessions lists them)."
        chosen = entries[number - 1]
        async with portal.session_lock(agent_name, conversation):
            member = await parts.db.member(portal.channel.id, agent_name, conversation)
            if member is not None and member.session_id == chosen.session_id:
                return f"Session {number} is {title}'s current one here: !reset first, then delete it."
            await agent.delete_session(chosen.session_id)
        return f"Deleted {title}'s session {number} ({_one_line(chosen.title) or 'untitled'})."

    async def _reset(self, portal: Portal, agent_name: str, conversation: str) -> str:
        parts = portal.parts
        agent = await parts.pool.get(agent_name)
        async with portal.session_lock(agent_name, conversation):
            member = await parts.db.member(portal.channel.id, agent_name, conversation)
            servers = parts.mcp_servers(portal, agent_name, agent, conversation)
            place = await parts.places.where(portal, agent_name, conversation)
            beside = {"additional_directories": list(place.additional)} if place.additional else {}
            session_id = await agent.new_session(place.cwd, servers, **beside)
            # a fresh start: what was said before is not told to it again
            await self._became(
                portal,
                agent_name,
                agent,
                conversation,
                session_id,
                place.cwd,
                fresh=False,
                new=True,
                left=member.session_id if member is not None else None,
            )
        prepare.soon(portal, [agent_name], conversation)  # a fresh session: prepare.py
        where = "in this thread" if conversation else "here"
        return (
            f"{parts.config.agents[agent_name].title} starts a new session {where}; !sessions lists the earlier ones."
        )

    async def _fork(self, portal: Portal, agent_name: str, conversation: str, say) -> None:
        parts = portal.parts
        title = parts.config.agents[agent_name].title
        agent = await parts.pool.get(agent_name)
        if not agent.session_capabilities.fork:
            await say(f"{title} cannot fork sessions (it offers no session/fork).")
            return
        member = await parts.db.member(portal.channel.id, agent_name, conversation)
        if member is None or not member.session_id:
            await say(f"{title} has no session {'in this thread' if conversation else 'here'} to fork yet.")
            return
        source, _ = await portal.session_for(agent_name, agent, conversation)  # open in this process
        puppet = await parts.identities.puppet(agent_name)
        origin = "the thread" if conversation else "the main timeline"
        text = f"Forked from {origin}: {title} goes on here, in a copy of its session."
        root = await puppet.intent.send(portal.room_id, {"msgtype": "m.notice", "body": text})
        # stored as the member's message: in the new thread, with no mention, it answers
        await parts.db.add_message(portal.channel.id, agent_name, "agent", text, [root])
        async with portal.session_lock(agent_name, root):
            servers = parts.mcp_servers(portal, agent_name, agent, root)
            cwd = (await parts.places.where(portal, agent_name, root)).cwd  # the new thread's place
            try:
                forked = await agent.fork_session(source, cwd, servers)
            except AcpError as exc:
                await parts.notices.notice(portal, f"!fork failed: {exc}", puppet, relates_to=relation_for(root))
                return
            await self._became(portal, agent_name, agent, root, forked, cwd, fresh=False, new=False)

    async def _became(
        self,
        portal: Portal,
        agent_name: str,
        agent,
        conversation: str,
        session_id: str,
        cwd: str | None,
        fresh: bool,
        new: bool,
        left: str | None = None,
    ) -> None:
        """`session_id` is the member's session in `conversation` from now on: stored, recorded
        as used, brought to the member's choices (coding/settings.py). The session it `left` is
        closed where the agent can close sessions (`!resume` opens it again)."""
        parts, channel_id = portal.parts, portal.channel.id
        where = agent.working_dir(cwd) if cwd else None  # as Portal._session_for keeps it
        await parts.db.set_session(
            channel_id, agent_name, session_id, fresh=fresh, cwd=where, conversation=conversation
        )
        await parts.db.sessions.used(
            channel_id, agent_name, conversation, session_id, title=_live_title(agent, session_id)
        )
        await parts.settings.opened(portal, agent_name, agent, session_id, new=new, conversation=conversation)
        if left and left != session_id:
            await close_sessions(parts.pool, [(agent_name, left)])


def _live_title(agent, session_id: str) -> str | None:
    """The title the running agent gave the session (session_info_update), if any."""
    title = agent.state(session_id).title if session_id in agent.sessions else None
    return title if isinstance(title, str) and title.strip() else None


def record_use(portal: Portal, agent_name: str, agent, conversation: str, session_id: str, text: str) -> None:
    """A turn prompts the session: recorded as used now, titled by the agent, else by this
    prompt's first line if it has no title yet (on the database thread, without waiting)."""
    store, channel_id = portal.parts.db.target, portal.channel.id
    title, first = _live_title(agent, session_id), title_line(text)
    portal.parts.db.soon(
        f"the last use of {agent_name}'s session",
        lambda: store.sessions.used(channel_id, agent_name, conversation, session_id, title=title, first_line=first),
    )


async def close_sessions(pool: Pool, sessions: Iterable[tuple[str, str]]) -> int:
    """Close these (agent, session id) with their running agents (session/close where
    announced; an agent not running holds no session open). How many were closed; a failure
    is logged, never raised: the conversation goes anyway."""
    closed = 0
    for agent_name, session_id in dict.fromkeys(sessions):
        try:
            agent = pool.agent(agent_name)
        except KeyError:  # no longer configured: never started
            continue
        if agent is None or session_id not in agent.sessions:
            continue
        try:
            closed += bool(await agent.close_session(session_id))
        except Exception as exc:
            log.warning("closing %s's session %s: %s", agent_name, session_id, exc)
    return closed
