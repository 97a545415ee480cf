"""A portal: one Matrix room that is a Sidekicks channel (mautrix's word for a bridged room).

It owns the channel's queues, one per conversation
(docs/architecture.md "Conversations and threads": the main timeline, or one thread): inside a
conversation messages are answered one at a time, each by the agents routing picks, one after the
other — never two agents in one conversation at once (docs/architecture.md "Who answers"). Two
conversations do not wait for each other: each has its own worker, so a turn in one thread runs
while another thread's (or the main timeline's) runs too. An agent still answers one prompt at a
time wherever it is (acp/slots.py `Pool.turn`, docs/architecture.md "Who answers"): the same agent
asked in two threads answers them one after the other, two agents answer at once.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from store import Channel, TurnRecord, keys
from store.schedules import parse_run_key
from store.turns import DROPPED, claimed_in

from ...matrix.media import restored
from ..base.conversations import MAIN, relation_for
from ..rules.command_parse import opens_threads
from . import handing, prepare
from .handoffs import KEY_PREFIX as HANDOFF_PREFIX
from .handoffs import parse_handoff_key
from .incoming import Incoming
from .mentions import parse
from .prompt import reread
from .routing import Route, route
from .turns import context_reader, run_turn, unseen_lines

if TYPE_CHECKING:
    from ..base.parts import ChannelParts

log = logging.getLogger(__name__)


@dataclass(order=True)
class QueuedTurn:
    """A turn for the portal to claim and run, in the order turns were taken (their ids)."""

    turn_id: str
    record: TurnRecord = field(compare=False)
    incoming: Incoming = field(compare=False)


@dataclass
class TurnQueue:
    """One conversation's queue of turns and the worker that runs them, oldest first."""

    queue: list[QueuedTurn] = field(default_factory=list)  # a heap: the oldest turn first, whichever path queued it
    queued: set[str] = field(default_factory=set)  # turn ids in the queue
    worker: asyncio.Task | None = None

    def push(self, job: QueuedTurn) -> bool:
        """Queue a job; False if its turn is queued already."""
        if job.turn_id in self.queued:
            return False
        self.queued.add(job.turn_id)
        heapq.heappush(self.queue, job)
        return True

    def pop(self) -> QueuedTurn:
        job = heapq.heappop(self.queue)
        self.queued.discard(job.turn_id)
        return job

    def idle(self) -> bool:
        """No worker running for it (none yet, or the last one ended)."""
        return self.worker is None or self.worker.done()


