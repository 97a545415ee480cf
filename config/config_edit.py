"""The config file changed by `sidekicks agents add | remove` and the bot's `!agents`
(docs/configuration.md "Agents from the registry").

A round trip through ruamel.yaml: the file's comments, key order and quoting stay as they were;
only the one agent's entry is added or removed. The new text is validated as the bridge would
load it before it replaces the file (atomically, with the file's mode kept), so an edit never
leaves a config the bridge refuses.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from .loader import AGENT_NAME, ConfigError, parse
from .paths import write_private


def _yaml() -> YAML:
    yaml = YAML()  # round trip
    yaml.preserve_quotes = True
    yaml.width = 4096  # a long command stays on one line
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _read(path: Path) -> tuple[YAML, Any, str]:
    yaml = _yaml()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found (`sidekicks up` writes one)"]) from None
    try:
        data = yaml.load(text)
    except YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML ({getattr(exc, 'problem', exc)})"]) from None
    if not isinstance(data, CommentedMap):
        raise ConfigError([f"{path}: must be a YAML mapping of keys (owner, homeserver, agents, ...)"])
    return yaml, data, text


def add_agent(path: Path, name: str, settings: dict[str, Any]) -> None:
    """Add `agents.NAME` with `settings` at the end of `agents:`; refused if NAME is taken."""
    if not AGENT_NAME.match(name):
        raise ConfigError([f"agents.{name}: the name must be lowercase letters, digits, - or _"])
    yaml, data, _ = _read(path)
    agents = data.get("agents")
    if agents is None:
        agents = data["agents"] = CommentedMap()
    if not isinstance(agents, CommentedMap):
        raise ConfigError([f"{path}: agents: must be a mapping of agent name to its settings"])
    if name in agents:
        raise ConfigError([f"{path}: an agent named {name!r} is already configured (`sidekicks agents remove {name}`)"])
    agents[name] = _node(settings)
    _write(path, yaml, data)


def remove_agent(path: Path, name: str) -> None:
    yaml, data, _ = _read(path)
    agents = data.get("agents")
    if not isinstance(agents, CommentedMap) or name not in agents:
        known = ", ".join(agents) if isinstance(agents, CommentedMap) and agents else "none"
        raise ConfigError([f"{path}: no agent named {name!r} (configured: {known})"])
    del agents[name]
    _write(path, yaml, data)


def _node(value: Any, depth: int = 0) -> Any:
    """Settings as ruamel nodes: a list of plain strings in flow style (`[npx, -y, pkg]`), the
    rest in block style."""
    if isinstance(value, dict):
        node = CommentedMap()
        for key, item in value.items():
            node[key] = _node(item, depth + 1)
        return node
    if isinstance(value, list | tuple):
        seq = CommentedSeq([_node(item, depth + 1) for item in value])
        seq.fa.set_flow_style()
        return seq
    return value


def _write(path: Path, yaml: YAML, data: Any) -> None:
    out = io.StringIO()
    yaml.dump(data, out)
    text = out.getvalue()
    import yaml as pyyaml  # the loader's own reading of the new text

    try:
        parse(pyyaml.safe_load(text), path, str(path))
    except ConfigError as exc:
        raise ConfigError([f"{path}: not changed: {line}" for line in exc.problems]) from None
    write_private(path, text, path.stat().st_mode & 0o777)  # atomically, the file's own mode kept
