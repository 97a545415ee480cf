"""`sidekicks up` checks each agent once it is running: an agent that cannot start is
said at once, in the terminal and in the owner's DM with the bridge bot, in one line with the fix
— not on the owner's first message.

An agent whose config says `sandbox: off` is said the same way (docs/sandbox.md): the owner
knows which agents reach everything the bridge reaches.

The check is `sidekicks check`'s (bridge/local/check.py: `announced`), one agent after the other,
in the background: the banner is not delayed. `trouble()` turns what failed into the line; pure.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

import aiohttp

from acp.process import fix_for, sandbox_problem
from acp.remote import is_remote

from ..agent_specs import sandbox_of, spec_of, unsandboxed
from .check import announced

log = logging.getLogger(__name__)

_FIXES: tuple[tuple[re.Pattern, str], ...] = (
    (
        re.compile(r"^command not found: (?P<what>.+)$"),
        "command `{what}` not found — fix agents.{name}.command in {path}",
    ),
    (
        re.compile(r"^command not executable: (?P<what>.+)$"),
        "`{what}` is not executable — fix agents.{name}.command in {path} (or chmod +x it)",
    ),
    (
        re.compile(r"^working directory not found: (?P<what>.+)$"),
        "its folder {what} does not exist — fix agents.{name}.cwd in {path}",
    ),
    (
        re.compile(r"^exited during initialize \((?P<code>exit code -?\d+)\)(?:: (?P<what>.+))?$"),
        "stops at start ({code}{detail}) — fix agents.{name}.command in {path}; `sidekicks check` shows more",
    ),
    (
        re.compile(r"^(?:no answer to initialize within|initialize failed)"),
        "{error} — is agents.{name}.command in {path} an ACP agent? `sidekicks check` shows more",
    ),
    (re.compile(r"^requires authentication"), "{error}"),
    (  # an agent over ssh: ssh's own reason (acp/remote.py)
        re.compile(r"^the ssh connection to "),
        "{error} — check that host, or fix agents.{name}.command in {path}",
    ),
    (
        re.compile(r"^sandbox cannot run: (?P<what>.+?); install slirp4netns"),
        "its sandbox's network cannot run ({what}) — install slirp4netns (apt-get install slirp4netns), "
        "or set agents.{name}.sandbox: {{network: off}} in {path}",
    ),
    (
        re.compile(r"^sandbox cannot run: (?P<what>.+?); install bubblewrap"),
        "its sandbox cannot run ({what}) — install bubblewrap (apt-get install bubblewrap), "
        "or set agents.{name}.sandbox: off in {path}",
    ),
)


def trouble(name: str, error: str, path: str) -> str:
    """One line: agent `name` cannot start (`error`, as `check` reports it) and what to change."""
    error = " ".join(error.split())
    for pattern, template in _FIXES:
        match = pattern.match(error)
        if match:
            fields = {k: v for k, v in match.groupdict().items() if v is not None}
            detail = f": {fields['what']}" if "code" in fields and "what" in fields else ""
            return f"agent {name}: " + template.format(name=name, path=path, error=error, detail=detail, **fields)
    return f"agent {name}: {error} — `sidekicks check -c {path}` shows more"


async def sandbox_trouble(cfg) -> list[str]:
    """One line per agent whose sandbox cannot run here (bubblewrap missing or refused): that
    agent will not start. What `sidekicks run` says before the bridge starts."""
    lines = []
    for name, agent in cfg.agents.items():
        box = sandbox_of(cfg, agent)
        problem = await sandbox_problem(box.network) if box is not None else None
        if problem is not None:
            lines.append(trouble(name, f"sandbox cannot run: {problem}; {fix_for(problem)}", str(cfg.path)))
    return lines


async def check_at_start(
    cfg,
    say: Callable[[str], None],
    tell: Callable[[str], Awaitable[None]],
    readable: Callable[[], Awaitable[None]] | None = None,
) -> list[str]:
    """Check every agent, one after the other; say each failure (`✗ …`) at once, then one line
    of summary; then, once `readable()` returns (the owners can read the bot's DM), tell the
    owners each failure, and each agent that runs without a sandbox. Returns the failure lines."""
    failures = []
    for name in cfg.agents:
        found = await announced(spec_of(cfg, name))
        if found.error is None:
            continue
        line = trouble(name, found.error, str(cfg.path))
        failures.append(line)
        say(f"✗ {line}")
    # `sandbox: off` is the owner's to know (not an agent over ssh: its machine decides)
    open_agents = [
        f"agent {name} {unsandboxed(cfg, name)}"
        for name, agent in cfg.agents.items()
        if not agent.sandbox.on and not is_remote(agent.command)
    ]
    for line in open_agents:
        say(f"! {line}")
    count = len(cfg.agents)
    checked = f"• checked {count} agent{'s' if count != 1 else ''}"
    if not failures:
        say(f"{checked}: each starts")
    else:
        say(f"{checked}: {len(failures)} cannot start (also said in your DM with the bridge bot)")
    if not failures and not open_agents:
        return failures
    if readable is not None:
        await readable()
    for line in failures + open_agents:
        try:
            await tell(f"⚠️ {line}")
        except Exception as exc:  # the terminal has it; the DM is a courtesy
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
