"""Rich replies (`m.relates_to.m.in_reply_to`): which event a message answers, and the message
without the fallback quote older clients put in front of it. Pure functions.

A reply's fallback is the quoted event: lines starting with `>` then a blank line at the start of
`body`, and an `<mx-reply>…</mx-reply>` block at the start of `formatted_body`. It names the
quoted sender, so routing would read it as a mention and history would keep a copy of the quoted
text: the bridge strips it before routing and before storing (Matrix spec, "Rich replies").
A thread message whose `m.in_reply_to` is only a fallback for clients without threads
(`is_falling_back`) carries no quote in its body: its body is left alone.
"""

from __future__ import annotations

import re
from typing import Any

MX_REPLY = re.compile(r"^\s*<mx-reply>.*?</mx-reply>", re.IGNORECASE | re.DOTALL)
# the first line of a body fallback: "> <@sender:server> quoted text" ("> * <@…>" for an emote)
FALLBACK_HEAD = re.compile(r"^> (?:\* )?<@[^>\s]+>")


def replied_to(content: dict[str, Any]) -> str | None:
    """The event id this message replies to, if it is a reply. A thread message's
    `m.in_reply_to` marked `is_falling_back` is no reply: clients put the thread's latest event
    there for clients without threads (a number typed in a thread answers the thread's question)."""
    relates = content.get("m.relates_to")
    if not isinstance(relates, dict) or relates.get("is_falling_back") is True:
        return None
    reply = relates.get("m.in_reply_to")
    event_id = reply.get("event_id") if isinstance(reply, dict) else None
    return event_id if isinstance(event_id, str) and event_id else None


def strip_body_fallback(body: str) -> str:
    """`body` without its leading `> ` lines and the blank line after them — when they are a
    fallback (the first names the quoted sender); a quote of the owner's own is kept."""
    lines = body.split("\n")
    if not FALLBACK_HEAD.match(lines[0]):
        return body
    at = 0
    while at < len(lines) and lines[at].startswith(">"):
        at += 1
    if at < len(lines) and lines[at].strip() == "":
        at += 1
    return "\n".join(lines[at:])


def strip_html_fallback(html: str) -> str:
    """`formatted_body` without its leading `<mx-reply>` block."""
    return MX_REPLY.sub("", html, count=1)


def without_fallback(content: dict[str, Any]) -> dict[str, Any]:
    """The content of a message with its reply fallback removed (the same dict if none)."""
    if replied_to(content) is None:
        html = content.get("formatted_body")
        if isinstance(html, str) and MX_REPLY.match(html):  # a stray block: never shown as text
            return {**content, "formatted_body": strip_html_fallback(html)}
        return content
    out = dict(content)
    relates = content.get("m.relates_to") or {}
    body = out.get("body")
    if isinstance(body, str) and not relates.get("is_falling_back"):
        out["body"] = strip_body_fallback(body)
    html = out.get("formatted_body")
    if isinstance(html, str):
        out["formatted_body"] = strip_html_fallback(html)
    return out
