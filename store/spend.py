"""What agents cost, per period, for their budgets (docs/sessions.md, "Usage and budgets").

An agent's `usage_update` carries its session's cumulative cost; `add` keeps the last one per
session and adds only what is new to each period given (a day and a month, UTC: `sk_spend`), in
one transaction. A session whose cumulative cost went down (the agent counts again) adds its new
amount. `!budget raise` adds to the budget of one period (`raise_budget`).

A channel's spend is kept beside the agents' under `channel_key(channel_id)` ("#" and the id: no
agent name starts with "#"): what is new in a session's report counts for its agent and, when the
session works in a channel, for that channel too (`add(..., channel=...)`), in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .core import Part, operation


@dataclass(frozen=True)
class Spent:
    amount: float = 0.0  # reported in the period
    raised: float = 0.0  # added to the budget for the period
    currency: str | None = None
    reported: bool = False  # the agent reported a cost in the period


def channel_key(channel_id: str) -> str:
    """Where a channel's spend is kept (the `agent` column of `sk_spend`)."""
    return f"#{channel_id}"


class Spending(Part):
    @operation
    def add(
        self,
        agent: str,
        session_id: str,
        cumulative: float,
        currency: str | None,
        periods: Sequence[str],
        channel: str | None = None,
    ) -> dict[str, Spent]:
        """A session of `agent` reported `cumulative` cost: what is new is added to each period
        (of the agent, and of `channel`'s key when given); what each period has now, the
        agent's keyed by period, the channel's by `channel_key(channel) + " " + period`."""
        C, S, periods = self.core.models.SessionCost, self.core.models.Spend, list(periods)
        with self.core.db.atomic():
            row = C.select(C.amount).where((C.agent == agent) & (C.session_id == session_id)).tuples().first()
            last = float(row[0]) if row is not None else 0.0
            new = cumulative - last if cumulative >= last else cumulative
            if row is None:
                C.insert(agent=agent, session_id=session_id, amount=cumulative).execute()
            else:
                C.update(amount=cumulative).where((C.agent == agent) & (C.session_id == session_id)).execute()
            keys = [agent] if channel is None else [agent, channel_key(channel)]
            for key in keys:
                for period in periods:
                    self._upsert(key, period, amount=new)
                    S.update(currency=currency or "").where((S.agent == key) & (S.period == period)).execute()
            spent = {period: self.get(agent, period) for period in periods}
            if channel is not None:
                key = channel_key(channel)
                spent.update({f"{key} {p}": self.get(key, p) for p in periods})
            return spent

    @operation
    def get(self, agent: str, period: str) -> Spent:
        S = self.core.models.Spend
        row = S.select(S.amount, S.raised, S.currency).where((S.agent == agent) & (S.period == period)).tuples().first()
        if row is None:
            return Spent()
        return Spent(float(row[0] or 0), float(row[1] or 0), row[2], row[2] is not None or bool(row[0]))

    @operation
    def raise_budget(self, agent: str, period: str, amount: float) -> Spent:
        """Add `amount` to `agent`'s budget for `period`."""
        with self.core.db.atomic():
            self._upsert(agent, period, raised=amount)
            return self.get(agent, period)

    def _upsert(self, agent: str, period: str, **add: float) -> None:
        S = self.core.models.Spend
        S.insert(agent=agent, period=period).on_conflict_ignore().execute()
        S.update(**{k: getattr(S, k) + v for k, v in add.items()}).where(
            (S.agent == agent) & (S.period == period)
        ).execute()
