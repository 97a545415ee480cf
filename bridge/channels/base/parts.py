"""What a channel's portal and its turns work with, handed to every portal by the bridge
(bridge.py builds it), instead of the bridge itself.

It is the widest of the parts, because a portal still does much — its members, their sessions,
routing, its queue, and each turn's life (turns.py) and what the owner sees of it (showing.py). The parts it
holds are small: the store (`db`), the config, the agent pool, the open channels, who sends
(identities, notices), and the few calls below. Those of `coding/` and of the scheduler are
named by what a portal asks of them (the protocols here), so that this package imports neither:
`coding/` plugs in, through the bridge.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from acp import Pool
    from config import Config
    from store import TurnRecord
    from store.offloop import OffLoop

    from ...matrix.identities import Identities
    from ...matrix.msc4391 import CommandDescriptions
    from ...matrix.presence import Presence
    from ...matrix.puppet import Puppet
    from .notices import Notices
    from .registry import Channels


@dataclass(frozen=True)
class RoomParts:
    """What a part that acts in the channels' rooms works with (the bot's commands, the
    channels' settings and working folders, what each incoming event does): the config, the
    store's calls, the open channels, who sends and what is said. Each such part takes these
    five together, and the others it needs one by one."""

    config: Config
    db: OffLoop  # the store's calls, on its thread (store/offloop.py)
    channels: Channels  # the open channels, the turns between them (registry.py)
    identities: Identities  # the bot and the puppets (matrix/identities.py)
    notices: Notices  # what the bridge says in rooms (notices.py)


@dataclass(frozen=True)
class AskedIn:
    """Where an ask goes and who answers it (channels/asks/asks.py): the turn asking."""

    portal: Any  # the channel
    puppet: Puppet  # who asks: the agent's puppet, sending into the turn's conversation
    conversation: str = ""  # "" the main timeline, else a thread's root
    asker: str | None = None  # the owner who answers (whose message started the turn); None: any owner
    run: Any = None  # the turn asking (turns.RunningTurn), whose answer shows the wait; None: the portal's current one
    mention: Sequence[str] = ()  # the owners it notifies (channels/rules/approvals.py)


class AsksTheOwner(Protocol):
    """Asks the owner for an agent (permissions.py: permissions; coding/questions.py:
    elicitations; both through asks.py), where `where` says: the answer, or None."""

    async def ask(self, where: AskedIn, request: Any) -> Any: ...


class SessionOpened(Protocol):
    """Brings an opened or loaded session back to the member's choices (coding/settings.py)."""

    async def opened(
        self, portal: Any, agent_name: str, agent: Any, session_id: str, new: bool, conversation: str = ""
    ) -> None: ...


class WorkShown(Protocol):
    """A turn's plan and tool calls as messages edited in place (coding/work.py)."""

    def update(self, update: Any) -> bool: ...

    def known(self, tool_call_id: str | None) -> Any: ...

    async def attach(self, view: Any, scope: str) -> str | None: ...

    async def close(self) -> None: ...


class ScheduledRuns(Protocol):
    """What a portal tells the scheduler of a run it claims (scheduler.py)."""

    async def agent_gone(self, turn: TurnRecord) -> None: ...

    async def announce(self, portal: Any, turn: TurnRecord) -> None: ...


class WorkPlaces(Protocol):
    """Where a conversation's agent works (coding/workplaces.py): the next new session's
    folder (`.cwd`, None: the agent's default) and other roots (`.additional`)."""

    async def where(self, portal: Any, agent_name: str, conversation: str) -> Any: ...


@dataclass(frozen=True)
class ChannelParts:
    config: Config
    db: OffLoop  # the store's calls, on its thread (store/offloop.py)
    pool: Pool  # the agents' processes (acp/slots.py)
    channels: Channels  # the open channels, the turns between them (registry.py)
    identities: Identities  # the bot and the puppets (matrix/identities.py)
    notices: Notices  # what the bridge says in rooms (notices.py)
    presence: Presence  # a puppet's status while it answers (matrix/presence.py)
    descriptions: CommandDescriptions  # MSC4391: a member's commands in its rooms
    permissions: AsksTheOwner
    questions: AsksTheOwner
    settings: SessionOpened
    scheduler: ScheduledRuns
    # a turn's last writes, through the store-outage queue (bridge/outage.py)
    later: Callable[[str, Callable[[], object]], None]
    # the `mcpServers` of a session (bridge/mcp/service.py)
    mcp_servers: Callable[[Any, str, Any, str], list]
    tell_owners: Callable[[str], Awaitable[None]]  # a line in each owner's DM with the bot
    # what coding agents show, plugged in by the bridge (coding/work.py, coding/render.py):
    # a turn's plan and tool calls (intent, room, attachment limit → its display), and the
    # one line an answer ends with for a stop reason (None: none)
    work: Callable[[Any, str, int], WorkShown]
    stop_line: Callable[[str], str | None]
    run_id: str  # this run's: the turns it claims are marked with it
    recovered: asyncio.Event  # set once the turns earlier runs left are queued
    stopping: asyncio.Event  # set as the bridge's stop begins: no turn starts from then on
    aliases: dict[str, str]  # names an agent is called by → the agent
    places: WorkPlaces  # where each conversation's agent works (coding/workplaces.py)
    budgets: Any = None  # the agents' budgets (budgets.py; None: none kept)
    attached: Any = None  # ACP clients attached to conversations (bridge/attach/hub.py; None: none)
