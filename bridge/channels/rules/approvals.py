"""Who answers a permission prompt or a question, and whom it mentions (docs/sessions.md,
"Approvals"). Pure: no Matrix, no store (tests/unit/channels/rules/test_approvals.py).

Per channel, `!approve requester` (the default) or `!approve any-owner`:

* requester: only the owner whose message started the turn answers; the ask mentions them
  (`m.mentions.user_ids` and a matrix.to pill), so their client notifies them;
* any-owner: every owner answers, and every owner is mentioned.

A turn no owner's message started (a scheduled run) is answered by any owner, all mentioned.
Every other message the bridge sends declares no mentions (matrix/intent.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

REQUESTER = "requester"
ANY_OWNER = "any-owner"
USAGE = "Usage: !approve requester, !approve any-owner, or !approve to see the setting."


def approve_mode(stored: str | None) -> str:
    """The channel's stored setting (store/keys.py `approve`): absent is `requester`."""
    return ANY_OWNER if stored == ANY_OWNER else REQUESTER


def approve_switch(args: Iterable[str]) -> str | None:
    """`!approve` arguments → the mode asked for, or None (show it). Anything else raises
    ValueError with the usage line."""
    words = [w.lower() for w in args]
    if not words:
        return None
    if len(words) == 1 and words[0] in (REQUESTER, ANY_OWNER, "any"):
        return ANY_OWNER if words[0] == "any" else words[0]
    raise ValueError(USAGE)


def approve_state(mode: str) -> str:
    """The `!approve` setting in words."""
    if mode == ANY_OWNER:
        return (
            "Any owner may answer the agents' permission prompts and questions here; each "
            "mentions every owner (!approve requester: only the one who asked)."
        )
    return (
        "Only the owner whose message started a turn answers its permission prompts and "
        "questions here; each mentions that owner (!approve any-owner: any owner)."
    )


def approvers(mode: str, requester: str | None, owners: Sequence[str]) -> tuple[str | None, list[str]]:
    """(the owner who answers — None: any owner —, the owners the ask mentions)."""
    if mode == ANY_OWNER or requester is None:
        return None, list(dict.fromkeys(owners))
    return requester, [requester]


def pill(user_id: str) -> str:
    """A matrix.to link to `user_id`: clients show it as a pill."""
    return f'<a href="https://matrix.to/#/{escape(user_id)}">{escape(user_id)}</a>'


def mentioning(content: dict[str, Any], user_ids: Sequence[str]) -> dict[str, Any]:
    """Message `content` that mentions `user_ids`: `m.mentions.user_ids` (what makes their
    clients notify them) and their pills before the HTML; the plain body is left as it is (it
    starts with what is asked). No one: `content` unchanged."""
    if not user_ids:
        return content
    out = dict(content)
    out["m.mentions"] = {"user_ids": list(user_ids)}
    if "formatted_body" in content:
        out["formatted_body"] = f"<p>{', '.join(pill(u) for u in user_ids)}:</p>{content['formatted_body']}"
    return out
