#!/usr/bin/env python3
"""An ACP agent that logs itself in, as an `agent` login method does (docs/sessions.md "Logins"):
`python tests/agents/login_agent.py --log FILE [options]`.

Its `initialize` lists one method with no `type` (ACP's default, `agent`): {"id": "browser-login",
"name": "Log in with a browser"}. `session/new` answers -32000 `auth_required` until it is logged
in; `authenticate` logs it in, asking the person to open a page meanwhile the two ways an agent
can while the call runs:

  --ask-url URL      an `elicitation/create` in URL mode scoped to the `authenticate` request
                     (`requestId`, no session: the ACP elicitation RFD's way), its answer logged
                     as {"elicitation-answer": ...}
  --stderr-url URL   a line on its stderr: "To log in, open URL in a browser"
  --hold FILE        then waits until FILE exists (the person finished on that page)
  --fail             then answers `authenticate` with -32603 "Login failed: the page was closed"
                     (still not logged in)

`session/prompt` answers "echo: " + the prompt's text. `--log FILE`: every JSON-RPC message it
received, one JSON a line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `acp`

from acp.agent_kit import AgentBase, RpcFailure, Turn, run  # noqa: E402
from acp.framing import AUTH_REQUIRED, INTERNAL_ERROR  # noqa: E402

METHOD = {"id": "browser-login", "name": "Log in with a browser", "description": "Sign in on the web"}


class LoginAgent(AgentBase):
    name, version = "login-agent", "1.0"
    auth_methods = [METHOD]

    def __init__(self, opts: argparse.Namespace):
        super().__init__()
        self.opts = opts
        self.logged_in = False
        self.authenticating: object = None  # the id of the `authenticate` request being answered

    def log(self, record: dict) -> None:
        with open(self.opts.log, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")

    def received(self, message: dict) -> None:
        self.log(message)
        if message.get("method") == "authenticate":
            self.authenticating = message.get("id")

    async def authenticate(self, method_id: str) -> None:
        if method_id != METHOD["id"]:
            raise RpcFailure(-32602, f"unknown method {method_id}")
        o = self.opts
        if o.ask_url:
            params = {
                "requestId": self.authenticating,
                "mode": "url",
                "elicitationId": "login-1",
                "url": o.ask_url,
                "message": "Sign in to continue",
            }
            self.log({"elicitation-answer": await self.conn.request("elicitation/create", params)})
        if o.stderr_url:
            os.write(2, f"To log in, open {o.stderr_url} in a browser\n".encode())
        if o.hold:
            while not Path(o.hold).exists():
                await asyncio.sleep(0.02)
        if o.fail:
            raise RpcFailure(INTERNAL_ERROR, "Login failed: the page was closed")
        self.logged_in = True

    async def new_session(self, cwd: str, params: dict) -> str:
        if not self.logged_in:
            raise RpcFailure(AUTH_REQUIRED, "Authentication required")
        return await super().new_session(cwd, params)

    async def prompt(self, turn: Turn) -> str:
        await turn.say(f"echo: {turn.text}")
        return "end_turn"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--log", required=True)
    p.add_argument("--ask-url")
    p.add_argument("--stderr-url")
    p.add_argument("--hold")
    p.add_argument("--fail", action="store_true")
    run(LoginAgent(p.parse_args()))


if __name__ == "__main__":
    main()
