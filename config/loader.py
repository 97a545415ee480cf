"""Load and validate the per-user YAML file (docs/configuration.md).

Every problem is collected, not just the first, and reported as one line:
`config.yaml: agents.alice.command: must be a non-empty list of strings`. A key the loader does
not read is a problem too (`agents.alice.titel: unknown key — did you mean title?`), and so are
non-finite numbers and a file that is not UTF-8.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from acp import remote

from . import walls
from .model import AgentConfig, Budget, Config, SandboxConfig, VoiceConfig
from .paths import data_dir

USER_ID = re.compile(r"^@[a-z0-9._=\-/+]+:[A-Za-z0-9.\-]+(:\d+)?$")
LOCALPART = re.compile(r"^[a-z0-9._=\-]+$")
AGENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
DOMAIN = re.compile(r"^[A-Za-z0-9.\-]+(:\d+)?$")
VOICE_LANGUAGE = re.compile(r"^[A-Za-z]{2,3}$")
MAX_ATTACHMENT_MIB = 100  # base64 in one JSON line to the agent: ~133 MiB

# Every key the loader reads, per section ("agents.*": each agent's settings). A key not here is a
# typo or a setting this version does not have: refused, naming the closest known key
# (docs/configuration.md "Bad configuration").
KNOWN_KEYS: dict[str, tuple[str, ...]] = {
    "": ("owner", "homeserver", "appservice", "agents", "limits", "encryption", "database"),
    "homeserver": ("url", "domain", "embedded", "port", "config", "device_traffic"),
    "appservice": ("listen", "puppet_prefix", "bot", "registration", "id", "url", "permission_timeout"),
    "agents.*": (
        "title",
        "command",
        "cwd",
        "env",
        "timeout",
        "tools",
        "roots",
        "worktrees",
        "budget",
        "sandbox",
        "avatar",
    ),
    "agents.*.sandbox": ("write", "read", "network"),
    "agents.*.sandbox.network": ("host_ports", "internet"),
    "limits": (
        "agents_in_memory",
        "context_messages",
        "context_chars",
        "attachment_mib",
        "tool_calls_per_turn",
        "history_messages",
        "schedules_per_conversation",
        "handoffs",
    ),
}
KNOWN_KEYS[""] += ("voice", "voice_language", "voice_max_seconds")  # _voice below
KNOWN_KEYS[""] += ("registry",)  # _registry below


def unknown_keys(data: dict, known: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """The keys of `data` not in `known`, each with the closest known key (or None), in file order."""
    found = []
    for key in data:
        if isinstance(key, str) and key in known:
            continue
        name = key if isinstance(key, str) else shown(key)
        close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
        found.append((name, close[0] if close else None))
    return found


def shown(value: Any) -> str:
    """A value as the user wrote it in YAML: `.nan`, `.inf`, not Python's `nan`, `inf`."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return repr(value)


def split_command(value: Any) -> tuple[list[str] | None, str | None]:
    """`command:` as a list of strings, or one command line split as a shell would (no shell runs):
    "opencode acp" and [opencode, acp] are the same. Returns (parts, None) or (None, why not)."""
    if isinstance(value, str):
        try:
            value = shlex.split(value)
        except ValueError as exc:  # an unclosed quote
            return None, f"cannot be split into words ({str(exc).lower()}): write it as a list"
    if not isinstance(value, list) or not value or not all(isinstance(part, str) and part for part in value):
        return None, COMMAND_SHAPE
    return value, None


COMMAND_SHAPE = 'must be a non-empty list of strings, like [opencode, acp], or one string, like "opencode acp"'