class Portal:
    def __init__(self, parts: ChannelParts, channel: Channel, members: list[str]):
        self.parts = parts  # what it and its turns work with (parts.py)
        self.channel = channel
        # the channel's members (agent names, in join order), kept here as the store has them:
        # every change goes through joined() / left(), which write the store first
        self.members: list[str] = list(members)
        self.lines: dict[str, TurnQueue] = {}  # conversation ("" the main timeline) → its queue and worker
        self.runs: dict = {}  # conversation → its running turns.RunningTurn, for !stop, 🛑, redactions
        self.waiting: set[str] = set()  # event ids of the messages queued or being answered
        self.withdrawn: set[str] = set()  # of those, the ones the owner redacted
        self._session_locks: dict[tuple[str, str], asyncio.Lock] = {}  # (agent, conversation)
        # (agent, conversation) → the directory its session works in, as the last turn decided
        self._session_dirs: dict[tuple[str, str], str | None] = {}

    @property
    def room_id(self) -> str:
        return self.channel.room_id

    @property
    def current(self):
        """The running turn of the main timeline, else the one started last in a thread (None
        if none runs): for a caller that does not know the conversation. `runs` has them all."""
        if "" in self.runs:
            return self.runs[""]
        return next(reversed(self.runs.values()), None)

    def run_in(self, conversation: str):
        """The turn running in `conversation`, or None."""
        return self.runs.get(conversation)

    def workers(self) -> list[asyncio.Task]:
        """The workers still running (the bridge's stop cancels and awaits them)."""
        return [line.worker for line in self.lines.values() if line.worker is not None and not line.worker.done()]

    def member_names(self) -> list[str]:
        """The members that are configured agents, in join order."""
        return [agent for agent in self.members if agent in self.parts.config.agents]

    async def joined(self, agent: str) -> None:
        """`agent` is a member (stored, then known here)."""
        await self.parts.db.add_member(self.channel.id, agent)
        if agent not in self.members:
            self.members.append(agent)
            prepare.soon(self, [agent])  # what it will be told in the channel (prepare.py)

    async def left(self, agent: str) -> None:
        await self.parts.db.remove_member(self.channel.id, agent)
        if agent in self.members:
            self.members.remove(agent)

    async def session_for(self, agent_name: str, agent, conversation: str = "") -> tuple[str, bool]:
        """The agent's ACP session for this channel's `conversation` ("" the main timeline, else a
        thread: each has its own, docs/architecture.md "Conversations and threads"): kept, loaded,
        or new and fresh (docs/architecture.md "Slots and sessions"); a session belongs to the
        working directory it was opened in (`session_fits`). A session opened or loaded gets the
        member's stored mode, model and options again (coding/settings.py). One at a time per
        member: a command (`!mode`, `!commands`) and a turn never open two sessions."""
        session_id, fresh, _ = await self.session_with(agent_name, agent, conversation=conversation)
        return session_id, fresh

    async def session_with(self, agent_name: str, agent, also=None, conversation: str = "") -> tuple[str, bool, Any]:
        """`session_for`, and `also(store, member)` run on the database thread in the same call
        that reads the member (a turn reads its unseen context so: one round trip fewer before
        its prompt); its result is the third item (None without `also`)."""
        async with self.session_lock(agent_name, conversation):
            return await self._session_for(agent_name, agent, also, conversation)

    async def unseen_for(self, agent_name: str, agent, conversation: str = "") -> tuple[str, list]:
        """The member's session and what it has not seen there, as a turn would tell it now
        (turns.py; for prepare.py)."""
        limit = self.parts.config.context_messages
        session_id, fresh, context = await self.session_with(
            agent_name, agent, context_reader(self.channel.id, limit, 0, conversation), conversation=conversation
        )
        return session_id, unseen_lines(context, agent_name, None, fresh, limit)

    def session_dir(self, agent_name: str, conversation: str = "") -> str | None:
        """The directory the agent's session in `conversation` works in (a thread's worktree,
        the channel's `!cwd`, the configured cwd), as its last opening decided; None before
        one (or when it has none). Its files are the ones it may post (agent_files.py)."""
        return self._session_dirs.get((agent_name, conversation))

    def session_lock(self, agent_name: str, conversation: str) -> asyncio.Lock:
        """Held while a member's session in a conversation is opened or changed (a turn, a
        command, `!resume`, `!reset`, `!fork`: sessions.py)."""
        return self._session_locks.setdefault((agent_name, conversation), asyncio.Lock())

    async def _session_for(self, agent_name: str, agent, also, conversation: str) -> tuple[str, bool, Any]:
        db, store, channel_id = self.parts.db, self.parts.db.target, self.channel.id

        def read():
            member = store.member(channel_id, agent_name, conversation)
            return member, (also(store, member) if also is not None and member is not None else None)

        member, extra = await db.run(read)
        if member is None:
            await self.joined(agent_name)
            member, extra = await db.run(read)
        # the thread's worktree, the channel's !cwd, else the configured cwd (coding/workplaces.py)
        place = await self.parts.places.where(self, agent_name, conversation)
        cwd = place.cwd
        where = agent.working_dir(cwd) if cwd else None  # none configured: wherever the bridge runs
        self._session_dirs[(agent_name, conversation)] = where
        kept = member.session_id if session_fits(member.session_cwd, where) else None
        if kept and kept in agent.sessions:
            return member.session_id, member.fresh, extra
        # the `matrix` MCP server (bridge/mcp), acting in this conversation
        servers = self.parts.mcp_servers(self, agent_name, agent, conversation)
        # session/resume where the agent offers it (nothing replayed), else session/load
        resume = agent.session_capabilities.resume
        if kept and (resume or agent.load_session):
            try:
                if resume:
                    await agent.resume_session(member.session_id, cwd, servers)
                else:
                    await agent.load_session(member.session_id, cwd, servers)
            except Exception as exc:  # the agent lost it: fall back to a fresh session
                log.info(
                    "session/%s of %s failed (%s); opening a new session",
                    "resume" if resume else "load",
                    agent_name,
                    exc,
                )
            else:
                await self.parts.settings.opened(
                    self, agent_name, agent, member.session_id, new=False, conversation=conversation
                )
                return member.session_id, member.fresh, extra
        if member.session_id and not kept:
            log.info(
                "%s's session %s was opened in %s; %s works in %s now: a new session there",
                agent_name,
                member.session_id,
                member.session_cwd,
                agent_name,
                where,
            )
        # the agent's other roots, where it announces it takes them (ACP additionalDirectories)
        beside = {"additional_directories": list(place.additional)} if place.additional else {}
        session_id = await agent.new_session(cwd, servers, **beside)
        await db.set_session(self.channel.id, agent_name, session_id, fresh=True, cwd=where, conversation=conversation)
        await db.sessions.used(self.channel.id, agent_name, conversation, session_id)  # for !sessions
        await self.parts.settings.opened(self, agent_name, agent, session_id, new=True, conversation=conversation)
        return session_id, True, extra

    async def add_agent(self, agent: str, announce: bool = False, relates_to: dict | None = None) -> bool:
        """Make `agent` a member: invite its puppet, which joins at once. False when it could
        not join (no agent left in the room to invite it): the owners are told what to do.
        The announcement goes where the turn that brings it runs (`relates_to`: its thread)."""
        parts = self.parts
        title = parts.config.agents[agent].title
        puppet = await parts.identities.puppet(agent)
        others = [m for m in self.member_names() if m != agent]
        inviter = await parts.identities.puppet(others[0]) if others else parts.identities.bot
        await self.joined(agent)
        if announce and others:  # said by a member already in the room, never by the one not yet joined
            await parts.notices.notice(
                self, f"Inviting {title} (@{agent}) to #{self.channel.name}.", inviter, relates_to=relates_to
            )
        await inviter.intent.invite(self.room_id, puppet.user_id)
        if await puppet.intent.join(self.room_id):
            parts.descriptions.member_joined(self.room_id, agent)
            return True
        await self.left(agent)
        await parts.tell_owners(
            f"I could not bring {title} (@{agent}) into #{self.channel.name}: "
            f"no agent is left in that room to invite it. Invite {puppet.user_id} there yourself."
        )
        return False

    async def route(
        self, body: str, formatted_body: str | None, mention_ids: list[str], conversation: str = ""
    ) -> Route:
        """Who answers this message (routing.py) in its conversation
        (docs/architecture.md "Conversations and threads"). The last speaker is the one who will
        have spoken last there once the turns queued before it are done."""
        store, router = self.parts.db.target, self._router(body, formatted_body, mention_ids)
        channel_id = self.channel.id
        return await self.parts.db.run(lambda: router(_last_speaker(store, channel_id, conversation)))

    async def take(
        self,
        sender: str,
        stored: str,
        event_id: str,
        body: str,
        formatted_body: str | None,
        mention_ids: list[str],
        conversation: str = "",
    ) -> tuple[Route, tuple | None]:
        """Route a new owner message in its conversation and store it with its turns
        (store/turns.py), in one call on the database thread: (who answers, (message, turns)) —
        None for the message when it was taken already (the homeserver sent it again). In a
        channel that opens threads (`!threads on`) the turns of a main-timeline message someone
        answers go into a thread under it: their conversation is the message's event id."""
        work = self.taker(sender, stored, event_id, body, formatted_body, mention_ids, conversation)
        return await self.parts.db.run(work)

    def taker(
        self,
        sender: str,
        stored: str,
        event_id: str,
        body: str,
        formatted_body: str | None,
        mention_ids: list[str],
        conversation: str = "",
    ) -> Callable[[], tuple[Route, tuple | None]]:
        """`take`'s work, to run on the database thread (a caller's write before it, in the
        same call: bridge/attach/service.py)."""
        store, router = self.parts.db.target, self._router(body, formatted_body, mention_ids)
        channel_id, run = self.channel.id, self.parts.run_id
        # a conversation with nothing queued or running starts the first turn at once: it is
        # claimed in the same write (one database round trip fewer before the prompt)
        free = {c for c in (conversation, event_id) if self._free(c)}

        def work():
            decision = router(_last_speaker(store, channel_id, conversation))
            turns = [(t.agent, t.text, t.alone) for t in decision.answerers]
            turns_in = conversation
            if turns and conversation == MAIN and opens_threads(store.get_value(keys.threads(channel_id))):
                turns_in = event_id
            taken = store.turns.take(
                channel_id, sender, stored, event_id, turns, run, conversation, turns_in, claim_first=turns_in in free
            )
            if taken is not None:  # a new owner message ends the chain of hand-offs pending here (handing.py)
                store.turns.drop_handoffs(channel_id, conversation, HANDOFF_PREFIX)
            return decision, taken

        return work

    def _free(self, conversation: str) -> bool:
        """Nothing queued or running in `conversation`, and the bridge neither recovering nor stopping."""
        parts, line = self.parts, self.lines.get(conversation)
        return (
            parts.recovered.is_set()
            and not parts.stopping.is_set()
            and (line is None or (line.idle() and not line.queue))
        )

    def _router(self, body: str, formatted_body: str | None, mention_ids: list[str]):
        """routing.route for this message, given the last speaker (pure: runs anywhere)."""
        config, members = self.parts.config, self.member_names()
        parsed = parse(body, formatted_body, mention_ids, config.agent_for_user_id, self.parts.aliases)
        direct = self.channel.direct_agent

        def decide(speaker: str | None) -> Route:
            known = members
            if speaker is not None and speaker not in members and speaker in config.agents:
                known = [*members, speaker]  # invited when its queued turn runs
            return route(body, parsed, known, speaker, direct)

        return decide

    def submit(self, turn: TurnRecord, incoming: Incoming) -> None:
        """Queue a turn in its conversation; one already queued is not queued again. Each
        conversation's worker runs its turns one at a time; conversations run side by side."""
        conversation = getattr(turn, "conversation", "") or ""
        line = self.lines.setdefault(conversation, TurnQueue())
        if not line.push(QueuedTurn(turn.id, turn, incoming)):
            return
        self.waiting.add(incoming.event_id)
        self.note_queue(conversation)  # the answer running there says it (docs/sessions.md)
        if self.parts.stopping.is_set():
            return  # taken, never started: the next start runs it (its record says taken)
        if line.idle():
            name = f"portal-{self.room_id}" + (f"-{conversation}" if conversation else "")
            line.worker = asyncio.create_task(self._work(line), name=name)

    def queued(self, conversation: str) -> list[QueuedTurn]:
        """The turns waiting in `conversation`, in the order they will run (`!queue`)."""
        line = self.lines.get(conversation)
        return sorted(line.queue) if line is not None else []

    def note_queue(self, conversation: str) -> None:
        """The running answer of `conversation` says how many turns wait behind it."""
        run, count = self.runs.get(conversation), self.pending(conversation)
        if run is not None:
            run.answer.set_note("queued", f"queued ({count})" if count else None)

    def unqueue(self, conversation: str, number: int) -> QueuedTurn | None:
        """Take the `number`th waiting turn (1: the next) out of `conversation`'s queue, before
        anything can start it (`!drop`; its record is ended by the caller). None: no such turn."""
        jobs = self.queued(conversation)
        if not 1 <= number <= len(jobs):
            return None
        job, line = jobs[number - 1], self.lines[conversation]
        line.queue.remove(job)
        heapq.heapify(line.queue)
        line.queued.discard(job.turn_id)
        if not any(j.incoming.event_id == job.incoming.event_id for j in line.queue):
            running = self.runs.get(conversation)
            if running is None or running.prompt_event_id != job.incoming.event_id:
                self.waiting.discard(job.incoming.event_id)
        self.note_queue(conversation)
        return job

    def pending(self, conversation: str | None = None) -> int:
        """Turns queued, not yet begun: in `conversation`, or in all of them (None)."""
        if conversation is not None:
            line = self.lines.get(conversation)
            return len(line.queue) if line is not None else 0
        return sum(len(line.queue) for line in self.lines.values())

    def clear(self) -> list:
        """Forget every queued turn (the channel is deleted); the running turns, to cancel."""
        for line in self.lines.values():
            line.queue.clear()
            line.queued.clear()
        return list(self.runs.values())

    def withdraw(self, event_id: str) -> bool:
        """The owner redacted this message: no turn of it starts from now on. True if it was
        queued or being answered."""
        if event_id not in self.waiting:
            return False
        self.withdrawn.add(event_id)
        return True

    async def _work(self, line: TurnQueue) -> None:
        await self.parts.recovered.wait()  # the turns an earlier run left come first
        while line.queue and not self.parts.stopping.is_set():
            job = line.pop()
            incoming = job.incoming
            try:
                if incoming.event_id in self.withdrawn:
                    await self.parts.db.turns.end(job.turn_id, DROPPED)
                else:
                    await self.answer(job.record, incoming)
            except asyncio.CancelledError:
                raise  # quitting: the next start runs what did not begin (recovery)
            except Exception:
                log.exception("answering %s in %s failed", incoming.event_id, self.room_id)
            attached = getattr(self.parts, "attached", None)
            if attached is not None:  # a client's prompt waiting for a turn dropped before it ran
                attached.ended(incoming.event_id, job.turn_id, "cancelled")
            if not any(j.incoming.event_id == incoming.event_id for j in line.queue):
                self.waiting.discard(incoming.event_id)
                self.withdrawn.discard(incoming.event_id)

    async def answer(self, turn: TurnRecord, incoming: Incoming) -> None:
        """Claim the turn (store/turns.py: once per run, never after its prompt reached the agent)
        and run it; a mentioned agent that is not a member is invited first."""
        parts = self.parts
        # claimed when it was taken, or now (once per run, whichever path queued it)
        claimed = turn if claimed_in(turn, parts.run_id) else await parts.db.turns.claim(turn.id, parts.run_id)
        if claimed is None:
            return  # started already (in this run, or begun in an earlier one) or over
        scheduled = parse_run_key(claimed.prompt_event) is not None  # a run of scheduled work
        hop = parse_handoff_key(claimed.prompt_event)  # a turn another agent handed on
        if claimed.agent in parts.config.agents and claimed.agent not in self.member_names():
            if hop is not None:  # it left the room since: the chain ends there
                await parts.db.turns.end(claimed.id, DROPPED)
                return
            if scheduled:  # its agent left the room: the schedule ends, nobody is invited back
                await parts.scheduler.agent_gone(claimed)
                return
            relation = relation_for(claimed.conversation, claimed.prompt_event)
            if not await self.add_agent(claimed.agent, announce=True, relates_to=relation):
                await parts.db.turns.end(claimed.id, DROPPED)
                return
        if scheduled:  # one line says who scheduled what
            await parts.scheduler.announce(self, claimed)
        elif hop is not None:  # one line says who handed what to whom
            await handing.announce(self, claimed, hop)
        elif incoming.resumed and incoming.attachment is None and restored(incoming.body):
            members = self.member_names()  # after a restart: the file and caption again
            reader = await parts.identities.puppet(members[0]) if members else parts.identities.bot
            read = await reread(reader.intent, self.room_id, incoming.event_id, parts.config.attachment_bytes)
            if read is not None:
                incoming = replace(incoming, body=read.text, formatted_body=read.formatted, attachment=read.attachment)
        await run_turn(self, claimed, incoming)


def session_fits(session_cwd: str | None, cwd: str | None) -> bool:
    """A stored session is used again only in the configured working directory it was opened
    in: an agent whose `cwd` changed would otherwise go on in the old one (OpenCode then asks
    permission for everything "outside the project"). None on either side (a session stored
    before directories were kept, an agent with no `cwd` configured): as before, kept."""
    return session_cwd is None or cwd is None or os.path.normpath(session_cwd) == os.path.normpath(cwd)


def _last_speaker(store, channel_id: str, conversation: str = "") -> str | None:
    """The agent of the conversation's newest turn not over, else of its newest stored answer
    (in a thread with none: the agent whose message is its root) (database thread)."""
    return store.turns.last_live_agent(channel_id, conversation) or store.last_agent_sender(channel_id, conversation)
