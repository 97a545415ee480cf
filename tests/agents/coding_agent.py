"""A scripted coding agent for tests: `python tests/agents/coding_agent.py [options]`.

A real ACP agent over stdio (acp.agent_kit) doing what coding agents do — plans, tool calls
with diffs and terminal output, permissions about a diff or a command, modes, config options
(a model among them), models, usage, session titles, elicitation (form and URL), the stop
reasons — chosen per prompt by directives in the prompt text.

Options
  --log FILE          append every JSON-RPC message received, one JSON per line
  --offer LIST        what the sessions offer, comma separated (default modes,config):
                        modes   `modes`: ask / plan / code (current ask)
                        config  `configOptions`: mode (category mode, same values), model
                                (category model, grouped: local/small, remote/large) and
                                thought_level (low / high)
                        models  `models`: small / large (the agents' fallback, set_model)
  --load-session      announce loadSession; session/load replays the history
  --state DIR         keep sessions in DIR, so that session/load works in a new process
  --keep-settings     a loaded session keeps its mode / model / options (default: a new process
                      starts every loaded session with the defaults, like agents whose modes
                      live in the process)
  --early             send usage_update and session_info_update for a new session BEFORE the
                      session/new reply
  --slow-set          session/set_mode, set_model and set_config_option never answer (until
                      cancelled with $/cancel_request)
  --chunks N          answer in N chunks (default 3)
  --hold DIR          before the n-th plan (n >= 1) of a turn, wait until the file DIR/plan-n
                      exists (a test shows each plan before it lets the next one come)

Directives in the prompt text (that prompt only)
  [[plan:N]]          the plan sent N times, each a full replacement (an entry further each time)
  [[edit]]            a tool call (kind edit) with a diff of notes.py; [[edit:new]] a new file,
                      [[edit:big]] a diff of 300 lines
  [[run]]             a tool call (kind execute) with terminal content; its output streamed in
                      _meta (terminal_info / terminal_output / terminal_exit, exit code 0);
                      [[run:fail]] exits 2
  [[permit-edit]]     session/request_permission about an edit with its diff, with the four option
                      kinds; [[permit-run]] about a command; the answer names the chosen option
  [[permit-many:N]]   N permission requests at once; the answer counts the chosen and refused
  [[ask]]             elicitation/create (form: name, count, colour, confirm); the answer echoes
                      the reply
  [[ask-url]]         elicitation/create (URL mode); after an accept, elicitation/complete
  [[ask-url-done:FILE]] elicitation/create (URL mode, id login-2); once FILE exists (the question
                      is shown), elicitation/complete for it before any answer: the owner
                      finished elsewhere; the answer gives the reply
  [[ask-withdraw]]    an elicitation withdrawn with $/cancel_request after 0.3 s; the answer
                      gives the error the client replied with
  [[usage]]           usage_update (used/size/cost), [[title:TEXT]] session_info_update
  [[mode:ID]]         the agent changes its own mode (current_mode_update, config_option_update)
  [[stop:REASON]]     end with that stopReason (max_tokens, max_turn_requests, refusal)
  [[slow]]            20 chunks, 0.2 s apart
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `acp`

from acp.agent_kit import AgentBase, RemoteError, RpcFailure, Turn, run  # noqa: E402

DIRECTIVE = re.compile(r"\[\[([a-z-]+)(?::([^\]]*))?\]\]")
MODES = [
    ("ask", "Ask", "Asks before every change"),
    ("plan", "Plan", "Plans, changes nothing"),
    ("code", "Code", "Changes files"),
]
MODELS = [("small", "Small", "local"), ("large", "Large", "remote")]
LEVELS = [("low", "Low"), ("high", "High")]
DEFAULTS = {"mode": "ask", "model": "small", "thought_level": "low"}
OLD = "def greet(name):\n    print('hello ' + name)\n\n\ngreet('world')\n"
NEW = "def greet(name: str) -> None:\n    print(f'hello {name}')\n\n\ngreet('world')\n"
PLAN = ["Read the code", "Write the change", "Run the tests", "Tidy up"]


class Coding(AgentBase):
    name = "coding"
    version = "1.0"

    def __init__(self, opts: argparse.Namespace):
        super().__init__()
        self.opts = opts
        self.offer = {part.strip() for part in opts.offer.split(",") if part.strip()}
        self.load_session = opts.load_session
        self.sessions: dict[str, dict] = {}  # id -> {"settings": {...}, "history": [[role, text]]}

    # -- persistence ----------------------------------------------------------------------
    def _path(self, session_id: str) -> Path | None:
        return Path(self.opts.state) / f"{session_id}.json" if self.opts.state else None

    def _save(self, session_id: str) -> None:
        if path := self._path(session_id):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.sessions[session_id]))

    # -- what a session offers -------------------------------------------------------------
    def _config(self, settings: dict) -> list[dict]:
        return [
            {
                "id": "mode",
                "name": "Mode",
                "description": "How the agent works",
                "category": "mode",
                "type": "select",
                "currentValue": settings["mode"],
                "options": [{"value": v, "name": n, "description": d} for v, n, d in MODES],
            },
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": settings["model"],
                "options": [
                    {"group": g, "name": g.title(), "options": [{"value": v, "name": n}]} for v, n, g in MODELS
                ],
            },
            {
                "id": "thought_level",
                "name": "Thinking",
                "category": "thought_level",
                "type": "select",
                "currentValue": settings["thought_level"],
                "options": [{"value": v, "name": n} for v, n in LEVELS],
            },
        ]

    def _offers(self, session_id: str) -> dict:
        settings = self.sessions[session_id]["settings"]
        result: dict = {}
        if "modes" in self.offer:
            result["modes"] = {
                "currentModeId": settings["mode"],
                "availableModes": [{"id": v, "name": n, "description": d} for v, n, d in MODES],
            }
        if "config" in self.offer:
            result["configOptions"] = self._config(settings)
        if "models" in self.offer:
            result["models"] = {
                "currentModelId": settings["model"],
                "availableModels": [{"modelId": v, "name": n} for v, n, _ in MODELS],
            }
        return result

    def _mode_changed(self, session_id: str) -> None:
        settings = self.sessions[session_id]["settings"]
        self.send_update(session_id, {"sessionUpdate": "current_mode_update", "currentModeId": settings["mode"]})
        if "config" in self.offer:
            self.send_update(
                session_id, {"sessionUpdate": "config_option_update", "configOptions": self._config(settings)}
            )

    # -- protocol hooks ---------------------------------------------------------------------
    def received(self, message: dict) -> None:
        if self.opts.log:
            with open(self.opts.log, "a", encoding="utf-8") as log:
                log.write(json.dumps(message) + "\n")

    async def new_session(self, cwd: str, params: dict) -> str:
        session_id = await super().new_session(cwd, params)
        self.sessions[session_id] = {"settings": dict(DEFAULTS), "history": []}
        self._save(session_id)
        if self.opts.early:  # ACP allows updates before the reply
            self.send_update(session_id, {"sessionUpdate": "usage_update", "used": 10, "size": 1000})
            self.send_update(session_id, {"sessionUpdate": "session_info_update", "title": "Fresh start"})
        return session_id

    async def _handle_request(self, method: str, params: dict):
        if method in ("session/new", "session/load"):
            if method == "session/new":
                session_id = await self.new_session(params.get("cwd", ""), params)
                return {"sessionId": session_id, **self._offers(session_id)}
            await self.load(params.get("sessionId", ""), params.get("cwd", ""), params)
            return self._offers(params.get("sessionId", ""))
        return await super()._handle_request(method, params)

    async def load(self, session_id: str, cwd: str, params: dict) -> None:
        if not self.load_session:
            raise RpcFailure(-32601, "session/load not supported")
        if session_id not in self.sessions:
            path = self._path(session_id)
            if not path or not path.exists():
                raise RpcFailure(-32002, f"session not found: {session_id}")
            self.sessions[session_id] = json.loads(path.read_text())
            if not self.opts.keep_settings:
                self.sessions[session_id]["settings"] = dict(DEFAULTS)
        for role, text in self.sessions[session_id]["history"]:
            kind = "user_message_chunk" if role == "user" else "agent_message_chunk"
            self.send_update(session_id, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})

    async def other_request(self, method: str, params: dict):
        session_id = params.get("sessionId", "")
        if method in ("session/set_mode", "session/set_model", "session/set_config_option"):
            if session_id not in self.sessions:
                raise RpcFailure(-32002, f"session not found: {session_id}")
            if self.opts.slow_set:
                await asyncio.Event().wait()  # until $/cancel_request cancels this handler
            settings = self.sessions[session_id]["settings"]
            if method == "session/set_mode":
                return self._set(session_id, "mode", params.get("modeId"), [v for v, _, _ in MODES])
            if method == "session/set_model":
                if "models" not in self.offer:
                    raise RpcFailure(-32601, "method not found: session/set_model")
                return self._set(session_id, "model", params.get("modelId"), [v for v, _, _ in MODELS])
            key = params.get("configId")
            allowed = {
                "mode": [v for v, _, _ in MODES],
                "model": [v for v, _, _ in MODELS],
                "thought_level": [v for v, _ in LEVELS],
            }
            if key not in allowed or "config" not in self.offer:
                raise RpcFailure(-32602, f"unknown config option {key!r}")
            self._set(session_id, key, params.get("value"), allowed[key])
            if key == "mode":
                self.send_update(
                    session_id, {"sessionUpdate": "current_mode_update", "currentModeId": settings["mode"]}
                )
            return {"configOptions": self._config(settings)}
        return await super().other_request(method, params)

    def _set(self, session_id: str, key: str, value, allowed: list[str]) -> dict:
        if value not in allowed:
            raise RpcFailure(-32602, f"{key} {value!r} is not one of {allowed}")
        self.sessions[session_id]["settings"][key] = value
        self._save(session_id)
        return {}

    # -- a turn ---------------------------------------------------------------------------------
    async def prompt(self, turn: Turn) -> str:
        d = {name: value for name, value in DIRECTIVE.findall(turn.text)}
        session = self.sessions.setdefault(turn.session_id, {"settings": dict(DEFAULTS), "history": []})
        session["history"].append(["user", turn.text])
        said: list[str] = []

        async def say(text: str) -> None:
            said.append(text)
            await turn.say(text)

        if "mode" in d:
            session["settings"]["mode"] = d["mode"]
            self._mode_changed(turn.session_id)
        if "plan" in d:
            await self._plans(turn, int(d["plan"] or 3))
        if "edit" in d:
            await self._edit(turn, d["edit"])
        if "run" in d:
            await self._run(turn, d["run"] == "fail")
        if "permit-edit" in d or "permit-run" in d:
            choice = await turn.request_permission(
                self._edit_call() if "permit-edit" in d else self._run_call(),
                [
                    {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
                    {"optionId": "always", "name": "Yes, always", "kind": "allow_always"},
                    {"optionId": "no", "name": "No", "kind": "reject_once"},
                    {"optionId": "never", "name": "No, never", "kind": "reject_always"},
                ],
            )
            if choice is None:
                return "cancelled"
            await say(f"permission: {choice}. ")
        if "permit-many" in d:
            calls = [
                turn.request_permission(
                    {"toolCallId": f"call_{i}", "title": f"Write file {i}", "kind": "edit"},
                    [{"optionId": "yes", "name": "Yes", "kind": "allow_once"}],
                )
                for i in range(int(d["permit-many"]))
            ]
            outcomes = await asyncio.gather(*calls)
            await say(
                f"permits: {sum(o is not None for o in outcomes)} chosen, {sum(o is None for o in outcomes)} refused. "
            )
        if "ask" in d:
            reply = await turn.elicit(
                "A few details, please",
                {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "title": "Project name", "minLength": 1},
                        "count": {"type": "integer", "title": "How many", "minimum": 1, "maximum": 10},
                        "colour": {
                            "type": "string",
                            "title": "Colour",
                            "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}],
                        },
                        "confirm": {"type": "boolean", "title": "Go ahead?", "default": True},
                    },
                    "required": ["name", "count"],
                },
            )
            await say(f"elicited: {json.dumps(reply, sort_keys=True)}. ")
        if "ask-url" in d:
            reply = await turn.elicit_url(
                "Log in to the example service", "https://login.example.com/authorize?state=xyz", "login-1"
            )
            if reply.get("action") == "accept":
                self.conn.notify("elicitation/complete", {"elicitationId": "login-1"})
            await say(f"url consent: {reply.get('action')}. ")
        if "ask-url-done" in d:
            _, future = self.conn.start_request(
                "elicitation/create",
                {
                    "sessionId": turn.session_id,
                    "mode": "url",
                    "message": "Log in to the example service",
                    "url": "https://login.example.com/authorize?state=abc",
                    "elicitationId": "login-2",
                },
            )
            while not Path(d["ask-url-done"]).exists():
                await asyncio.sleep(0.05)
            self.conn.notify("elicitation/complete", {"elicitationId": "login-2"})
            await say(f"url elsewhere: {(await future).get('action')}. ")
        if "ask-withdraw" in d:
            request_id, future = self.conn.start_request(
                "elicitation/create",
                {
                    "sessionId": turn.session_id,
                    "mode": "form",
                    "message": "Never mind this",
                    "requestedSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
                },
            )
            await asyncio.sleep(0.3)
            self.conn.cancel_request(request_id)
            try:
                outcome = f"answered {json.dumps(await future)}"
            except RemoteError as exc:
                outcome = f"error {exc.code}"
            await say(f"withdrawn: {outcome}. ")
        if "usage" in d:
            await turn.update(
                {
                    "sessionUpdate": "usage_update",
                    "used": 52000,
                    "size": 200000,
                    "cost": {"amount": 0.42, "currency": "USD"},
                }
            )
        if "title" in d:
            await turn.update({"sessionUpdate": "session_info_update", "title": d["title"]})
        chunks, delay = self.opts.chunks, 0.0
        if "slow" in d:
            chunks, delay = 20, 0.2
        answer = f"done: {DIRECTIVE.sub('', turn.text).strip()}"
        step = max(1, -(-len(answer) // chunks))
        for index in range(0, len(answer), step):
            if index and delay:
                await asyncio.sleep(delay)
            await say(answer[index : index + step])
        session["history"].append(["agent", "".join(said)])
        self._save(turn.session_id)
        return d.get("stop") or "end_turn"

    async def _plans(self, turn: Turn, times: int) -> None:
        for n in range(times):
            if n and self.opts.hold:
                while not (Path(self.opts.hold) / f"plan-{n}").exists():
                    await asyncio.sleep(0.02)
            entries = []
            for i, content in enumerate(PLAN[: max(2, min(len(PLAN), n + 2))]):
                status = "completed" if i < n else ("in_progress" if i == n else "pending")
                entries.append({"content": content, "priority": ("high", "medium", "low", "low")[i], "status": status})
            await turn.plan(entries)

    def _edit_call(self, variant: str = "") -> dict:
        if variant == "big":
            old = "".join(f"line {i}\n" for i in range(300))
            new = "".join(f"line {i}{' changed' if i % 2 else ''}\n" for i in range(300))
        else:
            old, new = OLD, NEW
        diff = {
            "type": "diff",
            "path": "/work/project/notes.py",
            "oldText": None if variant == "new" else old,
            "newText": new,
        }
        return {
            "toolCallId": "call_edit",
            "title": "Edit notes.py",
            "kind": "edit",
            "status": "pending",
            "locations": [{"path": "/work/project/notes.py", "line": 1}],
            "content": [diff],
        }

    def _run_call(self) -> dict:
        return {
            "toolCallId": "call_run",
            "title": "Run pytest -q",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "pytest -q"},
        }

    async def _edit(self, turn: Turn, variant: str) -> None:
        call = self._edit_call(variant)
        await turn.update({"sessionUpdate": "tool_call", **{k: v for k, v in call.items() if k != "content"}})
        await turn.tool_call_update("call_edit", status="in_progress", content=call["content"])
        await turn.tool_call_update("call_edit", status="completed")

    async def _run(self, turn: Turn, fail: bool) -> None:
        await turn.update({"sessionUpdate": "tool_call", **self._run_call()})
        await turn.tool_call_update(
            "call_run",
            status="in_progress",
            content=[{"type": "terminal", "terminalId": "term_1"}],
            _meta={"terminal_info": {"terminal_id": "term_1", "cwd": "/work/project"}},
        )
        for i in range(1, 4):
            await turn.tool_call_update(
                "call_run",
                _meta={
                    "terminal_output": {
                        "terminal_id": "term_1",
                        "data": f"test_{i} ... {'FAILED' if fail and i == 3 else 'ok'}\n",
                    }
                },
            )
        code = 2 if fail else 0
        await turn.tool_call_update(
            "call_run",
            status="failed" if fail else "completed",
            _meta={"terminal_exit": {"terminal_id": "term_1", "exit_code": code, "signal": None}},
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log")
    p.add_argument("--offer", default="modes,config")
    p.add_argument("--load-session", action="store_true")
    p.add_argument("--state")
    p.add_argument("--keep-settings", action="store_true")
    p.add_argument("--early", action="store_true")
    p.add_argument("--slow-set", action="store_true")
    p.add_argument("--chunks", type=int, default=3)
    p.add_argument("--hold")
    run(Coding(p.parse_args()))


if __name__ == "__main__":
    main()
