"""A portal: one Matrix room that is a Sidekicks channel (mautrix's word for a bridged room).

It owns the channel's queue: messages are answered one at a time, each by the agents routing
picks, one after the other — never two agents in one channel at once (ADR §2).
"""
from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store import Channel

from ..matrix.media import reread, restored
from .mentions import parse
from .routing import route

if TYPE_CHECKING:
    from ..bridge import Bridge

log = logging.getLogger(__name__)


@dataclass
class Incoming:
    """An owner's message, already stored."""
    message_id: str
    event_id: str
    body: str
    formatted_body: str | None = None
    mention_ids: list[str] = field(default_factory=list)
    resumed: bool = False  # taken by an earlier run that stopped before answering it all
    skip_agents: frozenset = frozenset()  # whose answer that run had begun or finished
    attachment: Any = None  # a media.Attachment the owner sent (its caption is `body`)


class Portal:
    def __init__(self, bridge: "Bridge", channel: Channel):
        self.bridge = bridge
        self.channel = channel
        self.queue: asyncio.Queue[Incoming] = asyncio.Queue()
        self.worker: asyncio.Task | None = None
        self.current = None  # the running turns.TurnRun, for !stop and redactions
        self.waiting: set[str] = set()    # event ids of the messages queued or being answered
        self.withdrawn: set[str] = set()  # of those, the ones the owner redacted
        self._session_locks: dict[str, asyncio.Lock] = {}

    @property
    def room_id(self) -> str:
        return self.channel.room_id

    def member_names(self) -> list[str]:
        return [m.agent for m in self.bridge.store.members(self.channel.id)
                if m.agent in self.bridge.config.agents]

    async def session_for(self, agent_name: str, agent) -> tuple[str, bool]:
        """The agent's ACP session for this channel: kept, loaded, or new and fresh (ADR §4); a
        session belongs to the working directory it was opened in (`session_fits`).
        A session opened or loaded gets the member's stored mode, model and options again
        (coding/settings.py). One at a time per member: a command (`!mode`, `!commands`) and a
        turn never open two sessions."""
        lock = self._session_locks.setdefault(agent_name, asyncio.Lock())
        async with lock:
            return await self._session_for(agent_name, agent)

    async def _session_for(self, agent_name: str, agent) -> tuple[str, bool]:
        store = self.bridge.store
        member = store.member(self.channel.id, agent_name)
        if member is None:
            member = store.add_member(self.channel.id, agent_name)
        cwd = self.bridge.config.agents[agent_name].cwd
        where = agent.working_dir(cwd) if cwd else None  # none configured: wherever the bridge runs
        kept = member.session_id if session_fits(member.session_cwd, where) else None
        if kept and kept in agent.sessions:
            return member.session_id, member.fresh
        if kept and agent.load_session:
            try:
                await agent.load_session(member.session_id, cwd)
            except Exception as exc:  # the agent lost it: fall back to a fresh session
                log.info("session/load of %s failed (%s); opening a new session", agent_name, exc)
            else:
                await self.bridge.settings.opened(self, agent_name, agent, member.session_id, new=False)
                return member.session_id, member.fresh
        if member.session_id and not kept:
            log.info("%s's session %s was opened in %s; %s works in %s now: a new session there",
                     agent_name, member.session_id, member.session_cwd, agent_name, where)
        session_id = await agent.new_session(cwd)
        store.set_session(self.channel.id, agent_name, session_id, fresh=True, cwd=where)
        await self.bridge.settings.opened(self, agent_name, agent, session_id, new=True)
        return session_id, True

    def seen(self, agent: str, message_id: str) -> None:
        """The agent has now seen everything up to `message_id` (its own answer, usually).
        Written once the database takes it; a store closed meanwhile (quitting) drops it: the
        next run shows the message again, which is harmless. A member removed meanwhile is
        left alone (no row to update)."""
        channel_id, store = self.channel.id, self.bridge.store
        self.bridge.dispatcher.outage.later(
            f"what {agent} has seen in {self.room_id}", lambda: store.mark_seen(channel_id, agent, message_id))

    async def add_agent(self, agent: str, announce: bool = False) -> bool:
        """Make `agent` a member: invite its puppet, which joins at once. False when it could
        not join (no agent left in the room to invite it): the owners are told what to do."""
        bridge = self.bridge
        title = bridge.config.agents[agent].title
        puppet = await bridge.puppet(agent)
        others = [m for m in self.member_names() if m != agent]
        inviter = await bridge.puppet(others[0]) if others else bridge.bot
        bridge.store.add_member(self.channel.id, agent)
        if announce and others:  # said by a member already in the room, never by the one not yet joined
            await bridge.notice(self, f"Inviting {title} (@{agent}) to #{self.channel.name}.", inviter)
        await inviter.intent.invite(self.room_id, puppet.user_id)
        if await puppet.intent.join(self.room_id):
            bridge.command_descriptions.member_joined(self.room_id, agent)
            return True
        bridge.store.remove_member(self.channel.id, agent)
        await bridge.commands.tell_owners(
            f"I could not bring {title} (@{agent}) into #{self.channel.name}: "
            f"no agent is left in that room to invite it. Invite {puppet.user_id} there yourself.")
        return False

    def submit(self, incoming: Incoming) -> None:
        self.waiting.add(incoming.event_id)
        self.queue.put_nowait(incoming)
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._work(), name=f"portal-{self.room_id}")

    def withdraw(self, event_id: str) -> bool:
        """The owner redacted this message: no turn of it starts from now on. True if it was
        queued or being answered."""
        if event_id not in self.waiting:
            return False
        self.withdrawn.add(event_id)
        return True

    async def _work(self) -> None:
        while not self.queue.empty():
            incoming = self.queue.get_nowait()
            try:
                if incoming.event_id not in self.withdrawn:
                    await self.answer(incoming)
            except asyncio.CancelledError:
                raise  # quitting: the next start answers it (recovery)
            except Exception:
                log.exception("answering %s in %s failed", incoming.event_id, self.room_id)
            self.waiting.discard(incoming.event_id)
            self.withdrawn.discard(incoming.event_id)
            self.bridge.recovery.prompt_done(incoming.event_id)

    async def answer(self, incoming: Incoming) -> None:
        from .turns import run_turn  # turns imports portal types

        config = self.bridge.config
        if incoming.resumed and incoming.attachment is None and restored(incoming.body):
            incoming = await reread(self, incoming)  # after a restart: the file and caption again
        members = self.member_names()
        parsed = parse(incoming.body, incoming.formatted_body, incoming.mention_ids,
                       config.agent_for_user_id, self.bridge.aliases)
        decision = route(incoming.body, parsed, members,
                         self.bridge.store.last_agent_sender(self.channel.id),
                         self.channel.direct_agent)
        absent = set()
        for agent in decision.invite:
            if not await self.add_agent(agent, announce=True):
                absent.add(agent)
        if decision.nobody:
            await self.bridge.notice(self, "Nobody answers this one: mention an agent, like "
                                     + ", ".join(f"@{name}" for name in members[:3] or config.agents)
                                     + ", to get an answer.")
            return
        turns = tuple(turn for turn in decision.turns if turn.agent not in absent)
        if incoming.resumed:  # after a crash: only the agents whose answer had not begun
            turns = tuple(turn for turn in turns if turn.agent not in incoming.skip_agents)
        for turn in turns:
            if incoming.event_id in self.withdrawn:
                break  # redacted while an earlier agent answered it
            await run_turn(self, turn, incoming)


def session_fits(session_cwd: str | None, cwd: str | None) -> bool:
    """A stored session is used again only in the configured working directory it was opened
    in: an agent whose `cwd` changed would otherwise go on in the old one (OpenCode then asks
    permission for everything "outside the project"). None on either side (a session stored
    before directories were kept, an agent with no `cwd` configured): as before, kept."""
    return session_cwd is None or cwd is None or os.path.normpath(session_cwd) == os.path.normpath(cwd)
