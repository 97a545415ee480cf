"""The ACP agent registry, read (docs/configuration.md "Agents from the registry"): pure.

The registry is one JSON file, `{"version": …, "agents": [entry, …]}`; an entry has `id`, `name`,
`version`, `description` and a `distribution` of one or more kinds: `npx` and `uvx` (`package`,
`args`, `env`) and `binary` (per platform `linux-x86_64` …: `archive`, `cmd`, `args`, `env`); it
may have an `icon` URL (the published registry's are small one-colour SVG files).

What is decided here, from values: the entries, which ones a search finds, which distribution
this machine uses, the pinned command it becomes, and the config entry written for it — with the
sandbox `write:` folders each known agent keeps its state in (checked against each agent's docs).
Fetching, unpacking and writing the config are elsewhere (bridge/agents_registry.py,
config/config_edit.py).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

REGISTRY_URL = "https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json"
KINDS = ("npx", "uvx", "binary")  # the order a distribution is preferred in, its tool at hand
ID = re.compile(r"^[a-z][a-z0-9-]*$")
SHOWN_CHARS = 200  # a description, cut

# The config name an agent gets, where it is not its id.
NAMES = {
    "claude-code-acp": "claude",
    "claude-acp": "claude",
    "claude-agent-acp": "claude",
    "codex-acp": "codex",
    "codex": "codex",
    "gemini": "gemini",
    "opencode": "opencode",
    "goose": "goose",
}

# Where each known agent keeps its state (its sandbox's `write:`), by registry id:
# Claude Code: ~/.claude (settings, sessions, credentials) and ~/.claude.json (its global state);
# Codex: CODEX_HOME, ~/.codex by default; Gemini CLI: ~/.gemini; OpenCode: its XDG data, state,
# config and cache folders; goose: ~/.config/goose (config.yaml, secrets), its XDG data (sessions)
# and state (logs) folders; Qwen Code: ~/.qwen (settings, installation id, skills, sessions: it
# exits at start when it cannot write there).
_CLAUDE = ("~/.claude", "~/.claude.json")
_GOOSE = ("~/.config/goose", "~/.local/share/goose", "~/.local/state/goose")
WRITES: dict[str, tuple[str, ...]] = {
    "claude-code-acp": _CLAUDE,
    "claude-acp": _CLAUDE,
    "claude-agent-acp": _CLAUDE,
    "codex-acp": ("~/.codex",),
    "codex": ("~/.codex",),
    "gemini": ("~/.gemini",),
    "opencode": ("~/.local/share/opencode", "~/.local/state/opencode", "~/.config/opencode", "~/.cache/opencode"),
    "goose": _GOOSE,
    "qwen-code": ("~/.qwen",),
}
# What the launcher itself writes: npx its package cache, uvx its cache and tools.
KIND_WRITES = {"npx": ("~/.npm",), "uvx": ("~/.cache/uv", "~/.local/share/uv"), "binary": ()}


class RegistryError(ValueError):
    """The registry or an entry cannot be used: the message is one line for the owner."""


@dataclass(frozen=True)
class Entry:
    id: str
    name: str
    version: str
    description: str
    distribution: dict[str, Any] = field(default_factory=dict)
    icon: str = ""  # its `icon` URL, "" when it has none

    def kinds(self) -> list[str]:
        return [kind for kind in KINDS if isinstance(self.distribution.get(kind), dict)]


def parse_registry(data: Any) -> list[Entry]:
    """The usable agent entries of a parsed registry.json, in its order; entries that break the
    format are left out (one bad entry does not hide the others)."""
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list):
        raise RegistryError('not an ACP agent registry (no "agents" list)')
    entries = []
    for raw in data["agents"]:
        entry = _entry(raw)
        if entry is not None:
            entries.append(entry)
    return entries


def _entry(raw: Any) -> Entry | None:
    if not isinstance(raw, dict):
        return None
    texts = [raw.get(key) for key in ("id", "name", "version", "description")]
    if not all(isinstance(text, str) and text.strip() for text in texts):
        return None
    distribution = raw.get("distribution")
    if not isinstance(distribution, dict) or not ID.match(raw["id"]):
        return None
    icon = raw.get("icon")
    icon = icon if isinstance(icon, str) and icon.startswith(("http://", "https://")) else ""
    entry = Entry(
        raw["id"], raw["name"].strip(), raw["version"].strip(), raw["description"].strip(), distribution, icon
    )
    return entry if entry.kinds() else None


def search(entries: list[Entry], text: str = "") -> list[Entry]:
    """The entries whose id, name or description hold every word of `text` (case ignored)."""
    words = text.lower().split()
    return [e for e in entries if all(w in f"{e.id} {e.name} {e.description}".lower() for w in words)]


def find(entries: list[Entry], agent_id: str) -> Entry:
    for entry in entries:
        if entry.id == agent_id.strip().lower():
            return entry
    close = [e.id for e in search(entries, agent_id)][:5]
    hint = f" (did you mean {', '.join(close)}?)" if close else " (`sidekicks agents search` lists them)"
    raise RegistryError(f"no agent {agent_id!r} in the registry{hint}")


def search_lines(entries: list[Entry], platform: str | None) -> list[str]:
    """One line per entry for `agents search`: id, name, version, what it runs with; then its
    description, indented."""
    lines = []
    for e in entries:
        kinds = [k for k in e.kinds() if k != "binary" or platform in e.distribution["binary"]]
        runs = ", ".join(kinds) or "nothing for this machine"
        lines.append(f"{e.id}: {e.name} {e.version} ({runs})")
        lines.append(f"    {_cut(e.description)}")
    return lines


def platform_key(system: str, machine: str) -> str | None:
    """The registry's name of this platform (`platform.system()`, `platform.machine()`)."""
    os_name = {"linux": "linux", "darwin": "darwin", "windows": "windows"}.get(system.lower())
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine.lower())
    return f"{os_name}-{arch}" if os_name and arch else None


