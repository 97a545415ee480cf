"""How each configured agent is started: its AgentSpec, with the sandbox its config gives it
(docs/sandbox.md). Shared by the bridge (bridge.py), `sidekicks check` and the start check
(local/check.py, local/start_check.py).

The sandbox of an agent: writable its `cwd`, its `roots`, with `worktrees: on` its checkout and
the folder beside it where the threads' worktrees are made (`<checkout>.worktrees`: they are made
while the agent runs, so the folder is bound, made first if need be), and its `write:` paths;
read-only its `read:` paths; hidden the bridge's own paths and the owner's credential stores;
read-only where it writes around them the bridge's installation, programs, systemd units and
shell start-up files (config/walls.py, docs/sandbox.md "Nothing writable holds the bridge"). The
MCP socket is added once it listens (`reach_socket`).

An agent without `cwd` works in a folder of its own, `<data folder>/agents/<name>` (made at its
start), never in the folder the bridge was started in.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

from acp import AgentSpec
from acp.remote import destination, is_remote
from acp.sandbox import Sandbox
from config import Config, user_config_root, walls
from config.loader import writable_paths
from config.model import AgentConfig

log = logging.getLogger(__name__)


def own_folder(cfg: Config, name: str) -> str:
    """The working directory of an agent without `cwd`: a folder of its own in the data folder."""
    return str(cfg.data_dir / "agents" / name)


def working_dir(cfg: Config, name: str) -> str:
    """Where the agent works: its `cwd`, else its own folder."""
    return cfg.agents[name].cwd or own_folder(cfg, name)


def sandbox_of(cfg: Config, agent: AgentConfig) -> Sandbox | None:
    """The sandbox `agent` runs in; None with `sandbox: off` or over ssh."""
    if not agent.sandbox.on or is_remote(agent.command):
        return None
    write = [*([] if agent.cwd else [own_folder(cfg, agent.name)])]
    write += [p for paths in writable_paths(agent).values() for p in paths]
    hide, read = [str(cfg.path.parent)], list(agent.sandbox.read)
    for path, (how, _) in _bridge_paths(cfg).items():
        if how == walls.HIDDEN:
            hide.append(path)
        elif _around(path, write):  # read-only (and pinned) only where it writes around them
            read.append(path)
    named = [*write, *agent.sandbox.read]
    hide += walls.credentials(os.path.expanduser("~"), named)
    return Sandbox(
        write=tuple(dict.fromkeys(write)),
        read=tuple(dict.fromkeys(read)),
        hide=tuple(dict.fromkeys(hide)),
        network=agent.sandbox.network,
        host_ports=agent.sandbox.host_ports,
    )


def _bridge_paths(cfg: Config) -> dict[str, tuple[str, str]]:
    return walls.of_config(cfg.path, cfg.data_dir, cfg.registration_path, cfg.homeserver_config)


def _around(path: str, folders: list[str]) -> bool:
    """`path` lies below one of `folders` (links resolved)."""
    real = os.path.realpath(path)
    return any(real != f and walls.under(real, os.path.realpath(f)) for f in folders)


def make_room(cfg: Config, name: str) -> None:
    """Before the agent starts: its own folder when it has no `cwd`, and each guarded folder
    (config/walls.py `guarded`) missing inside a folder it writes, so that it is hidden or
    read-only there rather than the agent's to make. Best effort: a folder that cannot be
    made is said by the agent's start."""
    agent = cfg.agents[name]
    wanted = [] if agent.cwd else [own_folder(cfg, name)]
    box = sandbox_of(cfg, agent)
    if box is not None:
        home = os.path.expanduser("~")
        for folder in walls.guarded(home, str(user_config_root()), walls.program_folders()):
            if not os.path.lexists(folder) and _around(folder, list(box.write)):
                wanted.append(folder)
    for folder in wanted:
        try:
            _make_private(Path(folder))
        except OSError as exc:
            log.warning("agent %s: cannot make the folder %s: %s", name, folder, exc.strerror or exc)


