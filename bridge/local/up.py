"""`sidekicks up`: the whole local stack in one command (docs/architecture.md "The command line";
docs/configuration.md "The shipped local agent").

Writes a default config on first use, starts an embedded Synapse in the data folder, creates the
owner account once (password printed once, kept 0600), starts the bridge with the local-model
agent, and says how to log in. Ctrl-C stops everything.

Several people on one machine (docs/architecture.md "Beyond one machine"): when a Matrix server
already answers on the configured port and it is not this config's own homeserver, `up` joins it
instead of starting another: a config written then gets its own puppet prefix, bot, appservice id
and listen port (`sk-<user>_`, `sidekicks_<user>`); if the homeserver has loaded this bridge's
registration, the bridge runs against it; if not, `up` says exactly what the person running it has
to do (Synapse reads app_service_config_files only when it starts, and its folder belongs to that
person).
"""

from __future__ import annotations

import asyncio
import getpass
import re
import secrets
import socket
import sys
from pathlib import Path

import aiohttp

import config as configuration
from config import registration as registrations
from config.paths import write_private

from ..voice.engine import up_hint
from .homeserver import Homeserver, HomeserverError

DEFAULT_CONFIG = """\
# Sidekicks for Matrix — written by `sidekicks up`. Edit freely; see docs/configuration.md for every key.
owner: "@{user}:localhost"
homeserver:
  embedded: true            # `sidekicks up` runs a local Synapse; use `url:` for your own
  port: 8008
  domain: localhost
appservice:
  listen: 127.0.0.1:{listen}
  id: {id}
  puppet_prefix: {prefix}
  bot: {bot}
  registration: registration.yaml
agents:
  local:
    title: SmolLM2 · runs on this computer
    command: [{python}, -m, acp.agents.local_model]
    # in a sandbox (docs/sandbox.md): it keeps its sessions in this folder, needs no network
    sandbox: {{write: [~/.local/state/sidekicks/local-model], network: off}}
limits:
  agents_in_memory: 2
  context_messages: 20
  context_chars: 1500
database: sqlite
"""


def default_owner() -> str:
    name = re.sub(r"[^a-z0-9._=\-]", "", getpass.getuser().lower()) or "me"
    return name


def write_default_config(path: Path, shared: bool = False, user: str | None = None) -> None:
    """The default config; `shared`: another person's homeserver already runs on port 8008.

    One person keeps the plain names (`sk_`, `sidekicks`, id `sidekicks`, port 29333). A second
    person gets names of their own that claim none of the first one's users: puppets
    `@sk-<user>_*` (not `sk_<user>_`: that would lie inside the first bridge's `@sk_.*`), bot and
    id `sidekicks_<user>`, and the first free listen port after 29333.
    """
    user = user or default_owner()
    names = dict(listen=29333, id="sidekicks", prefix="sk_", bot="sidekicks")
    if shared:
        names = dict(
            listen=_free_port_from(29334),
            id=f"sidekicks_{user}",
            prefix=registrations.suggest_prefix(user),
            bot=f"sidekicks_{user}",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEFAULT_CONFIG.format(user=user, python=sys.executable, **names), encoding="utf-8")


def _free_port_from(port: int) -> int:
    while port < 65535:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return port
            except OSError:
                port += 1
    raise OSError("no free port for the appservice listener")


async def matrix_server_at(url: str) -> bool:
    """Does a Matrix homeserver answer at `url`?"""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http:
            async with http.get(url + "/_matrix/client/versions") as response:
                return response.status == 200 and "versions" in await response.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return False


