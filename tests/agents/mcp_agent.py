"""A scripted ACP agent that uses MCP tools as a real agent does: `python tests/agents/mcp_agent.py`.

It keeps the `mcpServers` each session was opened (or loaded) with, and on a directive in the
prompt starts the stdio server of that entry with the official MCP client (`mcp` SDK:
stdio_client + ClientSession: initialize, tools/call) and answers with the tool's result:

  (a directive counts on the prompt's last line: the context before it may quote earlier ones)
  [[tool:NAME {"json": "arguments"}]]   call NAME of the `matrix` server; the answer is
                                        "NAME: <result text>" or "NAME error: <result text>"
  [[tools]]                             list the server's tools: "tools: a, b, c"
  [[tool-when:PATH NAME {"json": …}]]   answer "waiting for PATH" at once, and call NAME once the
                                        file PATH exists (a call made on the agent's own, after
                                        the turn: its result only in the log)
  [[relay:bob alice …]]                 hand off (the `handoff` tool) to the first name, the
                                        request "[[relay:…]]" with the other names (none left:
                                        "relay done"); the answer is the tool's result as above
  [[forever]]                           with --forever-to NAME: hand off to NAME, the request
                                        "[[forever]]" (two agents so told hand on forever)
  [[cost:AMOUNT]]                       after the answer, add AMOUNT (USD) to the session's cost
                                        and send a usage_update with its cumulative cost
  [[then-wait:PATH]]                    after the answer (a tool call's, an echo), wait until
                                        PATH exists (or the turn is cancelled) before it ends
  anything else                         "echo: " + the prompt's last line

Options: --log FILE (every JSON-RPC message received, one JSON a line, and each tool result as
{"tool": NAME, "text": …, "error": …}), --load-session (announce loadSession; a session loaded
keeps the mcpServers of the load), --http (announce mcpCapabilities.http), --in-session-cwd
(start the stdio server in the session's working directory, as many agents do), --server-env
NAME=VALUE (more of the stdio server's environment, e.g. PYTHONPATH; repeatable), --forever-to
NAME (see [[forever]]).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `acp`

from acp.agent_kit import AgentBase, Turn, run  # noqa: E402

TOOL = re.compile(r"\[\[tool:([a-z_]+)\s*(\{.*?\})?\]\]", re.DOTALL)
RELAY = re.compile(r"\[\[relay:([^\]]*)\]\]")
COST = re.compile(r"\[\[cost:([0-9.]+)\]\]")
THEN_WAIT = re.compile(r"\[\[then-wait:(\S+?)\]\]")
TOOL_WHEN = re.compile(r"\[\[tool-when:(\S+)\s+([a-z_]+)\s*(\{.*?\})?\]\]", re.DOTALL)


class McpAgent(AgentBase):
    name = "mcp-scripted"
    version = "1.0"

    def __init__(self, opts: argparse.Namespace):
        super().__init__()
        self.opts = opts
        self.load_session = opts.load_session
        self.servers: dict[str, list[dict]] = {}
        self.cwds: dict[str, str] = {}
        self.later: set[asyncio.Task] = set()

    async def initialize(self, params: dict) -> dict:
        result = await super().initialize(params)
        if self.opts.http:
            result["agentCapabilities"]["mcpCapabilities"] = {"http": True, "sse": False}
        return result

    def received(self, message: dict) -> None:
        self.log(message)

    def log(self, record: dict) -> None:
        if self.opts.log:
            with open(self.opts.log, "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")

    async def new_session(self, cwd: str, params: dict) -> str:
        session_id = await super().new_session(cwd, params)
        self.servers[session_id] = list(params.get("mcpServers") or [])
        self.cwds[session_id] = cwd
        return session_id

    async def load(self, session_id: str, cwd: str, params: dict) -> None:
        self.servers[session_id] = list(params.get("mcpServers") or [])
        self.cwds[session_id] = cwd

    def _entry(self, session_id: str) -> dict | None:
        """The matrix server to use: over HTTP with --http (where the client gave one), else stdio."""
        servers = [s for s in self.servers.get(session_id, []) if s.get("name") == "matrix"]
        if self.opts.http:
            http = next((s for s in servers if s.get("type") == "http"), None)
            if http is not None:
                return http
        return next((s for s in servers if "command" in s), None)

    async def prompt(self, turn: Turn) -> str:
        # the directive of this prompt only: the context before it may quote earlier ones
        last = (turn.text.splitlines() or [""])[-1]
        call = TOOL.search(last)
        entry = self._entry(turn.session_id)
        when = TOOL_WHEN.search(last)
        if when is not None and entry is not None:
            task = asyncio.create_task(
                self._call_when(
                    entry,
                    self.cwds.get(turn.session_id),
                    Path(when.group(1)),
                    when.group(2),
                    json.loads(when.group(3) or "{}"),
                )
            )
            self.later.add(task)
            task.add_done_callback(self.later.discard)
            await turn.say(f"waiting for {when.group(1)}")
            return "end_turn"
        relay = RELAY.search(last)
        if call is None and relay is not None:
            names = relay.group(1).split()
            if not names:
                await turn.say("relay done")
                return "end_turn"
            request = "[[relay:" + " ".join(names[1:]) + "]]" if names[1:] else "relay done"
            call = TOOL.search("[[tool:handoff " + json.dumps({"agent": names[0], "request": request}) + "]]")
        if call is None and "[[forever]]" in last and self.opts.forever_to:
            forever = {"agent": self.opts.forever_to, "request": "[[forever]]"}
            call = TOOL.search("[[tool:handoff " + json.dumps(forever) + "]]")
        if "[[tools]]" in last:
            names = await self._session(entry, lambda s: s.list_tools()) if entry else None
            await turn.say("tools: " + (", ".join(t.name for t in names.tools) if names else "none"))
            return "end_turn"
        if call is None:
            await turn.say("echo: " + last)
            return await self._then_wait(turn, last)
        name, arguments = call.group(1), json.loads(call.group(2) or "{}")
        if entry is None:
            await turn.say(f"{name} error: no matrix MCP server in this session")
            return "end_turn"
        text, error = await self._call(entry, self.cwds.get(turn.session_id), name, arguments)
        await turn.say(f"{name}{' error' if error else ''}: {text}")
        return await self._then_wait(turn, last)

    async def _then_wait(self, turn: Turn, last: str) -> str:
        """After the answer: [[cost:AMOUNT]] reported, then with [[then-wait:PATH]] the turn goes
        on until PATH exists or it is cancelled."""
        cost = COST.search(last)
        if cost is not None:
            costs = self.__dict__.setdefault("costs", {})
            costs[turn.session_id] = costs.get(turn.session_id, 0.0) + float(cost.group(1))
            await turn.update(
                {
                    "sessionUpdate": "usage_update",
                    "used": 1000,
                    "size": 200000,
                    "cost": {"amount": costs[turn.session_id], "currency": "USD"},
                }
            )
        wait = THEN_WAIT.search(last)
        if wait is not None:
            path = Path(wait.group(1))
            while not path.exists() and not turn.cancelled:
                await asyncio.sleep(0.05)
            if turn.cancelled:
                return "cancelled"
        return "end_turn"

    async def _call(self, entry: dict, cwd: str | None, name: str, arguments: dict) -> tuple[str, bool]:
        result = await self._session(entry, lambda s: s.call_tool(name, arguments), cwd)
        text = "".join(getattr(block, "text", "") for block in result.content)
        self.log({"tool": name, "text": text, "error": bool(result.is_error), "via": entry.get("type", "stdio")})
        return text, bool(result.is_error)

    async def _call_when(self, entry: dict, cwd: str | None, path: Path, name: str, arguments: dict) -> None:
        while not path.exists():
            await asyncio.sleep(0.05)
        await self._call(entry, cwd, name, arguments)

    async def _session(self, entry: dict, use, cwd: str | None = None):
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if entry.get("type") == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = {h["name"]: h["value"] for h in entry.get("headers") or []}
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                async with streamable_http_client(entry["url"], http_client=http) as (read, write, *_):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        return await use(session)
        env = {e["name"]: e["value"] for e in entry.get("env") or []}
        env.update(dict(item.split("=", 1) for item in self.opts.server_env))
        params = StdioServerParameters(
            command=entry["command"],
            args=list(entry.get("args") or []),
            env=env,
            cwd=cwd if self.opts.in_session_cwd else None,
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await use(session)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log")
    p.add_argument("--load-session", action="store_true")
    p.add_argument("--http", action="store_true")
    p.add_argument("--in-session-cwd", action="store_true")
    p.add_argument("--server-env", action="append", default=[])
    p.add_argument("--forever-to")
    run(McpAgent(p.parse_args()))


if __name__ == "__main__":
    main()