def _make_private(folder: Path) -> None:
    """mkdir -p with each missing level 0700 (the data folder among them: it holds secrets)."""
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for level in reversed(missing):
        level.mkdir(mode=0o700, exist_ok=True)


def spec_of(cfg: Config, name: str) -> AgentSpec:
    """How to start the configured agent `name` (its folders made: `make_room`)."""
    agent = cfg.agents[name]
    make_room(cfg, name)
    return AgentSpec(
        name=name,
        command=list(agent.command),
        cwd=working_dir(cfg, name),
        env=dict(agent.env),
        title=agent.title,
        timeout=agent.timeout,
        sandbox=sandbox_of(cfg, agent),
    )


def specs(cfg: Config) -> dict[str, AgentSpec]:
    """Every agent's spec; an agent without a sandbox is said in the log."""
    for name, agent in cfg.agents.items():
        line = unsandboxed(cfg, name)
        if line:
            log.log(logging.INFO if is_remote(agent.command) else logging.WARNING, "agent %s %s", name, line)
    return {name: spec_of(cfg, name) for name in cfg.agents}


def reach_socket(found: dict[str, AgentSpec], path: str | os.PathLike | None, http_url: str | None = None) -> None:
    """The MCP server listens at `path` (and over HTTP at `http_url`): each sandboxed agent
    started from now on reaches it (the HTTP port forwarded into its own network namespace:
    docs/sandbox.md "The network")."""
    if path is None:
        return
    port = urlsplit(http_url).port if http_url else None
    for spec in found.values():
        if spec.sandbox is not None:
            spec.sandbox = spec.sandbox.reaching(os.fspath(path))
            if port is not None:
                spec.sandbox = spec.sandbox.forwarding(port)


def unsandboxed(cfg: Config, name: str) -> str | None:
    """Why the agent runs without the bridge's sandbox (for the log and the owner), or None."""
    agent = cfg.agents[name]
    if is_remote(agent.command):
        return "runs over ssh: the bridge does not sandbox it (the other machine decides what it reaches)"
    if not agent.sandbox.on:
        return (
            f"runs without a sandbox (agents.{name}.sandbox: off): it reaches what the bridge "
            "reaches — its config, data and registration included"
        )
    return None


def sandbox_line(cfg: Config, name: str) -> str:
    """What `sidekicks check` says of the agent's sandbox."""
    agent = cfg.agents[name]
    if is_remote(agent.command):
        host = destination(agent.command)
        return f"remote over ssh to {host} (not sandboxed by the bridge; files it names are not read here)"
    if not agent.sandbox.on:
        return f"off (agents.{name}.sandbox: off): it reaches what the bridge reaches"
    box = sandbox_of(cfg, agent)
    assert box is not None
    parts = ["on", "writes " + ", ".join(box.write)]
    if agent.sandbox.read:
        parts.append("reads " + ", ".join(agent.sandbox.read))
    parts.append("network " + ("on" if box.network else "off"))
    if box.host_ports:
        parts.append("reaches the host's ports " + ", ".join(map(str, box.host_ports)))
    return "; ".join(parts)


def home_warning(cfg: Config, name: str) -> str | None:
    """What `sidekicks check` says of a sandboxed agent that writes the home folder (or a
    folder above it), or None."""
    box = sandbox_of(cfg, cfg.agents[name])
    home = os.path.realpath(os.path.expanduser("~"))
    found = [p for p in box.write if walls.under(home, os.path.realpath(p))] if box else []
    if not found:
        return None
    return (
        f"agent {name} writes your home folder ({found[0]}): the bridge's files and your credential stores "
        "are kept from it, but it can change what your other programs read there (~/.local/bin, "
        "~/.gitconfig, start-up files you do not have yet …); give it a folder of its own "
        f"(agents.{name}.cwd) unless you trust it with your account (docs/sandbox.md)"
    )