class ConfigError(Exception):
    """A configuration that cannot be used; `problems` holds one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class _Checker:
    def __init__(self, label: str):
        self.label = label
        self.problems: list[str] = []

    def problem(self, key: str, text: str) -> None:
        self.problems.append(f"{self.label}: {key}: {text}" if key else f"{self.label}: {text}")

    def known(self, data: dict, section: str, path: str | None = None) -> set[str]:
        """Say each unknown key of `data` (a mapping at `path`); returns the known keys suggested,
        so a misspelt required key is named once, as a typo, not again as missing."""
        path = section if path is None else path
        suggested = set()
        known = KNOWN_KEYS[section]
        for key, close in unknown_keys(data, known):
            where = f"{path}.{key}" if path else key
            if close is not None:
                self.problem(where, f"unknown key — did you mean {close}?")
                suggested.add(close)
            else:
                self.problem(where, f"unknown key (known here: {', '.join(known)})")
        return suggested

    def section(self, data: dict, key: str) -> dict:
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(key, "must be a mapping")
            return {}
        self.known(value, key)
        return value

    def string(
        self,
        data: dict,
        key: str,
        path: str,
        default: str | None = None,
        pattern: re.Pattern | None = None,
        what: str = "",
    ) -> str | None:
        value = data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            self.problem(path, "must be a non-empty string")
            return None
        if pattern is not None and not pattern.match(value):
            self.problem(path, f"must be {what}, got {value!r}")
            return None
        return value

    def integer(self, data: dict, key: str, path: str, default: int, low: int, high: int) -> int:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problem(path, f"must be a whole number from {low} to {high}, got {shown(value)}")
            return default
        return value

    def number(self, data: dict, key: str, path: str, default: float, low: float) -> float:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
            self.problem(path, f"must be a finite number of at least {low:g}, got {shown(value)}")
            return default
        return float(value)


def load(path: str | os.PathLike, label: str | None = None) -> Config:
    """Read and validate `path`; raise ConfigError with every problem found."""
    path = Path(path)
    label = label or str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([f"{label}: file not found"]) from None
    except OSError as exc:
        raise ConfigError([f"{label}: cannot read: {exc.strerror}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            [f"{label}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}): save the file as UTF-8"]
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise ConfigError([f"{label}: {where}not valid YAML ({getattr(exc, 'problem', exc)})"]) from None
    except RecursionError:
        raise ConfigError([f"{label}: not a usable configuration (nested too deeply)"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{label}: must be a YAML mapping of keys (owner, homeserver, agents, ...)"])
    return parse(data, path, label)


def parse(data: dict[str, Any], path: Path, label: str) -> Config:
    """Check each section in turn (docs/configuration.md), collecting every
    problem; build the Config only when there is none."""
    c = _Checker(label)
    base = path.resolve().parent
    suggested = c.known(data, "")
    # a dict display is evaluated left to right: the problems come in this order
    fields = {
        "owners": _owners(c, data, suggested),
        **_homeserver(c, data, base),
        **_appservice(c, data, base),
        "agents": _agents(c, data, path),
        **_limits(c, data),
        "encryption": _encryption(c, data),
        "voice": _voice(c, data),
        "database": _database(c, data),
        "registry": _registry(c, data, base),
    }
    _ssh_configs(c, fields["agents"])
    _walls(c, fields, path)
    _host_ports(c, fields)
    if c.problems:
        raise ConfigError(c.problems)
    return Config(path=path.resolve(), data_dir=data_dir(path), **fields)


def _ssh_configs(c: _Checker, agents: dict[str, AgentConfig]) -> None:
    """An agent over ssh whose command names `-F FILE`: the file must lie outside every folder a
    sandboxed agent can write, or that agent could make ssh run a program as the bridge
    (docs/sandbox.md "Agents on other hosts")."""
    writable = {
        name: [os.path.realpath(p) for p in (*([a.cwd] if a.cwd else []), *a.roots, *a.sandbox.write)]
        for name, a in agents.items()
        if a.sandbox.on and not remote.is_remote(a.command)
    }
    for name, agent in agents.items():
        file = remote.config_file(agent.command) if remote.is_remote(agent.command) else None
        found = remote.config_within(os.path.realpath(file), writable) if file and os.path.isabs(file) else None
        if file and found:
            c.problem(
                f"agents.{name}.command",
                f"its ssh config {file} lies in {found[1]}, which agent {found[0]} can write (and so make ssh "
                "run any program as the bridge): move the file out of every agent's folders",
            )


def writable_paths(agent: AgentConfig) -> dict[str, list[str]]:
    """The folders a sandboxed agent writes, by the key that names them (links resolved)."""
    top = git_checkout(agent.cwd) if agent.worktrees and agent.cwd else None
    found = {
        f"agents.{agent.name}.cwd": [agent.cwd] if agent.cwd else [],
        f"agents.{agent.name}.roots": list(agent.roots),
        # bridge/coding/worktree_names.py: worktree_path
        f"agents.{agent.name}.worktrees": [top, top + ".worktrees"] if top else [],
        f"agents.{agent.name}.sandbox.write": list(agent.sandbox.write),
    }
    seen: set[str] = set()
    for key, paths in found.items():  # each path once, under the first key naming it (roots: cwd)
        found[key] = [p for p in dict.fromkeys(os.path.realpath(p) for p in paths) if p not in seen]
        seen.update(found[key])
    return found


def _walls(c: _Checker, fields: dict[str, Any], path: Path) -> None:
    """No path a sandboxed agent writes is or lies in one of the bridge's, or holds a link on the
    way to one (docs/sandbox.md "Nothing writable holds the bridge")."""
    agents = [a for a in fields["agents"].values() if a.sandbox.on and not remote.is_remote(a.command)]
    if not agents:
        return
    config_path = path.resolve()
    paths = walls.of_config(config_path, data_dir(path), fields["registration_path"], fields["homeserver_config"])
    for agent in agents:
        for key, why in walls.refusals(writable_paths(agent), paths, str(config_path.parent)):
            c.problem(key, why)


def _owners(c: _Checker, data: dict, suggested: set[str]) -> tuple[str, ...]:
    """`owner:` — one Matrix user id or a list of them."""
    owners_raw = data.get("owner")
    owners: list[str] = []
    if owners_raw is None and "owner" in suggested:
        pass  # already said: a misspelt `owner`
    elif owners_raw is None:
        c.problem("owner", 'is required: the Matrix user id allowed to talk to agents, e.g. "@me:localhost"')
    else:
        items = owners_raw if isinstance(owners_raw, list) else [owners_raw]
        for i, item in enumerate(items):
            key = f"owner[{i}]" if isinstance(owners_raw, list) else "owner"
            if not isinstance(item, str) or not USER_ID.match(item):
                c.problem(key, f'must be a Matrix user id like "@me:localhost", got {item!r}')
            else:
                owners.append(item)
        if isinstance(owners_raw, list) and not owners_raw:
            c.problem("owner", "must name at least one Matrix user id")
    return tuple(owners)


def _homeserver(c: _Checker, data: dict, base: Path) -> dict[str, Any]:
    """`homeserver:` — embedded or reached at `url`; the Config fields it sets."""
    hs = c.section(data, "homeserver")
    embedded = hs.get("embedded", "url" not in hs)
    if not isinstance(embedded, bool):
        c.problem("homeserver.embedded", f"must be true or false, got {embedded!r}")
        embedded = False
    hs_port = c.integer(hs, "port", "homeserver.port", 8008, 1, 65535)
    url = c.string(hs, "url", "homeserver.url")
    if url is not None and not re.match(r"^https?://[^/\s]+", url):
        c.problem("homeserver.url", f"must be an http(s) URL like http://127.0.0.1:8008, got {url!r}")
    if url is None:
        url = f"http://127.0.0.1:{hs_port}"
    hs_config = c.string(hs, "config", "homeserver.config")
    # does the homeserver send the bot's crypto traffic in transactions (MSC2409/MSC3202)? The
    # embedded one does (bridge/local/homeserver.py turns it on); another one only if its admin says so
    device_traffic = _on_off(c, hs.get("device_traffic", embedded), "homeserver.device_traffic", False)
    domain = (
        c.string(hs, "domain", "homeserver.domain", "localhost", DOMAIN, "a server name like localhost") or "localhost"
    )
    return {
        "domain": domain,
        "homeserver_url": url.rstrip("/"),
        "homeserver_embedded": embedded,
        "homeserver_port": hs_port,
        "device_traffic": device_traffic,
        "homeserver_config": (base / os.path.expanduser(hs_config)).resolve() if hs_config else None,
    }


def _appservice(c: _Checker, data: dict, base: Path) -> dict[str, Any]:
    """`appservice:` — where the bridge listens, its ids and names; the Config fields it sets."""
    aps = c.section(data, "appservice")
    listen = c.string(aps, "listen", "appservice.listen", "127.0.0.1:29333")
    host, port = "127.0.0.1", 29333
    if listen is not None:
        m = re.match(r"^([^:\s]+):(\d{1,5})$", listen)
        if not m or not 0 < int(m.group(2)) < 65536:
            c.problem("appservice.listen", f"must be HOST:PORT like 127.0.0.1:29333, got {listen!r}")
        else:
            host, port = m.group(1), int(m.group(2))
    prefix = (
        c.string(
            aps, "puppet_prefix", "appservice.puppet_prefix", "sk_", LOCALPART, "lowercase letters, digits or ._=- "
        )
        or "sk_"
    )
    bot = (
        c.string(
            aps, "bot", "appservice.bot", "sidekicks", LOCALPART, "a user name of lowercase letters, digits or ._=-"
        )
        or "sidekicks"
    )
    as_id = (
        c.string(aps, "id", "appservice.id", "sidekicks", LOCALPART, "lowercase letters, digits or ._=-") or "sidekicks"
    )
    reg = c.string(aps, "registration", "appservice.registration", "registration.yaml") or "registration.yaml"
    if bot.startswith(prefix):
        c.problem("appservice.bot", f"must not start with the puppet prefix {prefix!r}")
    permission_timeout = c.number(aps, "permission_timeout", "appservice.permission_timeout", 600.0, 1.0)
    public_url = c.string(aps, "url", "appservice.url")
    if public_url is not None and not re.match(r"^https?://[^/\s]+", public_url):
        c.problem("appservice.url", f"must be an http(s) URL the homeserver can reach, got {public_url!r}")
    return {
        "listen_host": host,
        "listen_port": port,
        "appservice_id": as_id,
        "puppet_prefix": prefix,
        "bot": bot,
        "registration_path": (base / os.path.expanduser(reg)).resolve(),
        "permission_timeout": permission_timeout,
        "public_url": public_url.rstrip("/") if public_url else None,
    }


def _limits(c: _Checker, data: dict) -> dict[str, Any]:
    """`limits:` — memory, context, attachments and the agents' tools; the Config fields it sets."""
    limits = c.section(data, "limits")
    in_memory = c.integer(limits, "agents_in_memory", "limits.agents_in_memory", 2, 1, 64)
    ctx_messages = c.integer(limits, "context_messages", "limits.context_messages", 20, 0, 10_000)
    ctx_chars = c.integer(limits, "context_chars", "limits.context_chars", 1500, 1, 1_000_000)
    attachment_mib = c.number(limits, "attachment_mib", "limits.attachment_mib", 10.0, 0.01)
    tool_calls = c.integer(limits, "tool_calls_per_turn", "limits.tool_calls_per_turn", 30, 1, 10_000)
    history_messages = c.integer(limits, "history_messages", "limits.history_messages", 100, 1, 10_000)
    schedules = c.integer(limits, "schedules_per_conversation", "limits.schedules_per_conversation", 20, 0, 1_000)
    handoffs = c.integer(limits, "handoffs", "limits.handoffs", 3, 0, 100)
    if attachment_mib > MAX_ATTACHMENT_MIB:
        c.problem("limits.attachment_mib", f"must be at most {MAX_ATTACHMENT_MIB} (MiB), got {attachment_mib:g}")
    return {
        "agents_in_memory": in_memory,
        "context_messages": ctx_messages,
        "context_chars": ctx_chars,
        "attachment_bytes": int(attachment_mib * 1024 * 1024),
        "tool_calls_per_turn": tool_calls,
        "history_messages": history_messages,
        "schedules_per_conversation": schedules,
        "handoffs": handoffs,
    }