async def registration_loaded(url: str, registration, bot_user_id: str) -> bool:
    """Has the homeserver at `url` loaded `registration`? (its as_token logs in as the bot)"""
    headers = {"Authorization": f"Bearer {registration.as_token}"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            async with http.get(url + "/_matrix/client/v3/account/whoami", headers=headers) as response:
                body = await response.json(content_type=None)
                return response.status == 200 and body.get("user_id") == bot_user_id
    except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
        return False


async def up(path: Path, args, stop: asyncio.Event, say) -> int:
    from ..run import UserError, run_bridge

    if not path.exists():
        shared = await matrix_server_at("http://127.0.0.1:8008")
        write_default_config(path, shared=shared)
        say(f"• wrote a default configuration to {path}")
        if shared:
            say(
                "  (a homeserver already runs on this machine: this bridge gets its own puppet prefix, "
                "bot and port to share it)"
            )
    cfg = configuration.load(path, label=str(path))
    if not cfg.homeserver_embedded:
        raise UserError(
            f"{path} points at the homeserver {cfg.homeserver_url}: use `sidekicks run`, "
            "or set homeserver.embedded: true"
        )
    registration = registrations.ensure(cfg)  # refuses names another bridge here already claims
    server = Homeserver(
        cfg.data_dir / "homeserver",
        server_name=cfg.domain,
        port=cfg.homeserver_port,
        appservice_files=[cfg.registration_path],
        encryption=cfg.encryption,
    )
    if server.running_elsewhere():
        raise UserError(
            f"a homeserver already runs from {server.folder}: is `sidekicks up` already running for this configuration?"
        )
    if await matrix_server_at(cfg.homeserver_url):
        return await join(cfg, registration, stop, say)
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
            say("Sidekicks is running. Log in with Element (desktop or web) or nheko:")
            say(f"  homeserver:  {server.url}   (type it in: no client finds it from the user name)")
            say(f"  user:        {cfg.owners[0]}")
            say(f"  password:    in {password_file(cfg)}")
            say(f"  then write to @{cfg.puppet_prefix}{agent}:{cfg.domain} in your direct chat with it")
            say("  (the first start invites you to it, and to the bridge bot's DM with a welcome)")
            say("Ctrl-C stops everything.")
            if (hint := up_hint(cfg.voice)) is not None:  # docs/voice.md
                say(hint)

        await run_bridge(cfg, stop, on_ready=ready, at_start=checker(cfg, say))
    finally:
        say("• stopping the homeserver …")
        await server.stop()
    return 0


async def join(cfg, registration, stop: asyncio.Event, say) -> int:
    """Run the bridge against a homeserver someone else started on this machine
    (docs/architecture.md "Beyond one machine")."""
    from ..run import UserError, run_bridge

    url = cfg.homeserver_url
    host_configs = [
        p
        for p in registrations.homeserver_configs(cfg)
        if p.resolve() != (cfg.data_dir / "homeserver" / "homeserver.yaml").resolve()
    ]
    where = host_configs[0] if host_configs else "its homeserver.yaml"
    if not await registration_loaded(url, registration, cfg.bot_user_id):
        raise UserError(
            f"a homeserver already runs at {url} (another person's `sidekicks up`, or a Synapse of "
            "its own) and has not loaded this bridge. To share it, its owner (1) adds "
            f"{cfg.registration_path} (or a copy they can read: it holds this bridge's tokens, hand it "
            f"over privately) to app_service_config_files in {where}, (2) restarts it (Synapse reads "
            f"appservices only when it starts) and (3) creates your account {cfg.owners[0]} "
            "(register_new_matrix_user); then run `sidekicks up` again. "
            f"Your puppets are @{cfg.puppet_prefix}*:{cfg.domain}, your bot {cfg.bot_user_id}."
        )
    say(f"• a homeserver already runs at {url}: joining it (this bridge is registered there)")
    host = None
    for folder in (p.parent for p in host_configs):
        host = Homeserver(folder, server_name=cfg.domain, port=cfg.homeserver_port)
        break
    if host is not None and not password_file(cfg).exists():
        try:
            await ensure_owner(cfg, host, say)
        except HomeserverError:
            host = None
    if not password_file(cfg).exists():
        say(
            f"• your account {cfg.owners[0]} is not made by this bridge: ask the person running "
            "the homeserver to create it (register_new_matrix_user) if it does not exist yet"
        )

    def ready() -> None:
        agent = next(iter(cfg.agents), "agent")
        say("")
        say(
            f"Sidekicks is running on the shared homeserver {url}. Log in with Element as "
            f"{cfg.owners[0]}, then start a direct message with @{cfg.puppet_prefix}{agent}:{cfg.domain}"
        )
        say("Ctrl-C stops this bridge (the homeserver keeps running).")
        if (hint := up_hint(cfg.voice)) is not None:
            say(hint)

    await run_bridge(cfg, stop, on_ready=ready, at_start=checker(cfg, say))
    return 0


def checker(cfg, say):
    """Once the bridge runs: each agent checked as `sidekicks check` does, a failure said in the
    terminal at once; once the owner has a device to read with, a new owner welcomed (the bot's
    DM and a direct chat with the first agent, once: commands.py `welcome`), then the failures
    said in the owner's DM with the bot (bridge/local/start_check.py)."""
    from .start_check import check_at_start, owners_have_a_device

    welcomed = asyncio.Event()

    async def readable(bridge) -> None:
        """Once the owners have a device (so they can read the DM): a new owner welcomed, first."""
        await owners_have_a_device(bridge)
        if not welcomed.is_set():
            welcomed.set()
            await bridge.commands.welcome()  # the bot's DM and a direct chat, once per owner

    async def check(bridge) -> None:
        await check_at_start(cfg, say, bridge.commands.tell_owners, lambda: readable(bridge))
        await readable(bridge)

    return check


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
