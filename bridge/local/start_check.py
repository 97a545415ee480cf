"""`sidekicks up` checks each agent once it is running (issue 27): an agent that cannot start is
said at once, in the terminal and in the owner's DM with the bridge bot, in one line with the fix
— not on the owner's first message.

The check is `sidekicks check`'s (bridge/local/check.py: `announced`), one agent after the other,
in the background: the banner is not delayed. `trouble()` turns what failed into the line; pure.
"""
from __future__ import annotations

import asyncio
import logging
import re
from typing import Awaitable, Callable

import aiohttp

from .check import announced, spec_of

log = logging.getLogger(__name__)

_FIXES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"^command not found: (?P<what>.+)$"),
     "command `{what}` not found — fix agents.{name}.command in {path}"),
    (re.compile(r"^command not executable: (?P<what>.+)$"),
     "`{what}` is not executable — fix agents.{name}.command in {path} (or chmod +x it)"),
    (re.compile(r"^working directory not found: (?P<what>.+)$"),
     "its folder {what} does not exist — fix agents.{name}.cwd in {path}"),
    (re.compile(r"^exited during initialize \((?P<code>exit code -?\d+)\)(?:: (?P<what>.+))?$"),
     "stops at start ({code}{detail}) — fix agents.{name}.command in {path}; "
     "`sidekicks check` shows more"),
    (re.compile(r"^(?:no answer to initialize within|initialize failed)"),
     "{error} — is agents.{name}.command in {path} an ACP agent? `sidekicks check` shows more"),
    (re.compile(r"^requires authentication"), "{error}"),
)


def trouble(name: str, error: str, path: str) -> str:
    """One line: agent `name` cannot start (`error`, as `check` reports it) and what to change."""
    error = " ".join(error.split())
    for pattern, template in _FIXES:
        match = pattern.match(error)
        if match:
            fields = {k: v for k, v in match.groupdict().items() if v is not None}
            detail = f": {fields['what']}" if "code" in fields and "what" in fields else ""
            return f"agent {name}: " + template.format(name=name, path=path, error=error,
                                                      detail=detail, **fields)
    return f"agent {name}: {error} — `sidekicks check -c {path}` shows more"


async def check_at_start(cfg, say: Callable[[str], None], tell: Callable[[str], Awaitable[None]],
                         readable: Callable[[], Awaitable[None]] | None = None) -> list[str]:
    """Check every agent, one after the other; say each failure (`✗ …`) at once, then one line
    of summary; then, once `readable()` returns (the owners can read the bot's DM), tell the
    owners each failure. Returns the failure lines."""
    failures = []
    for name, agent in cfg.agents.items():
        found = await announced(spec_of(name, agent))
        if found.error is None:
            continue
        line = trouble(name, found.error, str(cfg.path))
        failures.append(line)
        say(f"✗ {line}")
    count = len(cfg.agents)
    if not failures:
        say(f"• checked {count} agent{'s' if count != 1 else ''}: each starts")
        return failures
    say(f"• checked {count} agent{'s' if count != 1 else ''}: {len(failures)} cannot start "
        "(also said in your DM with the bridge bot)")
    if readable is not None:
        await readable()
    for line in failures:
        try:
            await tell(f"⚠️ {line}")
        except Exception as exc:   # the terminal has it; the DM is a courtesy
            log.warning("could not tell the owners: %s (%s)", line, exc)
    return failures


async def owners_have_a_device(bridge, every: float = 2.0) -> None:
    """Until every owner has a device: a line the bot sends into an encrypted DM before the
    owner has logged in anywhere is encrypted for no device of theirs, and the client they log
    in with next cannot read it (seen in nheko 0.11.3: "There is no key to unlock this message").
    `sidekicks up` is started before the owner logs in, so its start check waits for this."""
    owners = list(bridge.config.owners)
    if not bridge.config.encryption:
        return
    while True:
        try:
            if await bridge.bot.intent.has_devices(owners):
                return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(every)
