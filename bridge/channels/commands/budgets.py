"""Agents' budgets at work (docs/sessions.md, "Usage and budgets"; the rules: budget_rules.py).

* `on_state` hears every session state change (the Pool's callback, beside coding/settings.py):
  a `usage_update` with a cost is stored (store/spend.py: what is new, per day and month); when
  the agent's period reaches its cap, its running turn is cancelled and ends with one line.
* `refusal(agent)`: the line a new prompt gets while the agent is over its budget (turns.py
  asks before the agent is started; no store read once the period's spend is known).
* `!budget [AGENT]` shows the budget and the spend (or that the agent reports no cost);
  `!budget [AGENT] raise AMOUNT` raises it for the current period.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from store.spend import Spent

from ..base.background import Background
from ..rules.budget_rules import budget_args, budget_words, over, period_of, periods, refusal, stop_line
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
        self.known: dict[tuple[str, str], Spent] = {}  # (agent, period) → as last read or written
        self.tasks = Background(log)

    # ---- usage reported --------------------------------------------------------------------

    def on_state(self, agent: str, session_id: str, update: Any, state: Any) -> None:
        """The Pool's callback (synchronous, in the agent's reader, in order)."""
        usage = getattr(update, "usage", None)
        if getattr(update, "kind", None) != "usage" or usage is None or usage.cost is None:
            return
        self.tasks.start(self._reported(agent, session_id, usage.cost, usage.currency), f"the cost of {agent}")

    async def _reported(self, agent: str, session_id: str, cost: float, currency: str | None) -> None:
        now = self.clock()
        spent = await self.db.spending.add(agent, session_id, cost, currency, periods(now))
        for period, value in spent.items():
            self.known[(agent, period)] = value
        budget = self._budget(agent)
        if budget is None:
            return
        current = spent[period_of(budget.per, now)]
        if over(budget, current):
            await self._stop(agent, stop_line(self._title(agent), budget, current))

    async def _stop(self, agent: str, line: str) -> None:
        """Cancel `agent`'s running turn: it ends with `line`."""
        portal = self.channels.active_turns.get(agent)
        for run in list(portal.runs.values()) if portal is not None else ():
            if run.agent_name == agent and not run.cancelled:
                log.info("%s reached its budget: cancelling its turn", agent)
                run.stop_line = line
                await run.cancel()

    # ---- before a prompt -------------------------------------------------------------------

    async def refusal(self, agent: str) -> str | None:
        """The line a prompt to `agent` gets while it is over its budget; None: it may answer."""
        budget = self._budget(agent)
        if budget is None:
            return None
        now = self.clock()
        spent = await self._spent(agent, period_of(budget.per, now))
        return refusal(self._title(agent), budget, spent, now) if over(budget, spent) else None

    async def _spent(self, agent: str, period: str) -> Spent:
        known = self.known.get((agent, period))
        if known is None:
            known = self.known[(agent, period)] = await self.db.spending.get(agent, period)
        return known

    # ---- !budget ---------------------------------------------------------------------------

    async def command(self, portal, name: str, args: tuple[str, ...], here: Here) -> None:
        async def say(text: str) -> None:
            await self.notices.notice(portal, text, relates_to=here.relates_to)

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
            lines.append(budget_words(self._title(agent), budget, await self._spent(agent, period)))
        await say("\n".join(lines))

    def _budget(self, agent: str):
        spec = self.config.agents.get(agent)
        return getattr(spec, "budget", None) if spec is not None else None

    def _title(self, agent: str) -> str:
        spec = self.config.agents.get(agent)
        return spec.title if spec is not None else agent