def _encryption(c: _Checker, data: dict) -> bool:
    """`encryption: on | off` (YAML reads on/off as true/false): end-to-end encrypted rooms."""
    return _on_off(c, data.get("encryption", True), "encryption", True)


def _database(c: _Checker, data: dict) -> str:
    """`database:` — sqlite (the default), :memory: or a PostgreSQL URL."""
    database = data.get("database", "sqlite")
    if not isinstance(database, str) or not (
        database in ("sqlite", ":memory:") or re.match(r"^postgres(ql)?://", database)
    ):
        c.problem("database", f'must be "sqlite" or a postgresql://user:password@host/db URL, got {database!r}')
        database = "sqlite"
    return database


def _agents(c: _Checker, data: dict, path: Path) -> dict[str, AgentConfig]:
    """`agents:` — a mapping of agent name to its settings; the agents without a problem."""
    raw = data.get("agents")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        c.problem("agents", "must be a mapping of agent name to its settings")
        return {}
    agents: dict[str, AgentConfig] = {}
    for name, spec in raw.items():
        agent = _agent(c, name, spec, path)
        if agent is not None:
            agents[name] = agent
    return agents


def _agent(c: _Checker, name: Any, spec: Any, path: Path) -> AgentConfig | None:
    """One agent's settings, each key group in turn; None if it cannot be used."""
    key = f"agents.{name}"
    if not isinstance(name, str) or not AGENT_NAME.match(name):
        c.problem(key, "the name must be lowercase letters, digits, - or _, starting with a letter or digit")
        return None
    if not isinstance(spec, dict):
        c.problem(key, "must be a mapping with at least `command`")
        return None
    suggested = c.known(spec, "agents.*", key)
    command = _agent_command(c, spec, key, suggested)
    title = spec.get("title", name)
    if not isinstance(title, str) or not title.strip():
        c.problem(f"{key}.title", "must be a non-empty string")
    cwd = _agent_cwd(c, spec, key, path)
    env = _agent_env(c, spec, key)
    timeout = c.number(spec, "timeout", f"{key}.timeout", 300.0, 1.0)
    tools = _agent_tools(c, spec, key)
    roots = _roots(c, spec.get("roots"), f"{key}.roots", path, cwd)
    worktrees = _agent_worktrees(c, spec, key, cwd)
    budget = _budget(c, spec.get("budget"), f"{key}.budget")
    sandbox = _sandbox(c, spec.get("sandbox", True), f"{key}.sandbox", path)
    avatar = _agent_avatar(c, spec, key, path)
    if command is None or not isinstance(title, str):
        return None
    return AgentConfig(
        name=name,
        title=title.strip(),
        command=tuple(command),
        cwd=cwd,
        env=env,
        timeout=timeout,
        tools=tools,
        roots=roots,
        worktrees=worktrees,
        budget=budget,
        sandbox=sandbox,
        avatar=avatar,
    )


