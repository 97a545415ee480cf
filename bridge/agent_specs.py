"""How each configured agent is started: its AgentSpec, with the sandbox its config gives it
(docs/sandbox.md). Shared by the bridge (bridge.py), `sidekicks check` and the start check
(local/check.py, local/start_check.py).

The sandbox of an agent: writable its `cwd`, its `roots`, with `worktrees: on` its checkout and
the folder beside it where the threads' worktrees are made (`<checkout>.worktrees`: they are made
while the agent runs, so the folder is bound, made first if need be), and its `write:` paths;
read-only its `read:` paths; hidden the config folder and file, the data folder, the
registration and the homeserver's own config. The MCP socket is added once it listens
(`reach_socket`).
"""

from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

from acp import AgentSpec
from acp.remote import destination, is_remote
from acp.sandbox import Sandbox
from config import Config
from config.loader import git_checkout
from config.model import AgentConfig

log = logging.getLogger(__name__)


def sandbox_of(cfg: Config, agent: AgentConfig) -> Sandbox | None:
    """The sandbox `agent` runs in; None with `sandbox: off` or over ssh."""
    if not agent.sandbox.on or is_remote(agent.command):
        return None
    write = [*([agent.cwd] if agent.cwd else []), *agent.roots]
    if agent.worktrees and agent.cwd:
        top = git_checkout(agent.cwd)
        if top is not None:
            write += [top, top + ".worktrees"]  # bridge/coding/worktree_names.py: worktree_path
    write += agent.sandbox.write
    hide = [str(cfg.path.parent), str(cfg.path), str(cfg.data_dir), str(cfg.registration_path)]
    if cfg.homeserver_config is not None:
        hide.append(str(cfg.homeserver_config))
    return Sandbox(
        write=tuple(dict.fromkeys(write)),
        read=agent.sandbox.read,
        hide=tuple(hide),
        network=agent.sandbox.network,
        host_ports=agent.sandbox.host_ports,
    )


def spec_of(cfg: Config, name: str) -> AgentSpec:
    """How to start the configured agent `name`."""
    agent = cfg.agents[name]
    return AgentSpec(
        name=name,
        command=list(agent.command),
        cwd=agent.cwd,
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
    parts = ["on", "writes " + ", ".join(box.write) if box.write else "writes its working directory"]
    if box.read:
        parts.append("reads " + ", ".join(box.read))
    parts.append("network " + ("on" if box.network else "off"))
    if box.host_ports:
        parts.append("reaches the host's ports " + ", ".join(map(str, box.host_ports)))
    return "; ".join(parts)
