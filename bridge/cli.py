"""`sidekicks` command line (docs/commands.md "The command line"): up, run, registration, check,
agents (search, add, remove: bridge/agents_registry.py); `mcp`, which agents start; `acp`, which
ACP clients start (bridge/attach).

User errors end in one clear line (exit 2 for a bad configuration), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import config as configuration
from config import ConfigError
from config import registration as registrations

# how a bridge runs, shared with `sidekicks up` (local/up.py); open_store for tests and benches
from .run import UserError, open_store, run_bridge, say  # noqa: F401

log = logging.getLogger("sidekicks")


def config_path(args) -> Path:
    return Path(args.config) if args.config else configuration.default_config_path()


def load_config(args) -> configuration.Config:
    path = config_path(args)
    return configuration.load(path, label=str(args.config) if args.config else str(path))


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("aiohttp.access", "nio", "peewee"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _cmd_run(args) -> int:
    cfg = load_config(args)
    from .local.start_check import sandbox_trouble

    for line in await sandbox_trouble(cfg):  # that agent will not start (docs/sandbox.md)
        say(f"✗ {line}")
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


def _registry_source(args) -> tuple[str | None, Path]:
    """The registry `agents` reads (`--registry`, else the config's `registry:`, else the
    published one) and the data folder its cache goes in."""
    path = config_path(args)
    source = args.registry
    if source and not source.startswith(("http://", "https://")):
        source = str(Path(source).resolve())
    if source is None and path.exists():
        source = load_config(args).registry
    return source, configuration.data_dir(path)


async def _cmd_agents(args) -> int:
    from config.agent_registry import RegistryError

    from . import agents_registry as agents

    try:
        if args.action == "remove":
            from config import config_edit

            config_edit.remove_agent(config_path(args), args.name)
            say(f"removed {args.name} from {config_path(args)}")
            return 0
        source, data = _registry_source(args)
        if args.action == "search":
            return await _agents_search(source, data, " ".join(args.text))
        added = await agents.add_from_registry(config_path(args), args.id, agents.written_cwd(args.cwd), source, data)
    except RegistryError as exc:
        raise UserError(str(exc)) from None
    for line in added.lines:
        say(line)
    return await _check_one(args, added.name)


async def _agents_search(source: str | None, data: Path, text: str) -> int:
    from config import agent_registry as reg

    from . import agents_registry as agents

    entries, where = await agents.read_registry(source, data)
    say(where)
    found = reg.search(entries, text)
    for line in reg.search_lines(found, agents.this_platform()):
        say(line)
    say(f"{len(found)} of {len(entries)} agents" + (f" match {text!r}" if text else ""))
    return 0


async def _check_one(args, name: str) -> int:
    """The new agent started once, as `sidekicks check` does."""
    from .agent_specs import sandbox_line, spec_of
    from .local.check import announced, report

    cfg = load_config(args)
    found = await announced(spec_of(cfg, name))
    for line in report(name, found, tools=cfg.agents[name].tools, sandbox=sandbox_line(cfg, name)):
        say(line)
    return 0


async def _cmd_up(args) -> int:
    from .local.up import up

    return await up(config_path(args), args, _stop_event(), say)


def _cmd_acp(args) -> int:
    from .attach.pipe import run

    cfg = load_config(args)
    if args.agent is not None and args.agent not in cfg.agents:
        print(f"sidekicks acp: no agent called {args.agent} (agents: {', '.join(cfg.agents)})", file=sys.stderr)
        return 2
    return run(str(cfg.data_dir), args.agent)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sidekicks", description="Local ACP agents as Matrix users.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", help="config file (default: %(default)s)", default=None)
    sub.add_parser("up", parents=[common], help="the whole local stack: homeserver, bridge, local agent")
    sub.add_parser("run", parents=[common], help="the bridge alone, against the configured homeserver")
    reg = sub.add_parser("registration", parents=[common], help="write the appservice registration YAML")
    reg.add_argument("-o", "--output", help="where to write it (default: appservice.registration)")
    sub.add_parser("check", parents=[common], help="validate the config and start each agent once")
    agents = sub.add_parser("agents", help="agents from the ACP agent registry: search, add, remove")
    actions = agents.add_subparsers(dest="action", required=True)
    registry = argparse.ArgumentParser(add_help=False)
    registry.add_argument(
        "--registry", help="the registry's URL or file (default: the config's registry:, else the published one)"
    )
    search = actions.add_parser("search", parents=[common, registry], help="list the registry's agents")
    search.add_argument("text", nargs="*", help="words each listed agent has in its id, name or description")
    add = actions.add_parser(
        "add", parents=[common, registry], help="write a registry agent into the config, then start it once"
    )
    add.add_argument("id", help="the agent's id in the registry (`sidekicks agents search`)")
    add.add_argument("--cwd", help="the folder it works in (default: your home folder)")
    remove = actions.add_parser("remove", parents=[common], help="take an agent out of the config")
    remove.add_argument("name", help="the agent's name in the config")
    sub.add_parser("mcp", help="the bridge's MCP server over stdio (agents start it from their session's mcpServers)")
    acp = sub.add_parser(
        "acp",
        parents=[common],
        help="an ACP agent over stdio for Zed, JetBrains, acpx: the running bridge's conversations",
    )
    acp.add_argument("--agent", help="only the conversations with this agent; new ones with it")
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
        if args.command == "acp":  # stdout is the ACP stream: nothing else may write there
            return _cmd_acp(args)
        command = {"run": _cmd_run, "check": _cmd_check, "up": _cmd_up, "agents": _cmd_agents}[args.command]
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
