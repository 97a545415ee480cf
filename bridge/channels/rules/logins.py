"""An agent that wants a login (docs/sessions.md "Logins"): the one line the owner reads, and the
method the bridge runs itself. Pure.

An agent answers `session/new` with JSON-RPC error -32000 (`auth_required`) and lists its
`authMethods` in its `initialize` answer. A method's type (the ACP registry's AUTHENTICATION.md)
is its `type`, else `terminal` when its `_meta` has `terminal-auth`, else `agent`:
- `terminal`: a command the owner runs once on the machine — the agent's own command with the
  method's `args` (and `env`), or the command its `_meta["terminal-auth"]` names;
- `agent`: the agent logs in itself when the client calls `authenticate` with the method's id
  (the first such method the agent lists); what it asks meanwhile (a page to open) is relayed
  to the owner, the page's host first, then the link in full (`asked_line`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

LOGIN = "🔑"
WAITS = "your message waits and is answered once it is logged in"
MESSAGE_CHARS = 200  # of what the agent says beside the link


def method_type(method: dict[str, Any]) -> str:
    kind = method.get("type")
    if isinstance(kind, str) and kind:
        return kind
    meta = method.get("_meta")
    if isinstance(meta, dict) and "terminal-auth" in meta:
        return "terminal"
    return "agent"


def agent_method(methods: Sequence[Any]) -> dict[str, Any] | None:
    """The first method the bridge runs itself (`authenticate`), or None."""
    for method in methods:
        if isinstance(method, dict) and isinstance(method.get("id"), str) and method_type(method) == "agent":
            return method
    return None


def terminal_command(method: dict[str, Any], command: Sequence[str]) -> str:
    """The command line to run once for a `terminal` method, shell-quoted."""
    meta = method.get("_meta")
    named = meta.get("terminal-auth") if isinstance(meta, dict) else None
    if isinstance(named, dict) and isinstance(named.get("command"), str):
        words = [named["command"], *_strings(named.get("args"))]
    else:
        words = [*command, *_strings(method.get("args"))]
    env = method.get("env")
    pairs = (
        [f"{k}={shlex.quote(str(v))}" for k, v in env.items() if isinstance(k, str)] if isinstance(env, dict) else []
    )
    return " ".join([*pairs, *(shlex.quote(word) for word in words)])


def login_line(title: str, command: Sequence[str], methods: Sequence[Any]) -> str:
    """What the owner reads: how to log in, and that the message waits."""
    waits = f"{WAITS}."
    terminal = [m for m in methods if isinstance(m, dict) and method_type(m) == "terminal"]
    if terminal:
        run = terminal_command(terminal[0], command)
        return f"{LOGIN} {title} needs a login: run once on this machine `{run}`{_name(terminal[0])}; {waits}"
    agent = agent_method(methods)
    if agent is not None:
        return f"{LOGIN} {title} needs a login: it is logging in{_name(agent)}, follow what it asks; {waits}"
    return f"{LOGIN} {title} needs a login and names no way to do it: log in with it on this machine; {waits}"


def asked_line(title: str, method: dict[str, Any], safe: tuple[str, str] | None, message: str = "") -> str:
    """What the agent asks while it logs in: the host of the page to open first, then the link
    in full, then what it says about it, in one line. `safe`: the link and its host as
    `acp.elicitation.safe_link` offers them; None for a link a browser would read otherwise than
    it shows, which is not shown."""
    said = " ".join(message.split())[:MESSAGE_CHARS]
    said = f" ({said})" if said else ""
    if safe is None:
        return (
            f"{LOGIN} {title} is logging in{_name(method)} and asks you to open a link that is not a plain "
            f"http(s) link; it is not shown{said}: log in with it on this machine; {WAITS}."
        )
    link, host = safe
    return f"{LOGIN} {title} is logging in{_name(method)}: open a page on {host}: {link}{said}; {WAITS}."


def failed_line(title: str, method: dict[str, Any], reason: str) -> str:
    """The agent's login ended without logging it in: why, in one line, and that the message waits."""
    why = " ".join(reason.split())[:MESSAGE_CHARS] or "no reason given"
    return (
        f"{LOGIN} {title} could not log in{_name(method)}: {why}; {WAITS} "
        "(log in with it on this machine, or `!stop` and send it again to try again)."
    )


def _name(method: dict[str, Any]) -> str:
    name = method.get("name") or method.get("id")
    return f" ({name})" if isinstance(name, str) and name else ""


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []
