"""`sidekicks check`: start each configured agent once and report what it announces.

For each agent: `initialize` (name, version, protocol, loadSession, prompt capabilities, auth
methods), then `session/new` (modes, config options — models among them — and the unstable
`models` field), then the commands it announces. The first line per agent is `✓ name: …` or
`✗ name: reason`; the details follow on indented lines, also when `session/new` fails after a
good `initialize` (an agent that wants a login still tells who it is and how to log in).

When a step fails, the JSON-RPC error's `data` and the end of the agent's stderr follow the ✗
line: the cause is often there and nowhere else (e.g. Claude Code's adapter refusing to run as
root said so on stderr and answered only "Internal error").

Each agent is started as the bridge starts it: in its sandbox (docs/sandbox.md); the line
`sandbox:` says which (on, with what it writes; off; remote over ssh).

`announced()` talks to the agent; `report()` is a pure function of what was announced.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from acp import AcpError, AgentSpec, AuthRequired, start_agent

from ..agent_specs import home_warning, sandbox_line, spec_of
from ..voice.engine import check_line

START_LIMIT = 60.0  # seconds for the process to start and answer initialize
SESSION_LIMIT = 30.0  # seconds for session/new
COMMANDS_GRACE = 1.0  # seconds to wait for available_commands_update after session/new
LIST_LIMIT = 12  # values shown per list; the rest are counted
STDERR_LINES = 12  # lines of a failed agent's stderr shown (its end), as in a crash notice
LINE_CHARS = 300  # an error's data and each stderr line, cut


@dataclass
class Announced:
    """What one agent told us; `error` is set when a step failed (the later fields are then unknown)."""

    info: dict[str, Any] = field(default_factory=dict)
    protocol: int = 0
    load_session: bool = False
    prompt_capabilities: dict[str, Any] = field(default_factory=dict)
    mcp_capabilities: dict[str, Any] = field(default_factory=dict)  # agentCapabilities.mcpCapabilities
    capabilities: dict[str, Any] = field(default_factory=dict)  # agentCapabilities, all of it
    auth_methods: list[dict[str, Any]] = field(default_factory=list)
    initialized: bool = False
    session: dict[str, Any] | None = None  # session/new's result
    commands: list[dict[str, Any]] | None = None
    error: str | None = None
    error_data: Any = None  # the `data` of the JSON-RPC error, when the agent sent one
    stderr: str = ""  # the end of its stderr, when it failed


async def check_agents(cfg, say) -> int:
    count = len(cfg.agents)
    say(f"{cfg.path}: configuration is valid ({count} agent{'s' if count != 1 else ''})")
    say(check_line(cfg.voice))  # voice notes: transcription here or not (docs/voice.md)
    failures = 0
    for name, agent in cfg.agents.items():
        found = await announced(spec_of(cfg, name))
        failures += found.error is not None
        for line in report(name, found, tools=agent.tools, sandbox=sandbox_line(cfg, name)):
            say(line)
        warning = home_warning(cfg, name)
        if warning:
            say(f"    ⚠ {warning}")
    return 1 if failures else 0


async def announced(spec: AgentSpec) -> Announced:
    """Start the agent, ask what it can do, stop it. Never raises for the agent's failures."""
    found = Announced()
    commands: list[list[dict[str, Any]]] = []
    running = None
    explained = False
    step = f"no answer to initialize within {START_LIMIT:g} s"
    try:
        running = await asyncio.wait_for(
            start_agent(spec, on_commands=lambda _name, announced: commands.append(announced)), START_LIMIT
        )
        found.initialized = True
        found.info = dict(running.info or {})
        found.protocol = running.protocol_version
        found.load_session = bool(running.load_session)
        found.prompt_capabilities = dict(running.prompt_capabilities or {})
        found.mcp_capabilities = dict(running.mcp_capabilities or {})
        found.capabilities = dict(getattr(running, "agent_capabilities", None) or {})
        found.auth_methods = [m for m in running.auth_methods or [] if isinstance(m, dict)]
        step = f"no answer to session/new within {SESSION_LIMIT:g} s"
        found.session = await asyncio.wait_for(running.open_session(spec.cwd), SESSION_LIMIT)
        # most agents announce their commands just after session/new's reply
        loop = asyncio.get_running_loop()
        deadline = loop.time() + COMMANDS_GRACE
        while not commands and loop.time() < deadline:
            await asyncio.sleep(0.05)
        found.commands = commands[-1] if commands else (running.commands or [])
    except (TimeoutError, AcpError, OSError, ValueError) as exc:
        reason = str(exc) or step
        if reason.startswith(f"{spec.name}: "):  # ACP errors already name their agent
            reason = reason[len(spec.name) + 2 :]
        found.error = reason
        found.error_data = getattr(exc, "data", None)
        found.stderr = getattr(exc, "stderr_tail", "") or ""
        explained = isinstance(exc, AuthRequired)  # the line says it all: log in first
    finally:
        if running is not None:
            await running.stop()
            if found.error is not None and not found.stderr and not explained:
                found.stderr = running.stderr_tail()  # read once it stopped: all of it is in
    return found


# ---- the report: pure --------------------------------------------------------------------------


def report(name: str, found: Announced, tools: bool = True, sandbox: str | None = None) -> list[str]:
    """The lines `check` prints for one agent: the ✓/✗ line, then indented details (`tools`:
    the agent's `tools` setting, for the line naming the bridge's MCP tools it is offered;
    `sandbox`: what agent_specs.sandbox_line says of its sandbox)."""
    who = f"{_text(found.info.get('name')) or '?'} {_text(found.info.get('version'))}".rstrip()
    load = "yes" if found.load_session else "no"
    boxed = [f"    sandbox: {sandbox}"] if sandbox else []
    if found.error is None:
        lines = [f"✓ {name}: {who}; loadSession: {load}; commands: {_command_names(found.commands)}"] + boxed
    else:
        lines = [f"✗ {name}: {_text(found.error)}"] + boxed + _why(found)
        if not found.initialized:
            return lines
        lines.append(f"    agent: {who}; loadSession: {load}")
    lines.append(f"    protocol: ACP v{found.protocol}; prompts: {_prompt_kinds(found.prompt_capabilities)}")
    lines.append(f"    capabilities: {', '.join(announced_capabilities(found.capabilities)) or 'none'}")
    lines.append(f"    auth methods: {_auth(found.auth_methods)}")
    lines.append(f"    tools: {_tools(name, tools, found.mcp_capabilities)}")
    if found.session is None:
        return lines
    lines.append(f"    modes: {_modes(found.session.get('modes'))}")
    lines.extend(_config_options(found.session.get("configOptions")))
    lines.append(f"    models: {_models(found.session.get('models'))}")
    return lines


def announced_capabilities(caps: Any, prefix: str = "") -> list[str]:
    """Every capability in `agentCapabilities`, as dotted names: a true value or an object
    (`{}` means supported, in ACP) is announced, its fields too (`sessionCapabilities.resume`);
    false, null and `_meta` are not."""
    names: list[str] = []
    for key, value in caps.items() if isinstance(caps, dict) else ():
        if key == "_meta" or value in (None, False):
            continue
        name = f"{prefix}{key}"
        if not isinstance(value, dict):
            names.append(name)
            continue
        inner = announced_capabilities(value, f"{name}.")
        # an object of fields none of which is on announces nothing; an empty one announces
        # itself, except the baseline ones (prompts of text, MCP over stdio)
        if inner or (not value and name not in ("promptCapabilities", "mcpCapabilities")):
            names.extend(inner or [name])
    return names


def _tools(name: str, on: bool, mcp: dict[str, Any]) -> str:
    """The bridge's MCP server as this agent is offered it (bridge/mcp)."""
    if not on:
        return f"none (agents.{name}.tools: off)"
    from ..mcp.tools import NAMES, SERVER_NAME

    return f"MCP server `{SERVER_NAME}` over stdio — {', '.join(NAMES)}"


def _why(found: Announced) -> list[str]:
    """What the agent said of its failure beyond the message: the error's data, the end of
    its stderr (where agents write the cause: Claude Code's adapter, for one)."""
    lines = []
    if found.error_data not in (None, "", {}, []):
        data = (
            found.error_data
            if isinstance(found.error_data, str)
            else json.dumps(found.error_data, ensure_ascii=False, default=str)
        )
        lines.append(f"    error data: {_cut(_text(data))}")
    tail = [_cut(_printable(line)) for line in found.stderr.splitlines() if _printable(line)][-STDERR_LINES:]
    if tail:
        lines.append(f"    stderr (last {len(tail)} line{'s' if len(tail) != 1 else ''}):")
        lines.extend(f"      {line}" for line in tail)
    return lines


ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")  # colours, cursor moves


def _printable(line: str) -> str:
    """A stderr line as plain text for a terminal: no escape sequences, no control characters."""
    return _text("".join(ch if ch.isprintable() else " " for ch in ANSI.sub("", line)))


def _cut(text: str) -> str:
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + "…"


def _text(value: Any) -> str:
    """A value announced by the agent as one printable line."""
    return " ".join(str(value).split()) if value is not None else ""


def _listed(items: list[str]) -> str:
    if not items:
        return "none"
    shown = items[:LIST_LIMIT]
    more = len(items) - len(shown)
    return ", ".join(shown) + (f", … {more} more" if more else "")


def _command_names(commands: list[dict[str, Any]] | None) -> str:
    names = ["/" + _text(c.get("name") or "?") for c in commands or [] if isinstance(c, dict)]
    return ", ".join(names) or "none"  # every command: they are what the owner types


def _prompt_kinds(caps: dict[str, Any]) -> str:
    kinds = ["text"]  # every agent takes text and resource links (ACP baseline)
    kinds += [
        label
        for key, label in (("image", "image"), ("audio", "audio"), ("embeddedContext", "embedded context"))
        if caps.get(key)
    ]
    return ", ".join(kinds)


def _auth(methods: list[dict[str, Any]]) -> str:
    shown = []
    for method in methods:
        ident, label = _text(method.get("id") or "?"), _text(method.get("name"))
        shown.append(f"{ident} ({label})" if label and label != ident else ident)
    return _listed(shown)


def _choice(value: str, label: Any, current: bool) -> str:
    label = _text(label)
    text = f'{value} "{label}"' if label and label != value else value
    return text + (" (current)" if current else "")


def _offered(offers: Any, listed: str, key: str, current: str) -> str:
    """The modes or models a session offers (`listed`: their list, `key`: each one's id,
    `current`: the chosen one's id)."""
    if not isinstance(offers, dict):
        return "none"
    chosen = offers.get(current)
    return _listed(
        [
            _choice(_text(m.get(key)), m.get("name"), m.get(key) == chosen)
            for m in offers.get(listed) or []
            if isinstance(m, dict)
        ]
    )


def _modes(modes: Any) -> str:
    return _offered(modes, "availableModes", "id", "currentModeId")


def _models(models: Any) -> str:
    return _offered(models, "availableModels", "modelId", "currentModelId")


def _select_values(option: dict[str, Any]) -> list[str]:
    """A select's values; grouped options (`{group, name, options}`) are flattened in order."""
    current = option.get("currentValue")
    values = []
    for item in option.get("options") or []:
        if not isinstance(item, dict):
            continue
        members = item.get("options") if isinstance(item.get("options"), list) else [item]
        for value in members:
            if isinstance(value, dict) and "value" in value:
                values.append(_choice(_text(value["value"]), value.get("name"), value["value"] == current))
    return values


def _config_options(options: Any) -> list[str]:
    options = [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []
    if not options:
        return ["    config options: none"]
    lines = ["    config options:"]
    for option in options:
        head = _text(option.get("id") or "?")
        if _text(option.get("name")) and _text(option.get("name")) != head:
            head += f' "{_text(option.get("name"))}"'
        if option.get("category"):
            head += f" [{_text(option['category'])}]"
        kind = option.get("type")
        if kind == "select":
            lines.append(f"      {head}: {_listed(_select_values(option))}")
        else:  # a type this client does not know (ACP: ignore it): say so, with its value
            lines.append(
                f"      {head}: {_text(kind) or 'untyped'} option, current: {_text(option.get('currentValue')) or '?'}"
            )
    return lines