def choose(entry: Entry, platform: str | None, tools: set[str]) -> tuple[str, dict[str, Any]]:
    """The distribution this machine runs: `npx` or `uvx` where that tool is installed, else the
    `binary` for this platform. Raises RegistryError saying what is missing."""
    for kind in entry.kinds():
        if kind == "binary":
            target = entry.distribution["binary"].get(platform or "")
            if (
                isinstance(target, dict)
                and isinstance(target.get("archive"), str)
                and isinstance(target.get("cmd"), str)
            ):
                return kind, target
        elif kind in tools and isinstance(entry.distribution[kind].get("package"), str):
            return kind, entry.distribution[kind]
    needs = [k for k in entry.kinds() if k != "binary"]
    if "binary" in entry.kinds():
        needs.append(f"a binary for {platform or 'this platform'}")
    raise RegistryError(f"{entry.id} needs {' or '.join(needs)}, which this machine does not have")


def pinned_npm(package: str, version: str) -> str:
    """`@scope/name@1.2.3`: the version the registry names, unless the package names one."""
    return package if package.rfind("@") > 0 else f"{package}@{version}"


def pinned_pypi(package: str, version: str) -> str:
    return package if re.search(r"[=<>~!@]", package) else f"{package}=={version}"


def package_command(kind: str, spec: dict[str, Any], version: str) -> list[str]:
    args = _strings(spec.get("args"))
    if kind == "npx":
        return ["npx", "-y", pinned_npm(spec["package"], version), *args]
    return ["uvx", pinned_pypi(spec["package"], version), *args]


def binary_command(target: dict[str, Any], folder: str) -> list[str]:
    """The unpacked binary's command: `cmd` inside `folder` (never outside it), then `args`."""
    cmd = posixpath.normpath(target["cmd"].replace("\\", "/"))
    if cmd.startswith(("/", "../")) or cmd == "..":
        raise RegistryError(f"the registry's cmd {target['cmd']!r} is not inside its archive")
    return [posixpath.join(folder, cmd), *_strings(target.get("args"))]


def config_name(entry: Entry) -> str:
    return NAMES.get(entry.id, entry.id)


def agent_settings(entry: Entry, kind: str, command: list[str], env: Any, cwd: str) -> dict[str, Any]:
    """The agent's settings as written into the config, in this order: title, avatar (its icon),
    command, cwd, env (the registry's), sandbox write: (the launcher's cache, then the agent's
    state)."""
    settings: dict[str, Any] = {"title": entry.name}
    if entry.icon:
        settings["avatar"] = entry.icon
    settings.update(command=command, cwd=cwd)
    environment = {k: str(v) for k, v in env.items() if isinstance(k, str)} if isinstance(env, dict) else {}
    if environment:
        settings["env"] = environment
    write = [*KIND_WRITES.get(kind, ()), *WRITES.get(entry.id, ())]
    if write:
        settings["sandbox"] = {"write": write}
    return settings


def age_text(seconds: float) -> str:
    """How old the cached registry is, in words."""
    if seconds < 60:
        return "just now"
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''} ago"
    return "just now"  # pragma: no cover - every age of a minute or more matched above


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
