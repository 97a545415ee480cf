"""Where each conversation's agent works (docs/architecture.md "Conversations and threads"): the one
place a new session asks for its working directory, the owner's `!cwd` and `!worktrees`, and a
deleted thread's worktree.

* `where(portal, agent_name, conversation)` — Portal.session_for asks it before it opens a
  session: the thread's worktree (agents with `worktrees: on`; made at the thread's first turn,
  and said in the thread), else the channel's `!cwd` folder, else the configured `cwd`
  (places.py decides; worktrees.py runs git). A session opened elsewhere is not used again
  (`session_fits`): a new `!cwd` takes effect with the next new session.
* `command(portal, name, args)` — `!cwd [AGENT] [PATH]`, `!worktrees`, `!worktrees remove N
  [confirm]` in a channel.
* `redacted(room_id, event_id)` — the owner redacted a message: when it is the root of a
  thread with worktrees, the channel is asked to confirm their removal (nothing is remembered:
  the answer is the command with `confirm`); a dirty tree is said to stay.

The store keeps the folders and worktrees (store/places.py), so a restart finds them again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from acp import AcpError

from ..channels.base.background import Background
from ..channels.base.conversations import Here, relation_for
from ..channels.base.room_names import place_of
from ..channels.rules.command_parse import CONFIRM, resolve_agent
from . import worktrees as git
from .places import Place, additional, base_dir, in_worktree, moved_out, recheck, refusal, resolve, root_of
from .worktree_names import Shown, branch_name, changes, listing, thread_words, worktree_path

if TYPE_CHECKING:
    from ..channels.base.parts import RoomParts
    from ..channels.turns.portal import Portal

log = logging.getLogger(__name__)

COMMANDS = ("cwd", "worktrees")
ATTEMPTS = 5  # branch names tried when one is taken by a branch checked out elsewhere


class NoWorktree(AcpError):
    """A thread's worktree could not be made: its turn ends with this line, nothing is edited
    in another checkout."""


class WorkPlaces:
    def __init__(self, rooms: RoomParts, aliases: dict[str, str]):
        self.config, self.db, self.channels = rooms.config, rooms.db, rooms.channels
        self.identities, self.notices, self.aliases = rooms.identities, rooms.notices, aliases
        self._making: dict[tuple[str, str, str], asyncio.Lock] = {}  # (channel, thread, checkout)
        self.tasks = Background(log)  # what a redaction starts: git runs after the transaction
        self._tops: dict[str, str] = {}  # a folder → the top of the checkout it lies in
        # (channel, agent) → the folder `!cwd` chose (None: none), as stored: read once, then
        # kept here as this object writes it (`!cwd` is its only writer) — a turn reads it
        # before its prompt, and a round trip to the database thread costs about a millisecond
        self._chosen: dict[tuple[str, str], str | None] = {}

    async def close(self) -> None:
        await self.tasks.close()

    # -- a new session's place --------------------------------------------------------------

    async def where(self, portal: Portal, agent_name: str, conversation: str = "") -> Place:
        """The working directory (and additional roots) of `agent_name`'s next new session in
        this conversation of the channel."""
        agent = self.config.agents[agent_name]
        chosen = await self._work_dir(portal.channel.id, agent_name)
        if chosen is not None:  # resolved again now: a folder swapped for a link is seen
            real, outside = recheck(chosen, agent.roots)
            if outside:  # not opened there: as configured, and the owner is told
                log.warning(
                    "%s's !cwd folder %s leads to %s, out of its roots: not opened there", agent_name, chosen, outside
                )
                await self.notices.notice(
                    portal, moved_out(agent.title, chosen, outside, agent.cwd), relates_to=relation_for(conversation)
                )
            chosen = real  # None: gone since, or out of the roots: as configured
        base = base_dir(agent.cwd, chosen)
        if base is None:
            return Place(None)
        cwd = base
        if agent.worktrees and conversation:
            cwd = await self._thread_dir(portal, agent_name, base, conversation)
        return Place(cwd, additional(cwd, agent.roots, base))

    async def _work_dir(self, channel_id: str, agent_name: str) -> str | None:
        key = (channel_id, agent_name)
        if key not in self._chosen:
            self._chosen[key] = await self.db.places.work_dir(channel_id, agent_name)
        return self._chosen[key]

    async def _thread_dir(self, portal: Portal, agent_name: str, base: str, conversation: str) -> str:
        top = self._tops.get(base) or await git.top(base)
        if top is not None:
            self._tops[base] = top  # asked at every thread turn: git runs once per folder
        if top is None:
            return base  # `!cwd` chose a folder outside any checkout: no worktree to make
        channel_id = portal.channel.id
        key = (channel_id, conversation, top)
        async with self._making.setdefault(key, asyncio.Lock()):
            record = await self.db.places.worktree(channel_id, conversation, top)
            if record is not None and os.path.isdir(record.path):
                return _existing(in_worktree(base, top, record.path))
            try:
                if record is not None:  # gone from disk: made again where it was
                    await git.prune(top)
                    await git.add(top, record.path, record.branch)
                    branch, path = record.branch, record.path
                else:
                    branch, path = await self._make(portal, top, conversation)
            except git.GitError as exc:
                raise NoWorktree(f"this thread's git worktree could not be made: {exc}") from None
            record = await self.db.places.add_worktree(channel_id, conversation, top, branch, path)
        title = self.config.agents[agent_name].title
        await self.notices.notice(
            portal,
            f"🌿 {title} works in this thread on branch {record.branch}, in its own worktree: {record.path}",
            await self.identities.puppet(agent_name),
            relates_to=relation_for(conversation),
        )
        return _existing(in_worktree(base, top, record.path))

    async def _make(self, portal: Portal, top: str, conversation: str) -> tuple[str, str]:
        root = await self.db.message_by_event(conversation)
        text = root.text if root is not None else ""
        last: git.GitError | None = None
        for attempt in range(ATTEMPTS):
            branch = branch_name(text, portal.channel.id, conversation, attempt)
            path = worktree_path(top, branch)
            if os.path.exists(path):
                continue  # not the bridge's (its own would be stored): another name
            try:
                await git.add(top, path, branch)
            except git.GitError as exc:  # e.g. the branch is checked out in another worktree
                last = exc
                continue
            log.info("made worktree %s on %s for thread %s in %s", path, branch, conversation, portal.room_id)
            return branch, path
        raise last or git.GitError(f"every name tried is taken, next to {top}")

    # -- commands ---------------------------------------------------------------------------

    async def command(self, portal: Portal, name: str, args: tuple[str, ...], here: Here = Here()) -> None:
        """`!cwd`, `!worktrees`: answered where they were typed (`here`: the main timeline or a
        thread)."""

        async def say(text: str) -> None:
            await self.notices.notice(portal, text, relates_to=here.relates_to)

        if name == "cwd":
            await self._cwd(portal, list(args), say)
        elif args and args[0].lower() == "remove":
            await self._remove(portal, args[1:], say)
        else:
            await say(listing(place_of(portal.channel), await self._shown(portal)))

    async def _say(self, portal: Portal, text: str) -> None:
        await self.notices.notice(portal, text)

    async def _cwd(self, portal: Portal, words: list[str], say) -> None:
        """`!cwd` shows each member's folder here; `!cwd [AGENT] PATH` moves one agent (named),
        or every member with folders to work in."""
        members = portal.member_names()
        named = resolve_agent(words[0], self.aliases) if words else None
        if named is not None and named in members:
            targets, words = [named], words[1:]
        elif named is not None and len(words) == 1 and os.sep not in words[0]:
            await say(f"{words[0]} is not in this channel.")
            return
        else:
            targets = [m for m in members if self.config.agents[m].roots or self.config.agents[m].cwd]
        if not targets:
            await say("No agent here works in a folder (agents.<name>.cwd or roots in the config).")
            return
        wanted = " ".join(words).strip()
        lines = []
        for agent_name in targets:
            agent = self.config.agents[agent_name]
            chosen = await self._work_dir(portal.channel.id, agent_name)
            current = base_dir(agent.cwd, chosen) or os.getcwd()
            if not wanted:
                how = "chosen here with !cwd" if chosen else "as configured"
                lines.append(f"{agent.title}: {current} ({how}); may work in {', '.join(agent.roots) or 'no folder'}")
                continue
            path = resolve(current, wanted)
            if root_of(path, agent.roots) is None:
                lines.append(refusal(agent.title, path, agent.roots))
            elif not os.path.isdir(path):
                lines.append(f"{agent.title}: no folder {path}.")
            else:
                await self.db.places.set_work_dir(portal.channel.id, agent_name, path)
                self._chosen[(portal.channel.id, agent_name)] = path
                lines.append(f"{agent.title} works in {path} here from its next new session.")
        await say("\n".join(lines))

    async def _shown(self, portal: Portal) -> list[Shown]:
        shown = []
        for record in await self.db.places.worktrees(portal.channel.id):
            root = await self.db.message_by_event(record.conversation)
            status = await git.status(record.repo, record.path)
            state = (
                "missing"
                if status is None
                else ("clean" if not changes(status) else f"dirty: {changes(status)} uncommitted changes")
            )
            shown.append(
                Shown(
                    record.number,
                    thread_words(root.text if root else "(deleted thread)", record.conversation),
                    record.branch,
                    record.path,
                    state,
                )
            )
        return shown

    async def _remove(self, portal: Portal, args: tuple[str, ...], say) -> None:
        """`!worktrees remove N [confirm]`: only with `confirm`, only a clean tree (its branch stays)."""
        words = list(args)
        confirmed = bool(words) and words[-1].lower() == CONFIRM
        if confirmed:
            words = words[:-1]
        if len(words) != 1 or not words[0].isdigit():
            await say("Say which: !worktrees remove N, with N from !worktrees.")
            return
        number = int(words[0])
        record = next((r for r in await self.db.places.worktrees(portal.channel.id) if r.number == number), None)
        if record is None:
            await say(f"There is no worktree {number} here (see !worktrees).")
            return
        status = await git.status(record.repo, record.path)
        if status is not None and changes(status):
            await say(
                f"Worktree {number} ({record.path}) has {changes(status)} uncommitted "
                "changes: it stays. Commit or discard them first."
            )
            return
        if not confirmed:
            await say(
                f"This removes worktree {number} ({record.path}); its branch {record.branch} "
                f"stays. To do it, type: !worktrees remove {number} {CONFIRM}"
            )
            return
        try:
            await git.remove(record.repo, record.path)
        except git.GitError as exc:
            await say(f"Worktree {number} stays: {exc}")
            return
        await self.db.places.forget_worktree(portal.channel.id, number)
        await say(f"Removed worktree {number} ({record.path}); branch {record.branch} stays.")

    # -- a thread deleted -------------------------------------------------------------------

    def redacted(self, room_id: str, event_id: str) -> None:
        """Inbound's call for every message the owner redacts (never waits for git)."""
        self.tasks.start(self.thread_deleted(room_id, event_id), f"a redaction in {room_id}")

    async def thread_deleted(self, room_id: str, event_id: str) -> None:
        """The owner redacted `event_id`: if it is the root of a thread with worktrees, ask
        in the channel whether to remove each (a dirty one: said to stay)."""
        portal = await self.channels.portal_for(room_id)
        if portal is None:
            return
        found = await self.db.places.worktrees(portal.channel.id, event_id)
        lines = []
        for record in found:
            status = await git.status(record.repo, record.path)
            if status is None:
                lines.append(
                    f"The deleted thread's worktree {record.number} is gone from disk: "
                    f"!worktrees remove {record.number} {CONFIRM} forgets it."
                )
            elif changes(status):
                lines.append(
                    f"The deleted thread's worktree {record.number} ({record.path}, branch "
                    f"{record.branch}) has {changes(status)} uncommitted changes: it stays."
                )
            else:
                lines.append(
                    f"The thread of worktree {record.number} ({record.path}, branch {record.branch}) "
                    f"was deleted. To remove the worktree (its branch stays), type: "
                    f"!worktrees remove {record.number} {CONFIRM}"
                )
        if lines:
            await self._say(portal, "\n".join(lines))


def _existing(folder: str) -> str:
    """The folder, made if git did not write it (a folder git does not track, an empty one):
    a session opens in a folder that exists; an empty folder leaves the tree clean."""
    os.makedirs(folder, exist_ok=True)
    return folder
