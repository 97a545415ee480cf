"""When scheduled work runs, and how a run is announced. Pure (tests/unit/channels/schedules/test_schedule_times.py).

Times are milliseconds since the epoch. `at` without an offset and cron expressions are read in
the bridge's local time zone (`tz`, the machine's by default): the agent and the owner say
"at 9" meaning the clock on the wall. Cron expressions are read by `croniter`, not by hand.
What is wrong with a schedule's arguments is `BadArguments` (schedule_args.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

from croniter import croniter

from .schedule_args import MAX_IN_SECONDS, BadArguments, clock

GRACE_MS = 2000  # an `at` this little in the past (the agent's clock, the call's time) is "now"


def _zone(tz: tzinfo | None) -> tzinfo:
    return tz or datetime.now().astimezone().tzinfo or UTC


def first_due(
    now_ms: int,
    in_seconds: float | None = None,
    at: str | None = None,
    cron: str | None = None,
    tz: tzinfo | None = None,
) -> int:
    """When a new schedule runs first; BadArguments (one line for the agent) when it cannot."""
    if in_seconds is not None:
        return now_ms + int(round(in_seconds * 1000))
    if at is not None:
        text = at.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise BadArguments(f"`at` is not an ISO 8601 time: {at!r} (e.g. 2026-12-05T09:00:00+01:00)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=_zone(tz))
        due = int(when.timestamp() * 1000)
        if due < now_ms - GRACE_MS:
            raise BadArguments(f"`at` {at} is in the past")
        if due > now_ms + MAX_IN_SECONDS * 1000:
            raise BadArguments("`at` is more than a year away")
        return max(due, now_ms)
    if cron is not None:
        return next_due(cron, now_ms, tz)
    raise BadArguments("give exactly one of `in_seconds`, `at` or `cron`")


def next_due(cron: str, after_ms: int, tz: tzinfo | None = None) -> int:
    """The first time `cron` names after `after_ms`; BadArguments if it is not a cron expression."""
    expression = cron.strip()
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise BadArguments(f"`cron` is not a 5-field cron expression: {cron!r} (e.g. 0 9 * * 1-5)")
    start = datetime.fromtimestamp(after_ms / 1000, _zone(tz))
    try:
        following = croniter(expression, start).get_next(datetime)
    except (ValueError, KeyError) as exc:
        raise BadArguments(f"`cron` {cron!r} cannot be used: {exc}") from None
    return int(following.timestamp() * 1000)


def after_run(cron: str | None, due_ms: int, now_ms: int, tz: tzinfo | None = None) -> int | None:
    """When a schedule runs next once its run due at `due_ms` is taken: never for a single run; for
    a cron, the first time after now — the times missed while the bridge was down run once, not
    once each."""
    if cron is None:
        return None
    return next_due(cron, max(due_ms, now_ms), tz)


def is_late(due_ms: int, started_ms: int) -> bool:
    """A run was missed while the bridge was down: it was due before this run of the bridge began."""
    return due_ms < started_ms


def run_line(agent: str, prompt: str, due_ms: int, late: bool, tz: tzinfo | None = None) -> str:
    """The line shown in the conversation before a scheduled run's answer."""
    shown = prompt if len(prompt) <= 300 else prompt[:300] + "…"
    line = f"⏰ {agent} scheduled: {shown}"
    if late:
        line += f"\n(late: it was due at {clock(due_ms, tz)}, while the bridge was not running)"
    return line


def when_text(due_ms: int | None, cron: str | None, tz: tzinfo | None = None) -> str:
    """How `schedules` and `!schedules` say when one runs."""
    if due_ms is None:
        return "not any more"
    text = f"next at {clock(due_ms, tz)}"
    return f"{text}, then on cron {cron}" if cron else text
