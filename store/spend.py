"""What agents cost, per period, for their budgets (docs/sessions.md, "Usage and budgets").

An agent's `usage_update` carries its session's cumulative cost; `add` keeps the last one per
session and adds only what is new to each period given (a day and a month, UTC: `sk_spend`), in
one transaction. A session whose cumulative cost went down (the agent counts again) adds its new
amount. `!budget raise` adds to the budget of one period (`raise_budget`).
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


class Spending(Part):
    @operation
    def add(
        self, agent: str, session_id: str, cumulative: float, currency: str | None, periods: Sequence[str]
    ) -> dict[str, Spent]:
        """A session of `agent` reported `cumulative` cost: what is new is added to each period;
        what each period has now."""
        C, S, periods = self.core.models.SessionCost, self.core.models.Spend, list(periods)
        with self.core.db.atomic():
            row = C.select(C.amount).where((C.agent == agent) & (C.session_id == session_id)).tuples().first()
            last = float(row[0]) if row is not None else 0.0
            new = cumulative - last if cumulative >= last else cumulative
            if row is None:
                C.insert(agent=agent, session_id=session_id, amount=cumulative).execute()
            else:
                C.update(amount=cumulative).where((C.agent == agent) & (C.session_id == session_id)).execute()
            for period in periods:
                self._upsert(agent, period, amount=new)
                S.update(currency=currency or "").where((S.agent == agent) & (S.period == period)).execute()
            return {period: self.get(agent, period) for period in periods}

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
