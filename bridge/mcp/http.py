"""The `matrix` MCP server over HTTP (the SDK's streamable HTTP), for agents that announce
`mcpCapabilities.http`: served on 127.0.0.1 on a port of its own, inside the bridge's event loop
(uvicorn). The port is bound and listening from the bridge's start (`bind`: its URL is known at
once), but the SDK (pydantic, starlette, uvicorn: ~37 MB of the bridge's memory) is imported, on a
worker thread, and served only when the first agent announcing HTTP opens a session (`serve`);
a connection made before then waits in the listening socket's backlog.
A request must carry a session's secret as `Authorization: Bearer …`; one without a
known secret is answered 401 before it reaches MCP. Each tool call goes to the same
`McpService.call` as the stdio server's, so both act on the same conversation the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

from . import tools

log = logging.getLogger(__name__)

Call = Callable[[str, str, dict], Awaitable[tuple[str, bool]]]
PATH = "/mcp"
HTTP_CONCURRENCY = 32  # connections and requests the HTTP MCP server takes at once; more get 503


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
        self._sock: socket.socket | None = None
        self.url: str | None = None

    def _app(self):
        import mcp_types as types
        from mcp.server import Server

        async def list_tools(ctx, params) -> types.ListToolsResult:
            return types.ListToolsResult(
                tools=[types.Tool(name=t.name, description=t.description, input_schema=t.schema) for t in tools.TOOLS]
            )

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
                    await send(
                        {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                    )
                    await send({"type": "http.response.body", "body": b"a session's secret is needed\n"})
                    return
            await inner(scope, receive, send)

        return guarded

    def bind(self) -> str:
        """Listen on a free port of 127.0.0.1 (nothing served yet) and return the URL."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}{PATH}"
        return self.url

    @property
    def serving(self) -> bool:
        return self._task is not None

    def serve(self) -> None:
        """Start serving (once): the SDK is imported off the loop, then uvicorn takes the socket."""
        if self._task is None and self._sock is not None:
            self._task = asyncio.create_task(self._serve(self._sock), name="mcp-http")

    async def _serve(self, sock: socket.socket) -> None:
        try:
            await asyncio.to_thread(_import_sdk)
            import uvicorn

            class Quiet(uvicorn.Server):
                @contextlib.contextmanager
                def capture_signals(self):  # the bridge's own handlers stop it (and this with it)
                    yield

            config = uvicorn.Config(
                self._app(),
                log_level="warning",
                lifespan="on",
                access_log=False,
                limit_concurrency=HTTP_CONCURRENCY,  # more at once: 503 at once (docs/SECURITY.md "Limits")
                timeout_keep_alive=5,
            )
            self._server = Quiet(config)
            await self._server.serve(sockets=[sock])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # stdio is what every agent has: HTTP clients get no answer
            log.warning("the MCP server over HTTP could not start (%s): agents get it over stdio only", exc)
            self.url = None

    async def start(self) -> str:
        """Bind and serve at once (tests)."""
        url = self.bind()
        self.serve()
        while self._server is None or not self._server.started:
            if self._task is not None and self._task.done():
                raise RuntimeError("the MCP HTTP server stopped at start")
            await asyncio.sleep(0.02)
        return url

    async def stop(self) -> None:
        if self._task is not None:
            if self._server is not None:
                self._server.should_exit = True
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except (TimeoutError, Exception):
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()
        self._server = self._task = self._sock = None


def _import_sdk() -> None:
    import mcp.server  # noqa: F401
    import mcp_types  # noqa: F401
    import uvicorn  # noqa: F401
