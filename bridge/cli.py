"""`sidekicks` command line (SPEC §4): up, run, registration, check; and `mcp`, which agents start.

User errors end in one clear line (exit 2 for a bad configuration), never a traceback.
"""
from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import sys
from pathlib import Path

import config as configuration
from config import ConfigError
from config import registration as registrations

log = logging.getLogger("sidekicks")


class UserError(Exception):
    """Something the user can fix; printed as one line, exit code 1 (2 for config problems)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def say(text: str) -> None:
    print(text, flush=True)


def config_path(args) -> Path:
    return Path(args.config) if args.config else configuration.default_config_path()


def load_config(args) -> configuration.Config:
    path = config_path(args)
    return configuration.load(path, label=str(args.config) if args.config else str(path))


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("aiohttp.access", "nio", "peewee"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def open_store(cfg: configuration.Config):
    """The store of this config; an in-memory one when another bridge holds it (ADR §5)."""
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
        raise UserError(f"another bridge is already running for this config (its database is in use and "
                        f"{where} is taken): stop it first")
    raise UserError(f"another bridge is already running for this config, or another program uses "
                    f"{where} (appservice.listen): stop it or choose another port")


async def run_bridge(cfg: configuration.Config, stop: asyncio.Event, on_ready=None, at_start=None) -> None:
    """Run the bridge until `stop` is set. `on_ready()` once it is ready; `at_start(bridge)`, a
    coroutine, then runs beside it (cancelled if still running when the bridge stops)."""
    from .bridge import Bridge

    registration = registrations.read(cfg.registration_path)
    if registration is None:
        registration = registrations.ensure(cfg)
        raise UserError(f"wrote a new appservice registration to {cfg.registration_path}: add it to the "
                        "homeserver's app_service_config_files, restart the homeserver, then run again")
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


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _cmd_run(args) -> int:
    cfg = load_config(args)
    await run_bridge(cfg, _stop_event())
    return 0


def cmd_registration(args) -> int:
    cfg = load_config(args)
    target = Path(args.output) if args.output else cfg.registration_path
    registrations.ensure(cfg, target)
    say(f"wrote {target} (mode 0600): add it to your homeserver's app_service_config_files")
    return 0


async def _cmd_check(args) -> int:
    from .local.check import check_agents
    cfg = load_config(args)
    return await check_agents(cfg, say)


async def _cmd_up(args) -> int:
    from .local.up import up
    return await up(config_path(args), args, _stop_event(), say)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sidekicks", description="Local ACP agents as Matrix users.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", help="config file (default: %(default)s)",
                        default=None)
    sub.add_parser("up", parents=[common], help="the whole local stack: homeserver, bridge, local agent")
    sub.add_parser("run", parents=[common], help="the bridge alone, against the configured homeserver")
    reg = sub.add_parser("registration", parents=[common], help="write the appservice registration YAML")
    reg.add_argument("-o", "--output", help="where to write it (default: appservice.registration)")
    sub.add_parser("check", parents=[common], help="validate the config and start each agent once")
    sub.add_parser("mcp", help="the bridge's MCP server over stdio (agents start it from their session's mcpServers)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        if args.command == "registration":
            return cmd_registration(args)
        if args.command == "mcp":  # stdout is the MCP stream: nothing else may write there
            from .mcp.stdio import main as mcp_main
            return mcp_main()
        command = {"run": _cmd_run, "check": _cmd_check, "up": _cmd_up}[args.command]
        return asyncio.run(command(args))
    except ConfigError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"sidekicks: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"sidekicks: {exc.strerror or exc}{': ' + exc.filename if exc.filename else ''}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
