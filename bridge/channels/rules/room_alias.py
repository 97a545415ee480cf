"""A `!new` channel's local alias and the line that says it was made (docs/commands.md "In the
bridge bot's DM"). Pure: tests/unit/channels/rules/test_room_alias.py.

`!new test local` gives the room `#test:localhost` when that alias is free, so "#test" in the
answer is a real address; otherwise the answer names the room without a "#".
"""

from __future__ import annotations

import re
from html import escape

from .help_text import Help

_NOT_ALIAS = re.compile(r"[^a-z0-9._=-]+")


def alias_part(name: str) -> str | None:
    """The local part of an alias for a channel called `name` ("code review" → "code-review");
    None when nothing of it can stand in an alias."""
    part = _NOT_ALIAS.sub("-", name.strip().lower()).strip("-.")
    return part[:64] or None


def made_text(name: str, agents: list[str], alias: str | None, link: str) -> Help:
    """The bot's answer to `!new`: a link named with the room's alias (`alias`, given it was
    free), else with its name in quotes; `link` is the room's matrix.to link by id."""
    who = ", ".join(agents)
    if alias is not None:
        shown = f'<a href="https://matrix.to/#/{escape(alias)}">{escape(alias)}</a>'
        return Help(f"Made {alias} with {who}: {link}", f"<p>Made {shown} with {escape(who)}.</p>")
    shown = f'<a href="{escape(link)}">{escape(name)}</a>'
    return Help(f"Made “{name}” with {who}: {link}", f"<p>Made {shown} with {escape(who)}.</p>")
