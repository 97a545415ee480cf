"""The local OpenAI-compatible server of the third-party agent tests, with a request log.

    python tests/agents/llm_server.py --port P --log FILE [--model FILE.gguf] [--n-ctx N]

This is llama-cpp-python's own server (`python -m llama_cpp.server`, the `server` extra) serving
the shipped SmolLM2 GGUF, unchanged, plus one ASGI wrapper that appends a JSON line per request
to FILE: path, message roles and sizes, the number of tools, the user messages and the last one. The
tests read it to know that the agent's prompt reached the model and what the agent sent. Nothing
here listens anywhere but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `acp`


def summary(path: str, body: bytes) -> dict:
    entry: dict = {"at": time.time(), "path": path, "bytes": len(body)}
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return entry
    if not isinstance(data, dict):
        return entry
    messages = data.get("messages") if isinstance(data.get("messages"), list) else []

    def text(message: dict) -> str:
        content = message.get("content")
        if isinstance(content, list):  # content parts
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return content if isinstance(content, str) else ""

    entry.update(
        model=data.get("model"),
        stream=bool(data.get("stream")),
        max_tokens=data.get("max_tokens"),
        tools=len(data.get("tools") or []),
        roles=[m.get("role") for m in messages if isinstance(m, dict)],
        chars=[len(text(m)) for m in messages if isinstance(m, dict)],
        users=[text(m) for m in messages if isinstance(m, dict) and m.get("role") == "user"],
        last_user=next((text(m) for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None),
    )
    return entry


def logged(app, log_path: Path):
    """An ASGI app that records each HTTP request body, then hands it on unchanged."""

    async def wrapper(scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)
        chunks: list[bytes] = []

        async def tap():
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    with log_path.open("a", encoding="utf-8") as log:
                        log.write(json.dumps(summary(scope["path"], b"".join(chunks))) + "\n")
            return message

        return await app(scope, tap, send)

    return wrapper


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--model", help="a GGUF file (default: the shipped SmolLM2-135M)")
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--alias", default="smollm2")
    opts = p.parse_args()

    import llama_cpp.llama_cpp as low_level
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from acp.agents.model import _without_extra_buffers, cpu_has_amx, default_model_path

    model = opts.model or str(default_model_path())
    # as the local agent does (acp/agents/model.py): on AMX machines llama.cpp's AMX matrix
    # multiply crashes the process at the first evaluation, so weights are not repacked for it
    with _without_extra_buffers(low_level, cpu_has_amx()):
        app = create_app(
            server_settings=ServerSettings(host="127.0.0.1", port=opts.port),
            model_settings=[ModelSettings(model=model, model_alias=opts.alias, n_ctx=opts.n_ctx, verbose=True)],
        )
        uvicorn.run(logged(app, opts.log), host="127.0.0.1", port=opts.port, log_level="warning")


if __name__ == "__main__":
    main()
