"""Agents' budgets at work (docs/sessions.md, "Usage and budgets"; the rules: budget_rules.py).

* `on_state` hears every session state change (the Pool's callback, beside coding/settings.py):
  a `usage_update` with a cost is stored (store/spend.py: what is new, per day and month, for
  the agent and for the channel the session works in); when the agent's period reaches its cap,
  its running turn is cancelled and ends with one line; when the channel's does, every turn
  running in that channel is.
* `refusal(agent, portal)`: the line a new prompt gets while the agent or the channel is over
  its budget (turns.py asks before the agent is started; no store read once the period's spend
  and the channel's budget are known).
* `!budget [AGENT]` shows the budget and the spend (or that the agent reports no cost);
  `!budget [AGENT] raise AMOUNT` raises it for the current period. `!budget channel [COST per
  day|month | off | raise AMOUNT]` does the same for the channel it is typed in (its budget is
  stored per channel: store/keys.py `budget`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from store import keys
from store.spend import Spent, channel_key

from ..base.background import Background
from ..rules.budget_rules import (
    Whose,
    budget_args,
    budget_from,
    budget_words,
    channel_budget_args,
    over,
    period_of,
    periods,
    refusal,
    stop_line,
    stored_budget,
)
from ..rules.command_parse import resolve_agent

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from ..base.conversations import Here
    from ..base.notices import Notices
    from ..base.registry import Channels

log = logging.getLogger(__name__)

COMMANDS = ("budget",)


def _now() -> datetime:
    return datetime.now(UTC)


class Budgets:
    def __init__(
        self,
        config: Config,
        db: OffLoop,
        channels: Channels,
        notices: Notices,
        aliases: dict[str, str],
        clock: Callable[[], datetime] = _now,
    ):
        self.config, self.db, self.channels, self.notices = config, db, channels, notices
        self.aliases, self.clock = aliases, clock
        self.known: dict[tuple[str, str], Spent] = {}  # (agent or channel key, period) → as last read or written
        self.channel_budgets: dict[str, Any] = {}  # channel id → its Budget or None, as last read or set
        self.tasks = Background(log)

    # ---- usage reported --------------------------------------------------------------------

    def on_state(self, agent: str, session_id: str, update: Any, state: Any) -> None:
        """The Pool's callback (synchronous, in the agent's reader, in order)."""
        usage = getattr(update, "usage", None)
        if getattr(update, "kind", None) != "usage" or usage is None or usage.cost is None:
            return
        # the channel is the one of the turn running in that session, found now (in order, while
        # the prompt is still running); else the one the bridge recorded the session for
        portal = self._portal_of(agent, session_id)
        self.tasks.start(self._reported(agent, session_id, usage.cost, usage.currency, portal), f"the cost of {agent}")

    async def _reported(self, agent: str, session_id: str, cost: float, currency: str | None, portal) -> None:
        now = self.clock()
        channel_id = portal.channel.id if portal is not None else None
        if channel_id is None:
            records = await self.db.sessions.of_agent(agent)
            channel_id = next((r.channel_id for r in records if r.session_id == session_id), None)
            portal = next((p for p in self.channels.portals.values() if p.channel.id == channel_id), None)
        spending = self.db.spending
        spent = await spending.add(agent, session_id, cost, currency, periods(now), channel=channel_id)
        for period, value in spent.items():
            if " " in period:  # the channel's
                key, period = period.split(" ", 1)
                self.known[(key, period)] = value
            else:
                self.known[(agent, period)] = value
        budget = self._budget(agent)
        if budget is not None:
            current = spent[period_of(budget.per, now)]
            if over(budget, current):
                await self._stop(agent, stop_line(self._whose(agent), budget, current))
        if portal is None:
            return
        budget = await self._channel_budget(portal.channel.id)
        if budget is not None:
            current = spent[f"{channel_key(portal.channel.id)} {period_of(budget.per, now)}"]
            if over(budget, current):
                await self._stop_channel(portal, stop_line(Whose.channel(portal.channel.name), budget, current))

    def _portal_of(self, agent: str, session_id: str):
        """The channel's portal whose turn or member works in `session_id`; None if none."""
        portal = self.channels.active_turns.get(agent)
        if portal is not None and any(r.session_id == session_id for r in portal.runs.values()):
            return portal
        for portal in list(self.channels.portals.values()):
            if any(r.agent_name == agent and r.session_id == session_id for r in portal.runs.values()):
                return portal
        return None

    async def _stop(self, agent: str, line: str) -> None:
        """Cancel `agent`'s running turn: it ends with `line`."""
        portal = self.channels.active_turns.get(agent)
        for run in list(portal.runs.values()) if portal is not None else ():
            if run.agent_name == agent and not run.cancelled:
                log.info("%s reached its budget: cancelling its turn", agent)
                run.stop_line = line
                await run.cancel()

    async def _stop_channel(self, portal, line: str) -> None:
        """Cancel every turn running in the channel: each ends with `line`."""
        for run in list(portal.runs.values()):
            if not run.cancelled:
                log.info("#%s reached its budget: cancelling %s's turn", portal.channel.name, run.agent_name)
                run.stop_line = line
                await run.cancel()

    # ---- before a prompt -------------------------------------------------------------------

    async def refusal(self, agent: str, portal=None) -> str | None:
        """The line a prompt to `agent` (in `portal`'s channel) gets while the agent or the
        channel is over its budget; None: it may answer."""
        now = self.clock()
        budget = self._budget(agent)
        if budget is not None:
            spent = await self._spent(agent, period_of(budget.per, now))
            if over(budget, spent):
                return refusal(self._whose(agent), budget, spent, now)
        budget = await self._channel_budget(portal.channel.id) if portal is not None else None
        if budget is not None:
            spent = await self._spent(channel_key(portal.channel.id), period_of(budget.per, now))
            if over(budget, spent):
                return refusal(Whose.channel(portal.channel.name), budget, spent, now)
        return None

    async def _channel_budget(self, channel_id: str):
        if channel_id not in self.channel_budgets:
            self.channel_budgets[channel_id] = budget_from(await self.db.get_value(keys.budget(channel_id)))
        return self.channel_budgets[channel_id]

    async def _spent(self, agent: str, period: str) -> Spent:
        known = self.known.get((agent, period))
        if known is None:
            known = self.known[(agent, period)] = await self.db.spending.get(agent, period)
        return known

    # ---- !budget ---------------------------------------------------------------------------

    async def command(self, portal, name: str, args: tuple[str, ...], here: Here) -> None:
        async def say(text: str) -> None:
            await self.notices.notice(portal, text, relates_to=here.relates_to)

        if args and args[0].lower() == "channel":
            await self._channel_command(portal, args[1:], say)
            return
        try:
            named, amount = budget_args(args)
        except ValueError as exc:
            await say(str(exc))
            return
        members = portal.member_names()
        if named is not None:
            agent = resolve_agent(named, self.aliases)
            if agent is None:
                await say(f"There is no agent called {named}.")
                return
            agents = [agent]
        else:
            agents = members
        if amount is not None and len(agents) != 1:
            await say("Say which agent: !budget AGENT raise AMOUNT.")
            return
        if not agents:
            await say("This channel has no agents.")
            return
        now = self.clock()
        lines = []
        for agent in agents:
            budget = self._budget(agent)
            period = period_of(budget.per if budget is not None else "day", now)
            if amount is not None:
                if budget is None:
                    await say(f"{self._title(agent)} has no budget to raise (`budget:` in the config).")
                    return
                self.known[(agent, period)] = await self.db.spending.raise_budget(agent, period, amount)
            lines.append(budget_words(self._whose(agent), budget, await self._spent(agent, period)))
        if named is None and await self._channel_budget(portal.channel.id) is not None:
            lines.append(await self._channel_words(portal))
        await say("\n".join(lines))

    async def _channel_command(self, portal, args: tuple[str, ...], say) -> None:
        """`!budget channel [COST per day|month | off | raise AMOUNT]`."""
        try:
            what, budget, amount = channel_budget_args(args)
        except ValueError as exc:
            await say(str(exc))
            return
        channel, key = portal.channel, keys.budget(portal.channel.id)
        if what == "set" and budget is not None:
            await self.db.set_value(key, stored_budget(budget))
            self.channel_budgets[channel.id] = budget
        elif what == "off":
            await self.db.delete_value(key)
            self.channel_budgets[channel.id] = None
        elif what == "raise" and amount is not None:
            budget = await self._channel_budget(channel.id)
            if budget is None:
                await say(f"#{channel.name} has no budget to raise (!budget channel COST per day sets one).")
                return
            period = period_of(budget.per, self.clock())
            spending = self.db.spending
            self.known[(channel_key(channel.id), period)] = await spending.raise_budget(
                channel_key(channel.id), period, amount
            )
        await say(await self._channel_words(portal))

    async def _channel_words(self, portal) -> str:
        budget = await self._channel_budget(portal.channel.id)
        period = period_of(budget.per if budget is not None else "day", self.clock())
        spent = await self._spent(channel_key(portal.channel.id), period)
        return budget_words(Whose.channel(portal.channel.name), budget, spent)

    def _budget(self, agent: str):
        spec = self.config.agents.get(agent)
        return getattr(spec, "budget", None) if spec is not None else None

    def _title(self, agent: str) -> str:
        spec = self.config.agents.get(agent)
        return spec.title if spec is not None else agent

    def _whose(self, agent: str) -> Whose:
        return Whose.agent(self._title(agent))
