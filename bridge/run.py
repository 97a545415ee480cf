"""Run one bridge until it is told to stop: what `sidekicks run` (cli.py) and `sidekicks up`
(local/up.py) share. The one module that builds a `Bridge` (bridge.py); the command line and
the local stack come here for it.

User errors are `UserError`: one line, an exit code (cli.py prints them).
"""

from __future__ import annotations

import asyncio
import errno

import config as configuration
from config import registration as registrations


class UserError(Exception):
    """Something the user can fix; printed as one line, exit code 1 (2 for config problems)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def say(text: str) -> None:
    print(text, flush=True)


def open_store(cfg: configuration.Config):
    """The store of this config; an in-memory one when another bridge holds it
    (docs/architecture.md "The store")."""
    from store import Store, StoreLocked

    try:
        return Store.open(cfg.database, cfg.data_dir), False
    except StoreLocked:  # the bridge says so when it starts (Bridge.start)
        return Store.open(":memory:"), True


def _port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on host:port (what the appservice is about to bind)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _check_port(cfg: configuration.Config, store_locked: bool) -> None:
    """Two bridges on one config: the second stops here with one line, not a traceback."""
    if not _port_in_use(cfg.listen_host, cfg.listen_port):
        return
    where = f"{cfg.listen_host}:{cfg.listen_port}"
    if store_locked:
        raise UserError(
            f"another bridge is already running for this config (its database is in use and "
            f"{where} is taken): stop it first"
        )
    raise UserError(
        f"another bridge is already running for this config, or another program uses "
        f"{where} (appservice.listen): stop it or choose another port"
    )


def raise_open_files() -> int:
    """The soft limit of open files raised to the hard one (often 1,024 of 524,288): a flood of
    connections from an agent meets the MCP server's caps, not EMFILE (docs/SECURITY.md
    "Limits"). The limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


async def run_bridge(cfg: configuration.Config, stop: asyncio.Event, on_ready=None, at_start=None) -> None:
    """Run the bridge until `stop` is set. `on_ready()` once it is ready; `at_start(bridge)`, a
    coroutine, then runs beside it (cancelled if still running when the bridge stops)."""
    from .bridge import Bridge

    raise_open_files()

    registration = registrations.read(cfg.registration_path)
    if registration is None:
        registration = registrations.ensure(cfg)
        raise UserError(
            f"wrote a new appservice registration to {cfg.registration_path}: add it to the "
            "homeserver's app_service_config_files, restart the homeserver, then run again"
        )
    registrations.check(cfg, registration)  # another bridge on this homeserver claims our users?
    store, unavailable = open_store(cfg)
    try:
        _check_port(cfg, unavailable)
    except BaseException:
        store.close()
        raise
    bridge = Bridge(cfg, registration, store, history_unavailable=unavailable)
    beside = None
    try:
        await bridge.start(progress=lambda text: say(f"• {text}"))
        if on_ready is not None:
            on_ready()
        if at_start is not None:
            beside = asyncio.ensure_future(at_start(bridge))
        stopping = asyncio.ensure_future(stop.wait())
        halting = asyncio.ensure_future(bridge.halted.wait())
        await asyncio.wait({stopping, halting}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        halting.cancel()
    finally:
        if beside is not None:
            beside.cancel()
            await asyncio.gather(beside, return_exceptions=True)
        say("• stopping the bridge …")
        await bridge.stop()
    if bridge.halted.is_set():
        raise UserError(bridge.halt_reason)
