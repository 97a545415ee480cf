"""A scripted OpenAI-compatible model server for tests: deterministic text and tool calls.

    server = ModelServer({"pelican-7781": [Tools(("write", {...})), Tools(("bash", {...})), Text("Done.")]})
    await server.start()          # on 127.0.0.1, a free port; server.url is the base URL (…/v1)
    ...
    await server.stop()

Real coding agents (OpenCode: `@ai-sdk/openai-compatible`) call `POST /v1/chat/completions`
with the whole conversation each time, and stream the answer as server-sent events. This server
answers each request from a script, without any model:

* the script maps a marker (a word the test puts in the owner's prompt) to the steps of that
  turn. A request belongs to the newest user message that holds a marker; the steps already
  taken are the assistant messages after it (each step the agent acted on left one), so the
  next step is known from the request alone: nothing to reset, restarts and retries included;
* a step is `Text(...)` (the answer, in a few chunks, finish_reason "stop") or `Tools(...)`
  (one or more function calls, their arguments streamed in two pieces, finish_reason
  "tool_calls"), optionally held until an `asyncio.Event` is set (`hold=`), so a test decides
  when an agent is "still waiting for its model";
* a request without a marker (a title, a summary the agent asks for) gets a short text;
* `requests` keeps every request's body, in order, for the test to read.

Chunks follow OpenAI's `chat.completion.chunk` shape: a first delta with the role, tool calls
with `index`, `id`, `type: function` and `function.name` first, arguments after; a last chunk
with `finish_reason` and `usage`; then `data: [DONE]`. Non-streaming requests get one
`chat.completion`. Only 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Text:
    text: str
    hold: asyncio.Event | None = None


@dataclass
class Tools:
    calls: tuple[tuple[str, dict[str, Any]], ...]
    hold: asyncio.Event | None = None

    def __init__(self, *calls: tuple[str, dict[str, Any]], hold: asyncio.Event | None = None):
        self.calls, self.hold = tuple(calls), hold


FALLBACK = Text("OK.")


@dataclass
class ModelServer:
    script: dict[str, list[Text | Tools]] = field(default_factory=dict)
    model: str = "scripted"
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.holding = 0  # requests waiting for their step's `hold`

    # -- life cycle ------------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- what a request asks for -----------------------------------------------------------------
    def step_for(self, body: dict[str, Any]) -> tuple[str | None, int, Text | Tools]:
        """(marker, step index, step) of a request: see the module's docstring."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        for at in range(len(messages) - 1, -1, -1):
            if messages[at].get("role") != "user":
                continue
            text = _text(messages[at].get("content"))
            marker = next((m for m in self.script if m in text), None)
            if marker is None:
                continue
            done = sum(1 for m in messages[at + 1 :] if m.get("role") == "assistant")
            steps = self.script[marker]
            return marker, done, steps[done] if done < len(steps) else FALLBACK
        return None, 0, FALLBACK

    def calls_for(self, marker: str) -> list[dict[str, Any]]:
        """The requests that were about `marker`'s turn."""
        return [r for r in self.requests if self.step_for(r)[0] == marker]

    # -- HTTP ------------------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "tests"}]}
        )

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "not JSON", "type": "invalid_request_error"}}, status=400)
        self.requests.append(body)
        _, _, step = self.step_for(body)
        if step.hold is not None and not step.hold.is_set():
            self.holding += 1
            try:
                await step.hold.wait()
            finally:
                self.holding -= 1
        ident = f"chatcmpl-{next(self._ids)}"
        if not body.get("stream"):
            return web.json_response(self._whole(ident, step))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for chunk in self._chunks(ident, step):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _chunk(self, ident: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    def _chunks(self, ident: str, step: Text | Tools) -> list[dict[str, Any]]:
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if isinstance(step, Text):
            words = step.text.split(" ")
            pieces = (
                [" ".join(words[: len(words) // 2]) + " ", " ".join(words[len(words) // 2 :])]
                if len(words) > 1
                else [step.text]
            )
            chunks = [self._chunk(ident, {"role": "assistant", "content": ""})]
            chunks += [self._chunk(ident, {"content": piece}) for piece in pieces if piece.strip()]
            return chunks + [self._chunk(ident, {}, "stop", usage=usage)]
        chunks = [self._chunk(ident, {"role": "assistant", "content": None})]
        for index, (name, args) in enumerate(step.calls):
            arguments = json.dumps(args)
            half = len(arguments) // 2
            call_id = f"call_{ident.rsplit('-', 1)[-1]}_{index}"
            chunks.append(
                self._chunk(
                    ident,
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    },
                )
            )
            for piece in (arguments[:half], arguments[half:]):
                chunks.append(self._chunk(ident, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        return chunks + [self._chunk(ident, {}, "tool_calls", usage=usage)]

    def _whole(self, ident: str, step: Text | Tools) -> dict[str, Any]:
        if isinstance(step, Text):
            message: dict[str, Any] = {"role": "assistant", "content": step.text}
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{ident.rsplit('-', 1)[-1]}_{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                    for i, (name, args) in enumerate(step.calls)
                ],
            }
            finish = "tool_calls"
        return {
            "id": ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""
