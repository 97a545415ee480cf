"""Bridge commands: `!help`, `!agents`, ... in the bridge bot's DM, `!stop`, `!commands`,
`!threads`, `!delete` in a channel (docs/architecture.md "The Matrix side"). A command typed in a
thread acts on that thread (its answer, its sessions) and is answered there
(docs/architecture.md "Conversations and threads"). `!` is the bridge's; `/` belongs to agents
(docs/architecture.md "The Matrix side").

Parsing and wording are in command_parse.py (pure); rooms and the space in space.py. Replies
come from the bot in its DM and from a member puppet in a channel.
Deleting asks for an explicit `confirm` word: nothing is remembered between the two messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import aiohttp

from store import keys

from ...matrix.client import MatrixError
from ...matrix.space import Space, create_room, give_power, membership, room_link
from ..base.background import Background
from ..base.conversations import Here
from ..base.room_names import place_of
from ..rules.approvals import ANY_OWNER, approve_mode, approve_state, approve_switch
from ..rules.command_parse import (
    CONFIRM,
    GREETING,
    HANDOFFS_OFF,
    THREADS_ON,
    Command,
    agents_change,
    describe_state,
    find_channels,
    format_commands,
    handoffs_on,
    handoffs_state,
    handoffs_switch,
    opens_threads,
    parse,
    queue_listing,
    resolve_agent,
    rest_of,
    split_delete,
    threads_state,
    threads_switch,
)
from ..rules.help_text import bot_help, channel_full_help, full_help, room_help, welcome_text
from ..rules.room_alias import alias_part, made_text
from ..turns.handing import end_chain
from ..turns.sessions import close_sessions

if TYPE_CHECKING:
    from acp import Pool
    from store import Channel

    from ...matrix.msc4391 import CommandDescriptions
    from ..base.parts import RoomParts
    from ..schedules.scheduler import Scheduler
    from ..turns.portal import Portal

log = logging.getLogger(__name__)

# a channel command another part registers: (portal, its name, its arguments, where it was
# typed — the main timeline or a thread: it acts on that conversation and answers there)
ChannelCommand = Callable[["Portal", str, tuple[str, ...], Here], Awaitable[None]]
COMMANDS_WAIT = 2.0  # seconds an agent started by !commands gets to announce its commands


class Roster(Protocol):
    """Agents added and removed while the bridge runs (bridge/roster.py): the lines to say."""

    async def add(self, agent_id: str, cwd: str | None) -> list[str]: ...

    async def remove(self, name: str) -> list[str]: ...


class BotCommands:
    def __init__(
        self,
        rooms: RoomParts,
        pool: Pool,
        descriptions: CommandDescriptions,
        scheduler: Scheduler,
        registered: dict[str, ChannelCommand],
        aliases: dict[str, str],
        forget_channel: Callable[[str], None],
        roster: Roster | None = None,
    ):
        """`registered`: the channel commands other parts add (coding/settings.py: `!mode`,
        `!model`, `!config`, `!status`; coding/workplaces.py: `!cwd`, `!worktrees`; sessions.py:
        `!sessions`, `!resume`, `!reset`, `!fork`), by name; `forget_channel`: a deleted channel's id, for
        the MCP server to drop its sessions; `roster`: `!agents add | remove`."""
        self.config, self.db, self.channels = rooms.config, rooms.db, rooms.channels
        self.identities, self.notices, self.pool = rooms.identities, rooms.notices, pool
        self.descriptions, self.scheduler, self.registered = descriptions, scheduler, dict(registered)
        self.aliases = aliases
        self.forget_channel = forget_channel
        self.roster = roster
        self.space = Space(rooms.db, rooms.config, rooms.identities)
        self.tasks = Background(log)  # commands answered after their transaction (`!commands`)

    # -- entry points wired in bridge.py --

    async def handle(self, event: dict, room_id: str, sender: str, body: str) -> bool:
        """An owner's `!…` message. True when it was a bridge command (then no agent sees it)."""
        if sender not in self.config.owners:
            return False
        command = parse(body)
        if command is None:
            return False
        here = Here.of(event)  # in a channel: the replies go where it was typed
        # (docs/architecture.md "Conversations and threads")
        try:
            portal = await self.channels.portal_for(room_id)
            if portal is not None:
                await self._in_channel(portal, command, here, body)
                return True
            if await self._is_bot_room(room_id, sender):
                event_id = event.get("event_id")
                if isinstance(event_id, str):  # the bot has read it, as a person would
                    self.tasks.start(
                        self.identities.bot.intent.read_up_to(room_id, event_id), f"read receipt in {room_id}"
                    )
                await self._in_bot_room(room_id, sender, command)
                return True
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("!%s in %s: %s", command.name, room_id, exc)
            await self._reply_anywhere(room_id, f"!{command.name} failed: {exc}", here)
            return True
        return False

    async def on_bot_member(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        """A membership event about the bridge bot: an owner's invite is its DM, others are declined."""
        bot = self.identities.bot
        if content.get("membership") != "invite" or sender == bot.user_id:
            return
        if sender not in self.config.owners:
            log.info("%s invited the bridge bot: declined (not an owner)", sender)
            await bot.intent.leave(room_id)
            return
        if not await bot.intent.join(room_id):
            return
        db = self.db
        await db.set_value(keys.bot_room(room_id), sender)
        if await db.channel_by_room(room_id) is None:
            await db.set_value(keys.bot_dm(sender), room_id)
            await self.notices.send(bot, room_id, GREETING)

    async def tell_owners(self, text: str) -> None:
        """Say something to every owner in their DM with the bridge bot (made if there is none)."""
        for owner in self.config.owners:
            try:
                room_id = await self.bot_dm(owner)
            except (MatrixError, aiohttp.ClientError) as exc:
                log.warning("no DM with %s: %s", owner, exc)
                continue
            await self.notices.send(self.identities.bot, room_id, text)

    async def welcome(self) -> None:
        """At `sidekicks up`: each owner not welcomed yet gets the bot's DM with a welcome and a
        direct channel with the first agent, once (kept in the store): a restart makes none, and
        an owner who left them is not invited again (docs/using.md "The first minutes")."""
        for owner in self.config.owners:
            if await self.db.get_value(keys.welcomed(owner)):
                continue
            try:
                room_id = await self.bot_dm(owner)
                agent = next(iter(self.config.agents), None)
                direct = (await self.direct_channel(agent, owner))[0] if agent is not None else None
            except (MatrixError, aiohttp.ClientError) as exc:
                log.warning("could not welcome %s: %s", owner, exc)
                continue
            title = self.config.agents[agent].title if agent is not None else ""
            shown = welcome_text(title, self._link(direct) if direct is not None else None)
            await self.notices.send(self.identities.bot, room_id, shown.body, shown.html)
            await self.db.set_value(keys.welcomed(owner), "yes")

    async def bot_dm(self, owner: str) -> str:
        db, bot = self.db, self.identities.bot
        room_id = await db.get_value(keys.bot_dm(owner))
        if room_id and await membership(bot, room_id, owner) in ("join", "invite"):
            return room_id  # a DM the owner left is not one: a new one is made
        room_id = await create_room(bot, {"is_direct": True, "preset": "trusted_private_chat", "invite": [owner]})
        await db.set_value(keys.bot_dm(owner), room_id)
        await db.set_value(keys.bot_room(room_id), owner)
        return room_id

    async def channel_created(self, room_id: str) -> None:
        """A room became a channel because the owner invited a puppet: it joins the space."""
        await self.space.add(room_id)

    # -- helpers --

    async def _is_bot_room(self, room_id: str, sender: str) -> bool:
        store = self.db.target
        return await self.db.run(
            lambda: (
                store.get_value(keys.bot_room(room_id)) is not None or store.get_value(keys.bot_dm(sender)) == room_id
            )
        )

    async def _say(self, room_id: str, text: str) -> None:
        await self.notices.send(self.identities.bot, room_id, text)

    async def _reply_anywhere(self, room_id: str, text: str, here: Here = Here()) -> None:
        portal = await self.channels.portal_for(room_id)
        if portal is not None:
            await self.notices.notice(portal, text, relates_to=here.relates_to)
        else:
            await self._say(room_id, text)

    def _link(self, room_id: str) -> str:
        return room_link(room_id, self.config.domain)

    def _agent_list(self) -> str:
        return ", ".join(self.config.agents) or "(none configured)"

    # -- the bot's DM --

    async def _in_bot_room(self, room_id: str, sender: str, command: Command) -> None:
        handler = {
            "help": self._help,
            "agents": self._agents,
            "channels": self._channels,
            "new": self._new,
            "dm": self._dm,
            "delete": self._delete_named,
        }.get(command.name)
        if handler is None:
            await self._say(room_id, f"There is no !{command.name}. !help lists the commands.")
            return
        await handler(room_id, sender, command.args)

    async def _help(self, room_id: str, sender: str, args: tuple[str, ...]) -> None:
        """`!help`: what to do here, in a few lines; `!help all`: every command (help_text.py)."""
        shown = full_help() if [a.lower() for a in args] == ["all"] else bot_help()
        await self.notices.send(self.identities.bot, room_id, shown.body, shown.html)

    async def _agents(self, room_id: str, sender: str, args: tuple[str, ...]) -> None:
        if args:
            await self._change_agents(room_id, args)
            return
        if not self.config.agents:
            await self._say(room_id, "No agents are configured.")
            return
        lines = ["Agents:"]
        for name, agent in self.config.agents.items():
            portal = self.channels.active_turns.get(name)
            state = describe_state(self.pool.state(name), place_of(portal.channel) if portal else None)
            lines.append(f"  {name} — {agent.title} — {state}")
        await self._say(room_id, "\n".join(lines))

    async def _change_agents(self, room_id: str, args: tuple[str, ...]) -> None:
        """`!agents add ID [--cwd DIR]`, `!agents remove NAME` (docs/commands.md "In the bridge bot's DM"):
        answered once done, after this transaction (a binary is fetched, the agent started)."""
        change = agents_change(args)
        if isinstance(change, str) or self.roster is None:
            await self._say(room_id, change if isinstance(change, str) else "Agents cannot be changed here.")
            return
        roster, (action, target, cwd) = self.roster, change
        await self._say(room_id, f"Adding {target} from the registry…" if action == "add" else f"Removing {target}…")

        async def change_and_say() -> None:
            lines = await (roster.add(target, cwd) if action == "add" else roster.remove(target))
            await self._say(room_id, "\n".join(lines))

        self.tasks.start(change_and_say(), f"!agents {action} {target}")

    async def _channels(self, room_id: str, sender: str, args: tuple[str, ...]) -> None:
        store = self.db.target

        def read():
            found = store.channels()
            return found, {c.id: [m.agent for m in store.members(c.id)] for c in found}

        channels, members_of = await self.db.run(read)
        if not channels:
            await self._say(
                room_id,
                "No channels yet. !new NAME AGENT... makes one, !dm AGENT a direct one, "
                "or invite an agent into any room.",
            )
            return
        lines = ["Channels:"]
        for channel in channels:
            members = ", ".join(members_of[channel.id]) or "no agents"
            kind = f"direct with {channel.direct_agent}" if channel.direct_agent else members
            lines.append(f"  #{channel.name} — {kind} — {self._link(channel.room_id)}")
        await self._say(room_id, "\n".join(lines))

    async def _new(self, room_id: str, sender: str, args: tuple[str, ...]) -> None:
        if len(args) < 2:
            await self._say(room_id, f"Usage: !new NAME AGENT... (agents: {self._agent_list()})")
            return
        name, tokens = args[0].lstrip("#").strip(), args[1:]
        agents, unknown = [], []
        for token in tokens:
            agent = resolve_agent(token, self.aliases)
            if agent is None:
                unknown.append(token)
            elif agent not in agents:
                agents.append(agent)
        if unknown or not name:
            await self._say(
                room_id,
                f"No agent called {', '.join(unknown)}. Agents: {self._agent_list()}"
                if unknown
                else "The channel needs a name: !new NAME AGENT...",
            )
            return
        bot = self.identities.bot
        puppets = [await self.identities.puppet(agent) for agent in agents]
        space = await self.space.ensure()
        body = {
            "name": name,
            "preset": "private_chat",
            "invite": [sender] + [p.user_id for p in puppets],
            "initial_state": [
                {
                    "type": "m.space.parent",
                    "state_key": space,
                    "content": {"via": [self.config.domain], "canonical": True},
                }
            ],
        }
        new_room, alias = await self._create_with_alias(body, alias_part(name))
        await give_power(bot, new_room, [sender])  # the owner may rename, invite, kick
        await self.db.create_channel(new_room, name)
        portal = await self.channels.portal_for(new_room)
        for agent in agents:
            await portal.joined(agent)
        for agent, puppet in zip(agents, puppets):
            if await puppet.intent.join(new_room):
                self.descriptions.member_joined(new_room, agent)
        await self.space.add(new_room)
        made = made_text(name, agents, alias, self._link(new_room))
        await self.notices.send(bot, room_id, made.body, made.html)

    async def _create_with_alias(self, body: dict, part: str | None) -> tuple[str, str | None]:
        """The room made by the bot, with the local alias `#part:domain` when it is free (else
        none): (its id, the alias or None)."""
        bot = self.identities.bot
        alias = f"#{part}:{self.config.domain}" if part else None
        if alias is not None:
            status, _ = await bot.intent.request("GET", f"/_matrix/client/v3/directory/room/{quote(alias, safe='')}")
            if status == 404:
                try:
                    return await create_room(bot, {**body, "room_alias_name": part}), alias
                except MatrixError as exc:  # taken meanwhile, or refused: the room goes without
                    log.info("%s not given to the new room: %s", alias, exc)
                    if exc.transient:
                        raise
        return await create_room(bot, body), None

    async def _dm(self, room_id: str, sender: str, args: tuple[str, ...]) -> None:
        agent = resolve_agent(args[0], self.aliases) if len(args) == 1 else None
        if agent is None:
            await self._say(room_id, f"Usage: !dm AGENT (agents: {self._agent_list()})")
            return
        found, made = await self.direct_channel(agent, sender)
        if not made:
            await self._say(room_id, f"Your direct channel with {agent}: {self._link(found)}")
            return
        await self._say(
            room_id, f"{self.config.agents[agent].title} invited you to a direct channel: {self._link(found)}"
        )

    async def direct_channel(self, agent: str, owner: str) -> tuple[str, bool]:
        """The room of `owner`'s direct channel with `agent` that is still open, else a new one
        the agent's puppet makes and invites them to: (its room, whether it is new). `!dm`, and
        a new session of an attached ACP client (bridge/attach/service.py)."""
        puppet = await self.identities.puppet(agent)
        for channel in await self.db.channels():  # one that is still open is enough
            if channel.direct_agent == agent and await membership(puppet, channel.room_id, owner) in (
                "join",
                "invite",
            ):
                return channel.room_id, False
        new_room = await create_room(puppet, {"is_direct": True, "preset": "trusted_private_chat", "invite": [owner]})
        await self.db.create_channel(new_room, agent, agent)
        await (await self.channels.portal_for(new_room)).joined(agent)
        self.descriptions.member_joined(new_room, agent)  # the puppet made it: it may
        await self.space.add(new_room, puppet)
        return new_room, True

    async def _delete_named(self, room_id: str, sender: str, args: tuple[str, ...]) -> None:
        name, confirmed = split_delete(args)
        if not name:
            await self._say(room_id, "Usage: !delete CHANNEL (!channels lists them)")
            return
        found = find_channels(await self.db.channels(), name)
        if not found:
            await self._say(room_id, f"There is no channel #{name.lstrip('#')}. !channels lists them.")
            return
        if len(found) > 1:
            await self._say(
                room_id,
                f"{len(found)} channels are called #{name.lstrip('#')}: name one "
                "by its room id (!channels shows the links).",
            )
            return
        channel = found[0]
        if not confirmed:
            count = await self.db.count_messages(channel.id)
            await self._say(
                room_id,
                f"This deletes #{channel.name} and its history ({count} messages); "
                f"its agents leave the room. To do it, type: !delete {name} {CONFIRM}",
            )
            return
        await self._delete(channel)
        await self._say(room_id, f"Deleted #{channel.name} and its history; its agents left the room.")

    # -- in a channel --

    async def _in_channel(self, portal: Portal, command: Command, here: Here, body: str = "") -> None:
        """A command typed in a channel: it acts on the conversation it was typed in (`here`,
        the main timeline or a thread) and answers there. `body`: the message as typed."""

        async def say(text: str) -> None:
            await self.notices.notice(portal, text, relates_to=here.relates_to)

        if command.name == "stop":
            await self._stop(portal, here)
        elif command.name == "commands":
            # it may start agents: never while the transaction waits (and every event behind it)
            self.tasks.start(self._commands(portal, here), f"!commands in {portal.room_id}")
        elif command.name == "delete":
            await self._delete_here(portal, command.args, here)
        elif command.name in self.registered:  # may start an agent: never in the transaction
            self.tasks.start(
                self.registered[command.name](portal, command.name, command.args, here),
                f"!{command.name} in {portal.room_id}",
            )
        elif command.name == "schedules":
            await say(await self.scheduler.listing(portal.channel.id))
        elif command.name == "unschedule":
            await self._unschedule(portal, command.args, say)
        elif command.name == "threads":
            await self._threads(portal, command.args, say)
        elif command.name == "handoffs":
            await self._handoffs(portal, command.args, say)
        elif command.name == "approve":
            await self._approve(portal, command.args, say)
        elif command.name == "queue":
            await say(queue_listing((job.record.agent, job.incoming.body) for job in portal.queued(here.conversation)))
        elif command.name == "drop":
            await self._drop(portal, command.args, here, say)
        elif command.name == "steer":
            await self._steer(portal, rest_of(body), here, say)
        elif command.name == "help":
            await self._channel_help(portal, command.args, here)
        else:
            await say(f"There is no !{command.name} here. !help says what you can do here.")

    async def _channel_help(self, portal: Portal, args: tuple[str, ...], here: Here) -> None:
        """`!help` in a channel: this room's commands first, in a few lines; `!help all`: every
        command of a channel (none of the bot's: they are told in its DM)."""
        if [a.lower() for a in args] == ["all"]:
            shown = channel_full_help()
        else:
            members = portal.member_names()
            shown = room_help(place_of(portal.channel), members, portal.channel.direct_agent is not None)
        await self.notices.notice(portal, shown.body, relates_to=here.relates_to, html=shown.html)

    async def _unschedule(self, portal: Portal, args: tuple[str, ...], say) -> None:
        """`!unschedule N`: cancel the channel's schedule N (as `!schedules` numbers them), a
        waiting one's approval ask with it, and drop its runs still queued (not begun)."""
        from ..schedules.schedule_args import BadArguments, schedule_number

        try:
            number = schedule_number(args[0] if len(args) == 1 else None)
        except BadArguments:
            await say("Say which: !unschedule N, with N from !schedules.")
            return
        cancelled = await self.db.schedules.cancel(portal.channel.id, number)
        if cancelled is None:
            await say(f"There is no schedule {number} here (see !schedules).")
            return
        record, dropped = cancelled
        self.scheduler.changed(cancelled=record.id)
        queued = f" ({dropped} queued run{'' if dropped == 1 else 's'} dropped)" if dropped else ""
        await say(f"Cancelled schedule {number} of {record.agent}: {record.prompt}{queued}")

    async def _threads(self, portal: Portal, args: tuple[str, ...], say) -> None:
        """`!threads on|off`: whether the channel opens a thread under each top-level message
        agents answer (stored per channel, keys.threads; off by default); `!threads` tells."""
        key = keys.threads(portal.channel.id)
        kept = partial(_kept_if, THREADS_ON, True)  # off: nothing kept (the default)
        await self._switch(key, args, say, threads_switch, opens_threads, kept, threads_state)

    async def _handoffs(self, portal: Portal, args: tuple[str, ...], say) -> None:
        """`!handoffs on|off`: whether the channel's agents may hand work to each other (their
        `handoff` tool; stored per channel, keys.handoffs; on by default); `!handoffs` tells."""
        key = keys.handoffs(portal.channel.id)
        kept = partial(_kept_if, HANDOFFS_OFF, False)  # on: nothing kept (the default)
        await self._switch(key, args, say, handoffs_switch, handoffs_on, kept, handoffs_state)

    async def _drop(self, portal: Portal, args: tuple[str, ...], here: Here, say) -> None:
        """`!drop N`: waiting turn N of `!queue` never runs — taken out of the queue at once,
        its record dropped and, with no other turn, its message forgotten (a restart does not
        run it either, no agent is told it: store/turns.py `drop`)."""
        number = int(args[0]) if len(args) == 1 and args[0].isdigit() else None
        if number is None:
            await say("Say which: !drop N, with N from !queue.")
            return
        job = portal.unqueue(here.conversation, number)
        if job is None:
            await say(f"Nothing waits as {number} here (see !queue).")
            return
        if not await self.db.turns.drop(job.turn_id):  # begun meanwhile elsewhere: not dropped
            await say(f"{number} has begun already: !stop stops it.")
            return
        await say(f"Dropped {number}: {job.record.agent} will not answer “{' '.join(job.incoming.body.split())[:80]}”.")

    async def _steer(self, portal: Portal, text: str, here: Here, say) -> None:
        """`!steer TEXT`: the answer being written in this conversation is redirected
        (turns.RunningTurn.steer)."""
        if not text:
            await say("Usage: !steer TEXT (or reply to the answer being written).")
            return
        run = portal.run_in(here.conversation)
        if run is None or not await run.steer(text):
            await say("Nothing is being answered here to steer: send it as a message.")

    async def _approve(self, portal: Portal, args: tuple[str, ...], say) -> None:
        """`!approve requester|any-owner`: who answers the channel's permission prompts and
        questions (stored per channel, keys.approve; approvals.py); `!approve` tells."""
        key = keys.approve(portal.channel.id)
        kept = partial(_kept_if, ANY_OWNER, ANY_OWNER)  # requester: nothing kept (the default)
        await self._switch(key, args, say, approve_switch, approve_mode, kept, approve_state)

    async def _switch(
        self,
        key: str,
        args: tuple[str, ...],
        say,
        parse: Callable[[tuple[str, ...]], Any],
        read: Callable[[str | None], Any],
        kept: Callable[[Any], str | None],
        state: Callable[[Any], str],
    ) -> None:
        """A channel's switch (`!threads`, `!approve`): `parse` reads its arguments (a ValueError
        is the usage line, said); none: the stored setting, as `read` takes it, is told. Else
        what `kept` gives is stored (None: the default, the key removed) and the new state told."""
        try:
            choice = parse(args)
        except ValueError as exc:
            await say(str(exc))
            return
        if choice is None:
            await say(state(read(await self.db.get_value(key))))
            return
        value = kept(choice)
        if value is None:
            await self.db.delete_value(key)
        else:
            await self.db.set_value(key, value)
        await say(state(choice))

    async def _stop(self, portal: Portal, here: Here) -> None:
        """`!stop`: the answer being written in the conversation it was typed in — in a thread
        that thread's, in the main timeline the main timeline's (threads answer on: each has its
        own !stop, and 🛑 on an answer stops that one). None there: said there."""
        run = portal.run_in(here.conversation)
        # the chain of hand-offs ends too: its handed turns not begun never start (handing.py)
        await end_chain(portal, here.conversation)
        if run is not None:
            await run.cancel()
            return
        if here.conversation:
            text = "Nothing is being answered in this thread."
        elif portal.runs:
            text = (
                "Nothing is being answered in the main timeline. Answers are being written in "
                "threads: !stop in a thread stops its answer (or react 🛑 to it)."
            )
        else:
            text = "Nothing is being answered here."
        await self.notices.notice(portal, text, relates_to=here.relates_to)

    async def _commands(self, portal: Portal, here: Here) -> None:
        members = portal.member_names()
        if not members:
            await self.notices.notice(portal, "This channel has no agents.", relates_to=here.relates_to)
            return
        listed: list[str] = [f"Commands in #{portal.channel.name}:"]
        for agent in members:
            commands = await self.db.agent_commands(agent)
            if commands is None:  # never announced: start it and open its session
                # (docs/architecture.md "Slots and sessions")
                commands = await self._prepare(portal, agent, here.conversation)
            listed += format_commands(agent, commands, several=len(members) > 1)
        if len(members) > 1:
            listed.append("Send one as /agent:command, or @agent /command.")
        await self.notices.notice(portal, "\n".join(listed), relates_to=here.relates_to)

    async def _prepare(self, portal: Portal, agent_name: str, conversation: str = "") -> list[dict] | None:
        try:
            agent = await self.pool.get(agent_name)
            await portal.session_for(agent_name, agent, conversation)
        except Exception as exc:  # a crash at start is the turns' to report in full
            log.warning("starting %s for !commands: %s", agent_name, exc)
            return None
        waited = 0.0
        while (commands := await self.db.agent_commands(agent_name)) is None and waited < COMMANDS_WAIT:
            await asyncio.sleep(0.1)
            waited += 0.1
        return commands

    async def thread_gone(self, room_id: str, root: str) -> None:
        """The owner redacted a message: if it was a thread's root in a channel, the members'
        sessions of that thread are closed (sessions.py) and forgotten."""
        channel = await self.db.channel_by_room(room_id)
        if channel is None:
            return
        gone = await self.db.sessions.forget(channel.id, root)
        if gone:
            log.info("the root of a thread in %s was redacted: closing its %d session(s)", room_id, len(gone))
            await close_sessions(self.pool, [(r.agent, r.session_id) for r in gone])

    async def _delete_here(self, portal: Portal, args: tuple[str, ...], here: Here) -> None:
        channel = portal.channel
        _, confirmed = split_delete(args)
        if not confirmed:
            count = await self.db.count_messages(channel.id)
            await self.notices.notice(
                portal,
                relates_to=here.relates_to,
                text=f"This deletes the history of #{channel.name} ({count} messages) "
                "and its agents leave; the room stays. To do it, type: "
                f"!delete {CONFIRM}",
            )
            return
        await self.notices.notice(
            portal,
            f"Deleted the history of #{channel.name}. The agents leave; the room stays yours.",
            relates_to=here.relates_to,
        )
        await self._delete(channel)

    async def _delete(self, channel: Channel) -> None:
        """Forget the channel and its history (docs/architecture.md "The store"); its puppets leave the room;
        its members' sessions are closed (sessions.py)."""
        found = await self.db.members(channel.id)
        members = [m.agent for m in found]
        sessions = [(m.agent, m.session_id) for m in found if m.session_id]
        sessions += [(r.agent, r.session_id) for r in await self.db.sessions.of_channel(channel.id)]
        portal = self.channels.portals.pop(channel.room_id, None)
        if portal is not None:
            for run in portal.clear():  # every conversation's
                await run.cancel()
        await self.db.delete_channel(channel.id)  # its schedules too
        await self.db.delete_value(keys.threads(channel.id))
        await self.db.delete_value(keys.handoffs(channel.id))
        await self.db.delete_value(keys.approve(channel.id))
        await self.db.delete_value(keys.budget(channel.id))  # budgets.py
        self.forget_channel(channel.id)
        await close_sessions(self.pool, sessions)
        for agent in members:
            if agent in self.config.agents:
                await (await self.identities.puppet(agent)).intent.leave(channel.room_id)
        await self.space.remove(channel.room_id)


def _kept_if(value: str, when: Any, choice: Any) -> str | None:
    """What a switch stores: `value` when the owner chose `when`, else nothing (the default)."""
    return value if choice == when else None