def _agent_avatar(c: _Checker, spec: dict, key: str, path: Path) -> str | None:
    """`avatar:` — an http(s) URL, or a picture file (relative to the config file) that exists."""
    avatar = spec.get("avatar")
    if avatar is None:
        return None
    if not isinstance(avatar, str) or not avatar.strip():
        c.problem(f"{key}.avatar", "must be an http(s) URL or the path of a picture file")
        return None
    if avatar.startswith(("http://", "https://")):
        return avatar
    file = (path.parent / os.path.expanduser(avatar)).resolve()
    if not file.is_file():
        c.problem(f"{key}.avatar", f"no such file: {file}")
        return None
    return str(file)


def _agent_command(c: _Checker, spec: dict, key: str, suggested: set[str]) -> list[str] | None:
    """`command:` — a list of strings or one command line (a misspelt key is named once)."""
    command, why = split_command(spec.get("command"))
    if command is None and not ("command" not in spec and "command" in suggested):
        c.problem(f"{key}.command", why)
    return command


def _agent_cwd(c: _Checker, spec: dict, key: str, path: Path) -> str | None:
    """`cwd:` — an existing folder, relative to the config file; written but empty (YAML reads a
    bare `~` as empty: null) is refused, not taken for "no cwd"."""
    if "cwd" in spec and spec["cwd"] is None or spec.get("cwd") == "":
        c.problem(
            f"{key}.cwd",
            'is empty (a bare ~ is empty in YAML: write cwd: "~" for the home folder, or leave cwd out '
            "for a folder of the agent's own)",
        )
        return None
    cwd = spec.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str) or not cwd.strip():
            c.problem(f"{key}.cwd", "must be a folder path")
            cwd = None
        else:
            cwd = str((path.resolve().parent / os.path.expanduser(cwd)).resolve())
            if not os.path.isdir(cwd):
                c.problem(f"{key}.cwd", f"folder does not exist: {cwd}")
    return cwd


