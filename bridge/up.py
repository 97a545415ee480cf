"""`sidekicks up`: the whole local stack in one command (SPEC §4, §12).

Writes a default config on first use, starts an embedded Synapse in the data folder, creates the
owner account once (password printed once, kept 0600), starts the bridge with the local-model
agent, and says how to log in. Ctrl-C stops everything.
"""
from __future__ import annotations

import asyncio
import getpass
import re
import secrets
import sys
from pathlib import Path

import config as configuration
from config import registration as registrations
from config.paths import write_private

from .homeserver import Homeserver, HomeserverError

DEFAULT_CONFIG = """\
# Sidekicks for Matrix — written by `sidekicks up`. Edit freely; see the README for every key.
owner: "@{user}:localhost"
homeserver:
  embedded: true            # `sidekicks up` runs a local Synapse; use `url:` for your own
  port: 8008
  domain: localhost
appservice:
  listen: 127.0.0.1:29333
  puppet_prefix: sk_
  bot: sidekicks
  registration: registration.yaml
agents:
  local:
    title: Local (SmolLM2-135M, offline)
    command: [{python}, -m, acp.agents.local_model]
limits:
  agents_in_memory: 2
  context_messages: 20
  context_chars: 1500
database: sqlite
"""


def default_owner() -> str:
    name = re.sub(r"[^a-z0-9._=\-]", "", getpass.getuser().lower()) or "me"
    return name


def write_default_config(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEFAULT_CONFIG.format(user=default_owner(), python=sys.executable))


async def up(path: Path, args, stop: asyncio.Event, say) -> int:
    from .cli import UserError, run_bridge

    if not path.exists():
        write_default_config(path)
        say(f"• wrote a default configuration to {path}")
    cfg = configuration.load(path, label=str(path))
    if not cfg.homeserver_embedded:
        raise UserError(f"{path} points at the homeserver {cfg.homeserver_url}: use `sidekicks run`, "
                        "or set homeserver.embedded: true")
    registrations.ensure(cfg)
    server = Homeserver(cfg.data_dir / "homeserver", server_name=cfg.domain, port=cfg.homeserver_port,
                        appservice_files=[cfg.registration_path])
    if server.running_elsewhere():
        raise UserError(f"a homeserver already runs from {server.folder}: is `sidekicks up` already running "
                        "for this configuration?")
    say(f"• starting the homeserver ({cfg.domain}) at {server.url} …")
    try:
        await server.start(progress=lambda text: say(f"  {text}"))
    except HomeserverError as exc:
        raise UserError(str(exc)) from None
    try:
        await ensure_owner(cfg, server, say)

        def ready() -> None:
            agent = next(iter(cfg.agents), "agent")
            say("")
            say("Sidekicks is running. Log in with Element (desktop or web):")
            say(f"  homeserver:  {server.url}")
            say(f"  user:        {cfg.owners[0]}")
            say(f"  password:    in {password_file(cfg)}")
            say(f"  then start a direct message with @{cfg.puppet_prefix}{agent}:{cfg.domain}")
            say("Ctrl-C stops everything.")

        await run_bridge(cfg, stop, on_ready=ready)
    finally:
        say("• stopping the homeserver …")
        await server.stop()
    return 0


def password_file(cfg) -> Path:
    return cfg.data_dir / "owner-password"


async def ensure_owner(cfg, server: Homeserver, say) -> None:
    """Create the owner account once; its password is printed this once and kept 0600."""
    path = password_file(cfg)
    if path.exists():
        return
    owner = cfg.owners[0]
    localpart = owner[1:].split(":", 1)[0]
    password = secrets.token_urlsafe(12)
    await server.register_user(localpart, password, admin=True)
    write_private(path, password + "\n")
    say(f"• created your account {owner}")
    say(f"  password: {password}   (shown once; kept in {path}, readable only by you)")
