"""`sidekicks mcp`: the `matrix` MCP server over stdio, started by an agent from the `mcpServers`
entry of its session (official `mcp` SDK, its low-level server). It holds no state: each tool
call goes to the running bridge over the private socket named in SIDEKICKS_MCP_SOCKET, with the
session's secret from SIDEKICKS_MCP_SECRET, and the bridge's answer is the tool's result.
"""

from __future__ import annotations

import asyncio
import os
import sys

from . import tools, wire

CALL_TIMEOUT = 600.0  # seconds a call may take at the bridge (a file upload on a slow homeserver)


async def forward(socket_path: str, secret: str, name: str, arguments: dict | None) -> tuple[str, bool]:
    """One call to the bridge: (text, is_error). Never raises: a bridge that is not there is an error result."""
    try:
        reader, writer = await asyncio.open_unix_connection(socket_path, limit=wire.MAX_LINE + 1)
    except OSError as exc:
        return f"the Sidekicks bridge is not reachable ({exc.strerror or exc}): is it running?", True
    try:
        writer.write(wire.request_line(secret, name, arguments))
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), CALL_TIMEOUT)
    except (TimeoutError, OSError, ValueError) as exc:
        return f"the Sidekicks bridge did not answer ({type(exc).__name__})", True
    finally:
        writer.close()
    if not line:
        return "the Sidekicks bridge closed the connection without an answer", True
    return wire.read_reply(line)


def build_server(socket_path: str, secret: str):
    import mcp_types as types
    from mcp.server import Server

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name=t.name, description=t.description, input_schema=t.schema) for t in tools.TOOLS]
        )

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        text, error = await forward(socket_path, secret, params.name, params.arguments)
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)

    return Server(tools.SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(socket_path: str, secret: str) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(socket_path, secret)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> int:
    socket_path, secret = os.environ.get(wire.ENV_SOCKET), os.environ.get(wire.ENV_SECRET)
    if not socket_path or not secret:
        print(
            f"sidekicks mcp: {wire.ENV_SOCKET} and {wire.ENV_SECRET} are not set — this command is "
            "started by an agent from the mcpServers the Sidekicks bridge gives its sessions",
            file=sys.stderr,
        )
        return 2
    try:
        asyncio.run(serve(socket_path, secret))
    except KeyboardInterrupt:
        return 130
    return 0
