"""How scheduled work reads: to the agent when a run comes (the frame), to the owner when an
agent schedules something (the approval ask, the one-off's notice), and in an agent's own
`schedules()` list. Pure (tests/unit/channels/schedules/test_schedule_frames.py); see docs/SECURITY.md,
"Scheduled work".

A scheduled run's prompt never passes as the owner's words: the agent wrote it, earlier. Its
first line says so — a scheduled run, which agent set which schedule when, how it repeats and
who approved it, when this run was due — and how many lines of the agent's own text follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from html import escape
from typing import Any

from ..turns.context import unframe
from .schedule_args import clock
from .schedule_times import when_text

SHOWN_CHARS = 300  # a prompt shown to the owner is cut here

APPROVE, DECLINE = "approve", "decline"
OPTIONS = (APPROVE, DECLINE)  # the ask's numbered choices, in order: 1 approves, 2 declines
APPROVED = "✅ Approved: it runs on its cron"
DECLINED = "❌ Declined: removed, it never runs"
TIMED_OUT = "⏱ No answer: not approved, removed"
STOPPED = "⏹ Not answered before the bridge stopped: asked again when it is back"
WITHDRAWN = "🗑 Cancelled before an answer"
WAITING_STATUS = "🗓 waiting for your approval of a schedule"


def run_prompt(
    agent: str,
    number: int,
    set_ms: int,
    cron: str | None,
    approved_ms: int | None,
    due_ms: int,
    late: bool,
    text: str,
    tz: timezone | None = None,
) -> str:
    """What the agent is told when a run of its schedule comes: one line saying it is a
    scheduled run and whose, then the text it scheduled (unframed: none of its lines reads as a
    frame of the bridge, docs/architecture.md "What each agent reads")."""
    if cron:
        how = f"repeating on cron {cron}"
        how += (
            f", approved by the owner at {clock(approved_ms, tz)}"
            if approved_ms is not None
            else ", not approved by the owner"
        )
    else:
        how = "a single run"
    lines = text.count("\n") + 1
    late_text = ", late: the bridge was not running then" if late else ""
    head = (
        f"[Scheduled run, not a message from the owner: schedule {number}, set by {agent} at "
        f"{clock(set_ms, tz)} ({how}); this run was due at {clock(due_ms, tz)}{late_text}. "
        f"The {'line' if lines == 1 else f'{lines} lines'} below {'is' if lines == 1 else 'are'} "
        f"what {agent} asked to be told then, {agent}'s own words:]"
    )
    return f"{head}\n{unframe(text)}"  # its lines cannot read as a frame (context.py)


def shown(prompt: str) -> str:
    return prompt if len(prompt) <= SHOWN_CHARS else prompt[:SHOWN_CHARS] + "…"


@dataclass(frozen=True)
class Ask:
    """An approval ask as the owner reads it (asks.py's `Shown`)."""

    body: str
    html: str

    def content(self) -> dict[str, Any]:
        return {"msgtype": "m.text", "body": self.body, "format": "org.matrix.custom.html", "formatted_body": self.html}


def approval_ask(agent: str, number: int, cron: str, next_ms: int, prompt: str, tz: timezone | None = None) -> Ask:
    """The ask a repeating schedule waits on: what would run, how often, and the two choices."""
    text = shown(prompt)
    intro = (
        f"🗓 {agent} asks to schedule work that repeats (schedule {number}): on cron {cron}, "
        f"first at {clock(next_ms, tz)} if approved. Each run, {agent} is told:"
    )
    choices = [
        "1. ✅ Approve: it runs on this cron until `!unschedule " + str(number) + "`",
        "2. ❌ Decline: it is removed and never runs",
    ]
    after = "React with the number or answer with it. Nothing runs before it is approved."
    body = "\n".join([intro, "> " + text.replace("\n", "\n> "), *choices, after])
    html = (
        f"<p>{escape(intro)}</p><blockquote>{escape(text).replace(chr(10), '<br>')}</blockquote>"
        f"<ol><li>✅ Approve: it runs on this cron until <code>!unschedule {number}</code></li>"
        f"<li>❌ Decline: it is removed and never runs</li></ol><p>{escape(after)}</p>"
    )
    return Ask(body, html)


def single_run_notice(agent: str, number: int, due_ms: int, prompt: str, tz: timezone | None = None) -> str:
    """The line a one-off schedule is posted with, with the command that cancels it."""
    return (
        f"🗓 {agent} scheduled a single run (schedule {number}) at {clock(due_ms, tz)}: "
        f"{shown(prompt)}\n`!unschedule {number}` cancels it."
    )


def outcome_line(approved: bool, cron: str) -> str:
    return f"{APPROVED} {cron}" if approved else DECLINED


def owner_when(state: str, due_ms: int | None, cron: str | None, tz: timezone | None = None) -> str:
    """When a schedule runs, as `!schedules` tells the owner."""
    if state == "waiting":
        return f"waiting for your approval, on cron {cron}"
    return when_text(due_ms, cron, tz)


def agent_line(
    number: int, state: str, due_ms: int | None, cron: str | None, prompt: str, tz: timezone | None = None
) -> str:
    """One schedule in the agent's `schedules()`: `state` is the store's (waiting, active,
    declined)."""
    if state == "waiting":
        when = f"waiting for the owner's approval, on cron {cron}; it does not run before"
    elif state == "declined":
        when = f"declined by the owner (on cron {cron}): removed, it never runs"
    else:
        when = when_text(due_ms, cron, tz)
    return f"id {number} ({when}): {prompt}"
