"""Budgets and usage in words and numbers (docs/sessions.md, "Usage and budgets"). Pure: no
Matrix, no store (tests/unit/channels/rules/test_budget_rules.py).

A budget is per agent (`budget:` in the config) or per channel (`!budget channel COST per
day|month`, stored): a cost per day or per month (UTC), in the currency the agents report. The
spend of a period is what the `usage_update`s reported in it (each carries its session's
cumulative cost; store/spend.py adds what is new, to the agent and to the channel the session
works in). At the cap the running turn is stopped (a channel's: every turn running there) and
new prompts are refused until the period ends or `!budget raise AMOUNT`. An agent that reports
no cost is said to report none: nothing is guessed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from config.model import Budget

if TYPE_CHECKING:
    from store.spend import Spent

BUDGET_USAGE = "Usage: !budget [AGENT] to see it, !budget [AGENT] raise AMOUNT to raise it for this period."
CHANNEL_USAGE = (
    "Usage: !budget channel to see the channel's budget, !budget channel COST per day|month to set it, "
    "!budget channel raise AMOUNT to raise it for this period, !budget channel off to remove it."
)


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


@dataclass(frozen=True)
class Whose:
    """Whose budget a line speaks of: an agent's (`Whose.agent(title)`) or a channel's
    (`Whose.channel(name)`). The words differ only in the subject and in who reports the cost
    and answers: the agent itself, or the channel's agents."""

    name: str  # as users see it: "Alice", "#general"
    they: str  # who reports the cost: "it", "its agents"
    they_have: str  # "it has", "its agents have"
    and_have: str  # after "NAME has no budget, and": "has", "its agents have"
    answer: str  # who answers again once it may: "it answers", "agents answer here"
    here: str  # where new prompts are refused: "", " here"
    raise_with: str  # the command that raises it for the period

    @classmethod
    def agent(cls, title: str) -> Whose:
        return cls(title, "it", "it has", "has", "it answers", "", "!budget raise AMOUNT")

    @classmethod
    def channel(cls, name: str) -> Whose:
        return cls(
            f"#{name}",
            "its agents",
            "its agents have",
            "its agents have",
            "agents answer here",
            " here",
            "!budget channel raise AMOUNT",
        )


def stop_line(whose: Whose, budget: Budget, spent: Spent) -> str:
    """The line a turn stopped at the cap ends with (a channel's: each turn running there)."""
    return (
        f"⛔ stopped: {whose.name} reached its budget, {money(spent.amount, spent.currency)} of "
        f"{money(cap(budget, spent), spent.currency)} {_when(budget.per)}. {whose.raise_with} lets it go on."
    )


def refusal(whose: Whose, budget: Budget, spent: Spent, now: datetime) -> str:
    """The line a prompt gets while the agent (or the channel it is typed in) is over its budget."""
    ends = period_end(budget.per, now)
    return (
        f"⛔ {whose.name} has spent its budget {_when(budget.per)} "
        f"({money(spent.amount, spent.currency)} of {money(cap(budget, spent), spent.currency)}): "
        f"{whose.answer} again after {ends:%Y-%m-%d %H:%M} UTC, or after {whose.raise_with}."
    )


def budget_words(whose: Whose, budget: Budget | None, spent: Spent) -> str:
    """`!budget` (`!budget channel`): the budget and what was spent, or that no cost was reported."""
    name = whose.name
    if budget is None:
        if not spent.reported:
            return f"{name} has no budget, and {whose.and_have} reported no cost today."
        return f"{name} has no budget; {whose.they} reported {money(spent.amount, spent.currency)} today (UTC)."
    limit = money(cap(budget, spent), spent.currency)
    raised = f" (raised by {money(spent.raised, spent.currency)})" if spent.raised else ""
    if not spent.reported:
        return (
            f"{name}: budget {limit} {_when(budget.per)}{raised}; {whose.they_have} reported no cost, so "
            "it cannot be held to it (nothing is guessed)."
        )
    state = f"spent: new prompts{whose.here} are refused" if over(budget, spent) else "within it"
    return f"{name}: {money(spent.amount, spent.currency)} of {limit} {_when(budget.per)}{raised} — {state}."


def _amount(word: str) -> float | None:
    """A positive finite amount ("5", "$5.00", "€2"), or None."""
    try:
        value = float(word.lstrip("$€£"))
    except ValueError:
        return None
    return value if value > 0 and value != float("inf") else None


def budget_args(args: Sequence[str]) -> tuple[str | None, float | None]:
    """`!budget [AGENT] [raise AMOUNT]` → (the agent named or None, the raise or None).
    Anything else raises ValueError with the usage line."""
    words = list(args)
    amount = None
    if len(words) >= 2 and words[-2].lower() == "raise":
        if (amount := _amount(words[-1])) is None:
            raise ValueError(BUDGET_USAGE)
        words = words[:-2]
    if len(words) > 1 or (words and words[0].lower() == "raise"):
        raise ValueError(BUDGET_USAGE)
    return (words[0] if words else None), amount


# ---- a channel's budget ---------------------------------------------------------------------


def channel_budget_args(args: Sequence[str]) -> tuple[str, Budget | None, float | None]:
    """The words after `!budget channel` → (what, budget, amount): ("show", None, None),
    ("set", Budget, None), ("off", None, None) or ("raise", None, amount). Anything else raises
    ValueError with the usage line."""
    words = [w.lower() for w in args]
    if not words:
        return "show", None, None
    if words == ["off"]:
        return "off", None, None
    if len(words) == 2 and words[0] == "raise" and (amount := _amount(words[1])) is not None:
        return "raise", None, amount
    if len(words) == 1 and "/" in words[0]:  # 5/day
        words = words[0].split("/", 1)
    elif len(words) == 3 and words[1] in ("per", "a", "/"):
        words = [words[0], words[2]]
    if len(words) == 2 and words[1] in ("day", "month") and (cost := _amount(words[0])) is not None:
        return "set", Budget(cost, words[1]), None
    raise ValueError(CHANNEL_USAGE)


def stored_budget(budget: Budget) -> str:
    """A channel's budget as the store keeps it (store/keys.py `budget`)."""
    return json.dumps({"cost": budget.cost, "per": budget.per})


def budget_from(stored: str | None) -> Budget | None:
    """A channel's stored budget, or None (none, or not one: never a cap made up)."""
    try:
        data = json.loads(stored) if stored else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("per") not in ("day", "month"):
        return None
    cost = data.get("cost")
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost >= 0:
        return None
    return Budget(float(cost), data["per"])
