"""Budgets and usage in words and numbers (docs/sessions.md, "Usage and budgets"). Pure: no
Matrix, no store (tests/unit/channels/rules/test_budget_rules.py).

A budget is per agent: a cost per day or per month (UTC), in the currency the agent reports.
The spend of a period is what the agent's `usage_update`s reported in it (each carries its
session's cumulative cost; store/spend.py adds what is new). At the cap the running turn is
stopped and new prompts are refused until the period ends or `!budget raise AMOUNT`. An agent
that reports no cost is said to report none: nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from config.model import Budget
    from store.spend import Spent

BUDGET_USAGE = "Usage: !budget [AGENT] to see it, !budget [AGENT] raise AMOUNT to raise it for this period."


def period_of(per: str, now: datetime) -> str:
    """The store's key of the period (UTC) `now` is in: "day:2026-12-06", "month:2026-12"."""
    now = now.astimezone(UTC)
    return f"month:{now:%Y-%m}" if per == "month" else f"day:{now:%Y-%m-%d}"


def periods(now: datetime) -> list[str]:
    """Both periods a report counts in (the budget's `per` may change between runs)."""
    return [period_of("day", now), period_of("month", now)]


def period_end(per: str, now: datetime) -> datetime:
    """When the period `now` is in ends (UTC)."""
    now = now.astimezone(UTC)
    if per == "month":
        return (now.replace(day=28, hour=0, minute=0, second=0, microsecond=0) + timedelta(days=4)).replace(day=1)
    return now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)


def cap(budget: Budget, spent: Spent) -> float:
    return budget.cost + spent.raised


def over(budget: Budget, spent: Spent) -> bool:
    """The period's spend reached its cap (an agent that reported nothing is never over)."""
    return spent.reported and spent.amount >= cap(budget, spent) - 1e-9


def money(amount: float, currency: str | None) -> str:
    symbols = {"USD": "$", "EUR": "€", "GBP": "£"}
    if currency in symbols:
        return f"{symbols[currency]}{amount:.2f}"
    return f"{amount:.2f} {currency}" if currency else f"{amount:.2f}"


def tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M".replace(".0M", "M")
    if n >= 1_000:
        return f"{n / 1_000:.1f}k".replace(".0k", "k")
    return str(n)


def usage_note(used: int, size: int, cost: float | None, currency: str | None) -> str:
    """A usage_update as the answer's status line shows it: "context 12k/200k · $0.03"."""
    context = f"context {tokens(used)}/{tokens(size)}" if size else f"context {tokens(used)}"
    return context if cost is None else f"{context} · {money(cost, currency)}"


def _when(per: str) -> str:
    return "today (UTC)" if per == "day" else "this month (UTC)"


def stop_line(title: str, budget: Budget, spent: Spent) -> str:
    """The line a turn stopped at the cap ends with."""
    return (
        f"⛔ stopped: {title} reached its budget, {money(spent.amount, spent.currency)} of "
        f"{money(cap(budget, spent), spent.currency)} {_when(budget.per)}. !budget raise AMOUNT lets it go on."
    )


def refusal(title: str, budget: Budget, spent: Spent, now: datetime) -> str:
    """The line a prompt gets while the agent is over its budget."""
    ends = period_end(budget.per, now)
    return (
        f"⛔ {title} has spent its budget {_when(budget.per)} "
        f"({money(spent.amount, spent.currency)} of {money(cap(budget, spent), spent.currency)}): "
        f"it answers again after {ends:%Y-%m-%d %H:%M} UTC, or after !budget raise AMOUNT."
    )


def budget_words(title: str, budget: Budget | None, spent: Spent) -> str:
    """`!budget`: the budget, what was spent, or that the agent reports no cost."""
    if budget is None:
        if not spent.reported:
            return f"{title} has no budget, and has reported no cost today."
        return f"{title} has no budget; it reported {money(spent.amount, spent.currency)} today (UTC)."
    limit = money(cap(budget, spent), spent.currency)
    raised = f" (raised by {money(spent.raised, spent.currency)})" if spent.raised else ""
    if not spent.reported:
        return (
            f"{title}: budget {limit} {_when(budget.per)}{raised}; it has reported no cost, so "
            "it cannot be held to it (nothing is guessed)."
        )
    state = "spent: new prompts are refused" if over(budget, spent) else "within it"
    return f"{title}: {money(spent.amount, spent.currency)} of {limit} {_when(budget.per)}{raised} — {state}."


def budget_args(args: Sequence[str]) -> tuple[str | None, float | None]:
    """`!budget [AGENT] [raise AMOUNT]` → (the agent named or None, the raise or None).
    Anything else raises ValueError with the usage line."""
    words = list(args)
    amount = None
    if len(words) >= 2 and words[-2].lower() == "raise":
        try:
            amount = float(words[-1].lstrip("$€£"))
        except ValueError:
            raise ValueError(BUDGET_USAGE) from None
        if not amount > 0 or amount != amount or amount == float("inf"):
            raise ValueError(BUDGET_USAGE)
        words = words[:-2]
    if len(words) > 1 or (words and words[0].lower() == "raise"):
        raise ValueError(BUDGET_USAGE)
    return (words[0] if words else None), amount
