#!/usr/bin/env python3
"""A whole ACP agent on the standard library alone, as a registry's archive or package would ship
one (the tests of `agents add`: tests/unit/local/test_agents.py, tests/integration/
test_registry_agents.py): `initialize`, `session/new`, and `session/prompt` answered with
"tiny: " + the prompt's text + the arguments it was started with. It runs as a copy of this file
(unpacked from an archive, or standing in for npx and uvx), so it imports nothing of the project.
"""

import json
import sys


def send(message: dict) -> None:
    print(json.dumps({"jsonrpc": "2.0", **message}), flush=True)


def answer(method: str, params: dict) -> dict | None:
    if method == "initialize":
        info = {"name": "tiny", "version": "9.9"}
        return {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": [], "agentInfo": info}
    if method == "session/new":
        return {"sessionId": "s1"}
    if method == "session/prompt":
        text = " ".join(block.get("text", "") for block in params["prompt"])
        words = " ".join(["tiny:", text, *sys.argv[1:]])
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": words}}
        send({"method": "session/update", "params": {"sessionId": "s1", "update": update}})
        return {"stopReason": "end_turn"}
    return None


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # a notification (session/cancel), or an answer
        result = answer(message["method"], message.get("params") or {})
        if result is None:
            send({"id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
        else:
            send({"id": message["id"], "result": result})


if __name__ == "__main__":
    main()