def _agent_env(c: _Checker, spec: dict, key: str) -> dict[str, str]:
    """`env:` — a mapping of NAME: value, each value as a string."""
    env = spec.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) for k in env):
        c.problem(f"{key}.env", "must be a mapping of NAME: value")
        env = {}
    return {k: str(v) for k, v in env.items()}


def _agent_tools(c: _Checker, spec: dict, key: str) -> bool:
    """`tools: on | off` (YAML reads on/off as true/false)."""
    return _on_off(c, spec.get("tools", True), f"{key}.tools", True)


def _agent_worktrees(c: _Checker, spec: dict, key: str, cwd: str | None) -> bool:
    """`worktrees: on | off` — on needs a `cwd` inside a git checkout."""
    worktrees = _on_off(c, spec.get("worktrees", False), f"{key}.worktrees", False)
    if worktrees and "cwd" not in spec:
        c.problem(f"{key}.worktrees", "on needs a cwd: the git checkout whose worktrees the threads get")
    elif worktrees and cwd is not None and os.path.isdir(cwd) and git_checkout(cwd) is None:
        c.problem(f"{key}.worktrees", f"on needs a cwd inside a git checkout; {cwd} is not in one")
    return worktrees


def _budget(c: _Checker, value: Any, key: str) -> Budget | None:
    """`budget: {cost: 5.00, per: day | month}` (absent: no budget)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        c.problem(key, f"must be a mapping like {{cost: 5.00, per: day}}, got {shown(value)}")
        return None
    problems = [f"unknown key {k!r} (known here: cost, per)" for k in value if k not in ("cost", "per")]
    cost, per = value.get("cost"), value.get("per", "day")
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
        problems.append(f"cost must be a number of 0 or more, got {shown(cost)}")
    if per not in ("day", "month"):
        problems.append(f"per must be day or month, got {shown(per)}")
    for problem in problems:
        c.problem(key, problem)
    return None if problems else Budget(float(cost), per)


def _on_off(c: _Checker, value: Any, key: str, default: bool) -> bool:
    """`on | off` (YAML reads them as true / false; a quoted "on" is taken too)."""
    if isinstance(value, str) and value.strip().lower() in ("on", "off"):
        value = value.strip().lower() == "on"
    if not isinstance(value, bool):
        c.problem(key, f"must be on or off, got {shown(value)}")
        return default
    return value


def _voice(c: _Checker, data: dict) -> VoiceConfig:
    """`voice: on | off` (unset: on where the engine is installed), `voice_language` (a
    language code for the speech model and the spoken answers), `voice_max_seconds` (a longer
    voice note is transcribed up to there): docs/voice.md."""
    enabled = None if data.get("voice") is None else _on_off(c, data["voice"], "voice", True)
    language = (
        c.string(data, "voice_language", "voice_language", "en", VOICE_LANGUAGE, 'a language code like "en" or "de"')
        or "en"
    )
    max_seconds = c.integer(data, "voice_max_seconds", "voice_max_seconds", 300, 1, 4 * 3600)
    return VoiceConfig(enabled=enabled, language=language.lower(), max_seconds=max_seconds)


def _registry(c: _Checker, data: dict, base: Path) -> str | None:
    """`registry:` — the ACP agent registry `agents add` reads: an http(s) URL or a file
    (relative to the config file); None: the published one (config/agent_registry.py)."""
    value = data.get("registry")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        c.problem("registry", "must be the registry's URL or a file path")
        return None
    value = value.strip()
    if value.startswith(("http://", "https://")):
        return value
    return str((base / os.path.expanduser(value)).resolve())


def _sandbox(c: _Checker, value: Any, key: str, path: Path) -> SandboxConfig:
    """`sandbox:` — on (the default), off, or {write: [paths], read: [paths], network: on|off}
    (on, with these paths and that network). Paths: `~` expanded, relative to the config file."""
    if isinstance(value, str) and value.strip().lower() in ("on", "off"):
        value = value.strip().lower() == "on"
    if isinstance(value, bool):
        return SandboxConfig(on=value)
    if not isinstance(value, dict):
        c.problem(key, f"must be on, off or a mapping like {{write: [~/.claude], network: on}}, got {shown(value)}")
        return SandboxConfig()
    c.known(value, "agents.*.sandbox", key)
    found: dict[str, tuple[str, ...]] = {}
    for part in ("write", "read"):
        items = value.get(part) or []
        items = [items] if isinstance(items, str) else items
        if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
            c.problem(f"{key}.{part}", "must be a list of paths, like [~/.claude, ~/models]")
            items = []
        paths = [str((path.resolve().parent / os.path.expanduser(i.strip())).resolve()) for i in items]
        if part == "write" and "/" in paths:
            c.problem(f"{key}.write", "must not be / (that is the whole system: use sandbox: off)")
            paths = [p for p in paths if p != "/"]
        found[part] = tuple(dict.fromkeys(paths))
    network, ports = _network(c, value.get("network", True), f"{key}.network")
    return SandboxConfig(on=True, write=found["write"], read=found["read"], network=network, host_ports=ports)


def _network(c: _Checker, value: Any, key: str) -> tuple[bool, tuple[int, ...]]:
    """`network:` — on (the default), off, or {host_ports: [N, …], internet: on|off}: these ports
    of the host's 127.0.0.1 seen as the sandbox's own, and the internet unless `internet: off`
    (docs/sandbox.md "The network")."""
    if not isinstance(value, dict):
        return _on_off(c, value, key, True), ()
    c.known(value, "agents.*.sandbox.network", key)
    internet = _on_off(c, value.get("internet", True), f"{key}.internet", True)
    ports = value.get("host_ports") or []
    ports = [ports] if isinstance(ports, int) and not isinstance(ports, bool) else ports
    if not isinstance(ports, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports
    ):
        c.problem(f"{key}.host_ports", "must be a list of port numbers, like [8080]")
        return internet, ()
    return internet, tuple(dict.fromkeys(ports))


def _host_ports(c: _Checker, fields: dict[str, Any]) -> None:
    """No agent reaches the homeserver's, the appservice's or PostgreSQL's port, even named."""
    url = urlsplit(fields["homeserver_url"])
    try:
        url_port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        url_port = None
    ports = {fields["homeserver_port"]: "the homeserver's", fields["listen_port"]: "the appservice's"}
    if url_port is not None:
        ports.setdefault(url_port, "the homeserver's")
    if fields["database"].startswith("postgres"):
        try:
            ports.setdefault(urlsplit(fields["database"]).port or 5432, "the store's (PostgreSQL)")
        except ValueError:
            pass
    for name, agent in fields["agents"].items():
        for port in agent.sandbox.host_ports:
            if port in ports:
                c.problem(
                    f"agents.{name}.sandbox.network.host_ports",
                    f"{port} is {ports[port]} port: no agent may reach it — remove it",
                )


def _roots(c: _Checker, value: Any, key: str, path: Path, cwd: str | None) -> tuple[str, ...]:
    """`roots:` — the folders `!cwd` may choose from (a list, or one folder), each relative to
    the config file like `cwd` and existing; by default the agent's `cwd` alone (none: none)."""
    if value is None:
        return (cwd,) if cwd else ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
        c.problem(key, "must be a list of folders, like [~/code, ~/notes]")
        return ()
    found: list[str] = []
    for item in items:
        folder = str((path.resolve().parent / os.path.expanduser(item)).resolve())
        if not os.path.isdir(folder):
            c.problem(key, f"folder does not exist: {folder}")
        elif folder not in found:
            found.append(folder)
    return tuple(found)


def git_checkout(folder: str) -> str | None:
    """The top of the git checkout `folder` lies in (the first folder up with a `.git`, a folder
    or, in a worktree, a file), or None. Read from the file system: no git runs at load."""
    here = Path(folder).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return None
