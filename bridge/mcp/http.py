"""The `matrix` MCP server over HTTP (the SDK's streamable HTTP), for agents that announce
`mcpCapabilities.http`: served on 127.0.0.1 on a port of its own, inside the bridge's event loop
(uvicorn). A request must carry a session's secret as `Authorization: Bearer …`; one without a
known secret is answered 401 before it reaches MCP. Each tool call goes to the same
`McpService.call` as the stdio server's, so both act on the same conversation the same way.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Awaitable, Callable

from . import tools

log = logging.getLogger(__name__)

Call = Callable[[str, str, dict], Awaitable[tuple[str, bool]]]
PATH = "/mcp"


def bearer(value: str | None) -> str | None:
    if value and value[:7].lower() == "bearer ":
        return value[7:].strip() or None
    return None


class HttpMcp:
    def __init__(self, call: Call, known: Callable[[str], bool]) -> None:
        self._call = call
        self._known = known
        self._server = None
        self._task: asyncio.Task | None = None
        self.url: str | None = None

    def _app(self):
        import mcp_types as types
        from mcp.server import Server

        async def list_tools(ctx, params) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[types.Tool(name=t.name, description=t.description,
                                                           input_schema=t.schema) for t in tools.TOOLS])

        async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
            request = getattr(ctx, "request", None)
            secret = bearer(request.headers.get("authorization")) if request is not None else None
            text, error = await self._call(secret or "", params.name, params.arguments or {})
            return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)

        server = Server(tools.SERVER_NAME, on_list_tools=list_tools, on_call_tool=call_tool)
        inner = server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, json_response=True)
        known = self._known

        async def guarded(scope, receive, send):
            if scope["type"] == "http":
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
                secret = bearer(headers.get("authorization"))
                if secret is None or not known(secret):
                    await send({"type": "http.response.start", "status": 401,
                                "headers": [(b"content-type", b"text/plain")]})
                    await send({"type": "http.response.body", "body": b"a session's secret is needed\n"})
                    return
            await inner(scope, receive, send)
        return guarded

    async def start(self) -> str:
        import uvicorn

        class Quiet(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # the bridge's own handlers stop it (and this with it)
                yield

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="on", access_log=False)
        self._server = Quiet(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="mcp-http")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start
                raise RuntimeError("the MCP HTTP server stopped at start")
            await asyncio.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}{PATH}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except (asyncio.TimeoutError, Exception):
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        self._server = self._task = None
