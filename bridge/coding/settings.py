"""Each member's session settings in a channel: modes, models, config options, usage, title.

One entry point for each way in:

* `opened(portal, agent_name, agent, session_id, new)` — a session was opened (new) or loaded
  for a member (portal.session_for): the owner's stored choices are applied again (a restart, a
  `session/load`, a fresh session, a slot eviction all come through here), and what the
  session offers is stored as a snapshot, so that `!mode` and `!status` can answer while the
  agent is not running;
* `on_state(agent, session_id, update, state)` — the Pool's callback for `current_mode_update`,
  `config_option_update`, `usage_update`, `session_info_update`: usage and title are stored;
  a mode, model or option the agent switched itself becomes the stored choice and is told in
  one line (a change to what the owner chose already is silent);
* `command(portal, name, args, here)` — `!mode`, `!model`, `!config`, `!status` in a channel.
  Typed in a thread (`here`), they act on the member's session of that thread (each
  conversation has its own, docs/architecture.md "Conversations and threads") and answer in the thread.

The store keeps choices with the membership (store/settings.py), one set per member whatever
the conversation: a choice made in a thread is applied to that thread's session at once and to
every session of the member opened or loaded after it. Usage and title are stored per member
too (the last session that told them); `!status` in a thread shows its own session's when it
runs. The ACP side knows how to set each (acp/client.py: config options preferred, modes, the
agents' `models` fallback).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from acp import AcpError, Choices, SessionState, Update
from acp.session_state import CONFIG, MODE, MODEL, Selector
from store import StoreClosed, StoreError

from ..channels.base.background import Background
from ..channels.base.conversations import Here, relation_for
from ..channels.base.room_names import place_of
from ..channels.rules.command_parse import describe_state, resolve_agent
from ..matrix.markdown import escape_html, sanitise
from ..matrix.puppet import relating
from . import render

if TYPE_CHECKING:
    from acp import Pool

    from ..channels.base.parts import RoomParts
    from ..channels.turns.portal import Portal

log = logging.getLogger(__name__)

COMMANDS = ("mode", "model", "config", "status")
WORDS = {MODE: "mode", MODEL: "model"}


def current_values(state: SessionState) -> dict[tuple[str, str], str]:
    """(kind, key) → current value id, for everything a session lets one choose."""
    values: dict[tuple[str, str], str] = {}
    for kind in (MODE, MODEL):
        selector = state.selector(kind)
        if selector is not None and selector.current:
            values[(kind, kind)] = selector.current
    for option in state.config or ():
        if option.settable and option.category not in (MODE, MODEL) and option.current:
            values[(CONFIG, option.id)] = option.current
    return values


def choice_name(selector: Selector | None, value: str | None) -> str | None:
    if value is None:
        return None
    if selector is not None:
        for choice in selector.choices:
            if choice.id == value:
                return choice.name or value
    return value


def plain(*lines: str) -> render.Rendered:
    """Lines as a message (its HTML one paragraph per line)."""
    return render.Rendered("\n".join(lines), sanitise("".join(f"<p>{escape_html(line)}</p>" for line in lines)))


def stored_choice(choices: dict[str, Any], kind: str, key: str) -> str | None:
    if kind == CONFIG:
        return (choices.get("config") or {}).get(key)
    return choices.get(kind)


class SessionSettings:
    def __init__(self, rooms: RoomParts, pool: Pool, aliases: dict[str, str]):
        self.config, self.db, self.channels = rooms.config, rooms.db, rooms.channels
        self.identities, self.notices, self.pool, self.aliases = rooms.identities, rooms.notices, pool, aliases
        # (agent, session) → (channel id, room, conversation)
        self.where: dict[tuple[str, str], tuple[str, str, str]] = {}
        self.known: dict[tuple[str, str], dict[tuple[str, str], str]] = {}  # what was last seen
        self.tasks = Background(log)

    # -- sessions ---------------------------------------------------------------------------

    async def opened(
        self, portal: Portal, agent_name: str, agent, session_id: str, new: bool, conversation: str = ""
    ) -> None:
        """A session of `agent_name` in `portal`'s `conversation` was just opened or loaded:
        bring it to the owner's choices, store what it offers. Never raises for a choice it
        cannot apply: one line says so in the conversation (a thread: in it)."""
        settings = self.db.settings
        channel_id = portal.channel.id
        key = (agent_name, session_id)
        self.where[key] = (channel_id, portal.room_id, conversation)
        if new:
            await settings.new_session(channel_id, agent_name)
        member = await settings.get(channel_id, agent_name)
        choices = Choices.from_json(member.choices if member is not None else {})
        applied = await agent.apply_choices(session_id, choices) if choices else None
        state = agent.state(session_id)
        self.known[key] = current_values(state)
        self._store_state(channel_id, agent_name, state)
        if applied is not None and applied.failed:
            title = self.config.agents[agent_name].title
            lines = [f"⚠️ {title}: {WORDS.get(s.kind, s.key)} {s.value} not applied: {s.reason}" for s in applied.failed]
            await self.notices.notice(
                portal,
                "\n".join(lines),
                await self.identities.puppet(agent_name),
                relates_to=relation_for(conversation),
            )

    def _store_state(self, channel_id: str, agent_name: str, state: SessionState) -> None:
        """What the session offers, its usage and title: written on the database thread, in order."""
        settings, snapshot = self.db.target.settings, state.to_json()
        usage, title = state.usage, state.title

        def write() -> None:
            settings.set_snapshot(channel_id, agent_name, snapshot)
            if usage is not None:
                settings.set_usage(channel_id, agent_name, usage.used, usage.size, usage.cost, usage.currency)
            if title is not None:
                settings.set_title(channel_id, agent_name, title)

        self.db.soon(f"the session state of {agent_name}", write)

    def on_state(self, agent_name: str, session_id: str, update: Update, state: SessionState) -> None:
        """The Pool's callback (synchronous: it runs in the agent's reader, in order)."""
        where = self.where.get((agent_name, session_id))
        if where is None:
            return  # a session not opened through a channel yet: opened() reads its state
        channel_id, room_id, conversation = where
        settings = self.db.target.settings
        if update.kind == "usage" and state.usage is not None:
            u = state.usage
            self.db.soon(
                f"the usage of {agent_name}",
                lambda: settings.set_usage(channel_id, agent_name, u.used, u.size, u.cost, u.currency),
            )
        elif update.kind == "session_info":
            title = state.title
            self.db.soon(
                f"the session title of {agent_name}", lambda: settings.set_title(channel_id, agent_name, title)
            )
        elif update.kind in ("mode", "config"):
            # read what was chosen and write what the agent switched in one go on the database
            # thread, in the order the agent sent its updates
            key, now, snapshot = (agent_name, session_id), current_values(state), state.to_json()
            before = self.known.get(key, {})
            self.known[key] = now

            def record() -> list[str]:
                lines = self._switched(channel_id, agent_name, before, now, state)
                settings.set_snapshot(channel_id, agent_name, snapshot)
                return lines

            self.tasks.start(
                self._switch_lines(room_id, agent_name, record, conversation), f"settings line in {room_id}"
            )

    async def _switch_lines(self, room_id: str, agent_name: str, record, conversation: str = "") -> None:
        try:
            lines = await self.db.run(record)
        except (StoreClosed, StoreError) as exc:
            log.warning("settings of %s not stored: %s", agent_name, exc)
            return
        if lines:
            await self._tell(room_id, agent_name, lines, conversation)

    def _switched(self, channel_id: str, agent_name: str, before: dict, now: dict, state: SessionState) -> list[str]:
        """What the agent switched by itself: stored as the choice, one line each (on the
        database thread)."""
        member = self.db.target.settings.get(channel_id, agent_name)
        choices = member.choices if member is not None else {}
        title = self.config.agents[agent_name].title
        lines = []
        for (kind, option), value in now.items():
            if before.get((kind, option)) == value or stored_choice(choices, kind, option) == value:
                continue
            if (kind, option) not in before and stored_choice(choices, kind, option) is None:
                continue  # first heard of (a new option): not a switch
            selector = state.selector(kind, option if kind == CONFIG else None)
            self.db.target.settings.choose(channel_id, agent_name, kind, value, option if kind == CONFIG else None)
            what = WORDS.get(kind) or (selector.name if selector else option)
            lines.append(
                render.setting_change(
                    title,
                    what,
                    choice_name(selector, before.get((kind, option))),
                    choice_name(selector, value) or value,
                    by_agent=True,
                ).body
            )
        return lines

    async def _tell(self, room_id: str, agent_name: str, lines: list[str], conversation: str = "") -> None:
        puppet = relating(await self.identities.puppet(agent_name), room_id, relation_for(conversation))
        await self.notices.send(puppet, room_id, "\n".join(lines))

    async def close(self) -> None:
        await self.tasks.close()

    # -- commands ----------------------------------------------------------------------------

    async def command(self, portal: Portal, name: str, args: tuple[str, ...], here: Here = Here()) -> None:
        """`!mode [agent] [value]`, `!model [agent] [value]`, `!config [agent] [option] [value]`,
        `!status`. In a channel with one agent the agent's name may be left out. `here`: where
        it was typed — it acts on the member's session of that conversation, answers there."""
        if name == "status":
            await self._status(portal, here, ids=[a.lower() for a in args] == ["ids"])
            return
        members = portal.member_names()
        if not members:
            await self.notices.notice(portal, "This channel has no agents.", relates_to=here.relates_to)
            return
        words = list(args)
        agent = resolve_agent(words[0], self.aliases) if words else None
        if agent is not None and agent in members:
            words = words[1:]
        elif agent is not None:
            await self.notices.notice(portal, f"{words[0]} is not in this channel.", relates_to=here.relates_to)
            return
        elif len(members) == 1 or not words:
            agent = members[0] if len(members) == 1 else None
        else:
            await self.notices.notice(
                portal, f"Which agent? e.g. !{name} {members[0]} {' '.join(words)}", relates_to=here.relates_to
            )
            return
        targets = [agent] if agent is not None else members
        if name == CONFIG:
            key = words[0] if words else None
            value = " ".join(words[1:]) or None
        else:
            key, value = name, " ".join(words) or None
        if value is None:
            await self._show(portal, targets, name, key, here)
        else:
            await self._set(portal, targets[0], name, key, value, here)

    async def _session(self, portal: Portal, agent_name: str, conversation: str = ""):
        agent = await self.pool.get(agent_name)
        session_id, _ = await portal.session_for(agent_name, agent, conversation)
        return agent, session_id

    async def _offline_state(self, portal: Portal, agent_name: str) -> SessionState | None:
        """What the member's session offered when last seen (None if never opened)."""
        member = await self.db.settings.get(portal.channel.id, agent_name)
        if member is None or member.snapshot is None:
            return None
        state = SessionState.from_json(member.snapshot)
        picked = member.choices
        # the stored choices are what the next session gets: show them as current
        for kind in (MODE, MODEL):
            selector = state.selector(kind)
            if selector is not None and picked.get(kind):
                state.set_current(selector, picked[kind])
        for option, value in (picked.get("config") or {}).items():
            selector = state.selector(CONFIG, option)
            if selector is not None:
                state.set_current(selector, value)
        return state

    async def _state(self, portal: Portal, agent_name: str, conversation: str = "") -> SessionState | None:
        """The member's session of `conversation` as the running agent knows it, else the
        member's snapshot."""
        member = await self.db.member(portal.channel.id, agent_name, conversation)
        agent = self.pool.agent(agent_name)
        if member is not None and member.session_id and agent is not None and member.session_id in agent.sessions:
            return agent.state(member.session_id)
        return await self._offline_state(portal, agent_name)

    async def _show(self, portal: Portal, agents: list[str], name: str, key: str | None, here: Here) -> None:
        parts = []
        for agent_name in agents:
            title = self.config.agents[agent_name].title
            state = await self._state(portal, agent_name, here.conversation)
            if state is None:  # never opened here: open it to know
                try:
                    agent, session_id = await self._session(portal, agent_name, here.conversation)
                    state = agent.state(session_id)
                except Exception as exc:
                    parts.append(plain(f"{title}: could not start ({exc})"))
                    continue
            parts.append(self._listing(title, state, name, key, agent_name))
        body = "\n\n".join(p.body for p in parts)
        html = "".join(p.html for p in parts)
        await self.notices.send(await self._sender(portal, agents, here), portal.room_id, body, html)

    def _listing(self, title: str, state: SessionState, name: str, key: str | None, agent_name: str) -> render.Rendered:
        if name in (MODE, MODEL):
            selector = state.selector(name)
            if selector is None:
                return plain(f"{title} offers no {'modes' if name == MODE else 'model choice'}.")
            return render.choices_list(
                title, WORDS[name], selector.current, [(c.id, c.name, c.description) for c in selector.choices]
            )
        options = [o for o in state.config or () if o.settable]
        if key is not None:
            selector = state.selector(CONFIG, key)
            if selector is None:
                listed = ", ".join(o.id for o in options) or "none"
                return plain(f"{title} has no option {key!r}; its options: {listed}")
            return render.choices_list(
                title, selector.name, selector.current, [(c.id, c.name, c.description) for c in selector.choices]
            )
        if not options:
            return plain(f"{title} offers no config options.")
        lines = [f"{title} — options (!config {agent_name} OPTION VALUE):"]
        for option in options:
            values = ", ".join(c.id for c in option.choices)
            lines.append(f"· {option.id} ({option.name}): {option.current or '—'}  [{values}]")
        return plain(*lines)

    async def _set(self, portal: Portal, agent_name: str, name: str, key: str | None, value: str, here: Here) -> None:
        title = self.config.agents[agent_name].title
        puppet = relating(await self.identities.puppet(agent_name), portal.room_id, here.relates_to)
        try:
            agent, session_id = await self._session(portal, agent_name, here.conversation)
            kind = name if name != CONFIG else CONFIG
            old = agent.selector(session_id, kind, key if kind == CONFIG else None)
            if name == MODE:
                selector, chosen = await agent.set_mode(session_id, value)
            elif name == MODEL:
                selector, chosen = await agent.set_model(session_id, value)
            else:
                selector, chosen = await agent.set_config_option(session_id, key or "", value)
        except AcpError as exc:
            await self.notices.send(puppet, portal.room_id, f"⚠️ {exc}")
            return
        option = selector.key if selector.kind == CONFIG else None
        await self.db.settings.choose(portal.channel.id, agent_name, selector.kind, chosen, option)
        state = agent.state(session_id)
        self.known[(agent_name, session_id)] = current_values(state)
        await self.db.settings.set_snapshot(portal.channel.id, agent_name, state.to_json())
        what = WORDS.get(selector.kind) or selector.name
        line = render.setting_change(
            title,
            what,
            choice_name(old, old.current),
            choice_name(state.selector(selector.kind, option), chosen) or chosen,
        )
        await self.notices.send(puppet, portal.room_id, line.body)

    async def _status(self, portal: Portal, here: Here, ids: bool = False) -> None:
        """`!status`: each member's state, mode, model, context used, cost and session title;
        `!status ids` adds the session ids (docs/commands.md "In a channel")."""
        members = portal.member_names()
        lines = []
        for agent_name in members:
            title = self.config.agents[agent_name].title
            answering = self.channels.active_turns.get(agent_name)
            where = place_of(answering.channel) if answering is not None else None
            state_word = describe_state(self.pool.state(agent_name), where)
            if answering is portal:
                state_word = answering_where(portal, agent_name, here.conversation)
            elif answering is not None:  # the room may hold others: it names no other room
                state_word = "answering in another channel"
            settings = await self.db.settings.get(portal.channel.id, agent_name)
            state = await self._state(portal, agent_name, here.conversation)
            if state is not None and here.conversation and settings is not None:
                # a thread's own session, when it runs, tells its own usage and title
                used = state.usage
                settings = replace(
                    settings,
                    title=state.title or settings.title,
                    **(
                        {}
                        if used is None
                        else {"used": used.used, "size": used.size, "cost": used.cost, "currency": used.currency}
                    ),
                )
            member = await self.db.member(portal.channel.id, agent_name, here.conversation)
            mode = model = None
            if state is not None:
                mode = choice_name(state.selector(MODE), state.mode)
                model = choice_name(state.selector(MODEL), state.model)
            lines.append(
                render.StatusLine(
                    title,
                    state_word,
                    mode,
                    model,
                    settings.used if settings else None,
                    settings.size if settings else None,
                    settings.cost if settings else None,
                    settings.currency if settings else None,
                    (settings.title if settings else None) or (state.title if state else None),
                    member.session_id if member is not None else None,
                )
            )
        shown = render.status(lines, ids)
        where = " (this thread)" if here.conversation else ""
        await self.notices.send(
            await self._sender(portal, members, here),
            portal.room_id,
            f"Status of #{portal.channel.name}{where}:\n" + shown.body,
            shown.html,
        )

    async def _sender(self, portal: Portal, agents: list[str], here: Here = Here()):
        sender = await self.identities.puppet(agents[0]) if agents else self.identities.bot
        return relating(sender, portal.room_id, here.relates_to)


def answering_where(portal: Portal, agent_name: str, conversation: str) -> str:
    """Where in this channel `agent_name` is answering, as `!status` typed in `conversation`
    says it: here, in the main timeline, or in a thread."""
    for where, run in getattr(portal, "runs", {}).items():
        if run.agent_name == agent_name:
            if where == conversation:
                return "answering here"
            return "answering in the main timeline" if where == "" else "answering in a thread here"
    return "answering here"
