"""A scripted ACP agent for tests: `python tests/agents/scripted_agent.py [options]`.

A real ACP agent over stdio (built on acp.agent_kit) whose behaviour is chosen
by command-line options and, per prompt, by directives inside the prompt text.

Options
  --log FILE            append every JSON-RPC message received, one JSON per line, and
                        {"scripted": "prompt ended", "sessionId": …, "stopReason": …} when a
                        prompt's turn is over (cancelled ones included), before its reply
  --name N, --version V, --title T     agentInfo (default scripted / 1.0)
  --answer TEXT         the answer (default: "echo: " + prompt text)
  --echo-last-line      answer "echo: " + the prompt's last line only (its context left out)
  --answer-size N       answer with N generated characters (lines of text)
  --chunks N            split the answer into N agent_message_chunk updates (default 1)
  --delay S             seconds between chunks (default 0)
  --thoughts            an agent_thought_chunk before the answer
  --tool-call           a tool_call, then tool_call_updates (in_progress, completed)
  --tool-update-only    a tool_call_update for a tool call never announced
  --plan                a plan update
  --commands SPEC       "name:description[:hint],name2:desc2": available_commands_update
                        right after session/new, BEFORE its reply
  --commands-later SPEC another available_commands_update 0.3 s after session/new
                        was answered (outside any prompt)
  --load-session        announce loadSession; session/load replays the session's
                        history (user_message_chunk / agent_message_chunk) before
                        replying; an unknown session id gets error -32002
  --state DIR           keep session histories in DIR so session/load works across
                        processes (default: in memory, this process only); the session
                        methods below keep their sessions' cwd, title and last use there too
  --session-list        announce sessionCapabilities.list; session/list returns the known
                        sessions of the given cwd (all without one), last used first, each
                        {sessionId, cwd, title, updatedAt}
  --list-page N         session/list gives N sessions a page, with a nextCursor (default: all)
  --session-resume      announce sessionCapabilities.resume; session/resume goes on with a
                        known session without replaying anything (unknown: error -32002)
  --session-fork        announce sessionCapabilities.fork; session/fork makes a new session
                        with a copy of the history (answers then say which session they are in
                        with [[session]])
  --session-delete      announce sessionCapabilities.delete; session/delete removes the session
                        from session/list and its history
  --session-close       announce sessionCapabilities.close; session/close forgets the session
                        as active (it can still be resumed or loaded)
  --permission          ask session/request_permission (allow_once / reject_once)
                        before answering; answer "allowed" or "rejected", or stop
                        with stopReason "cancelled" if the outcome is cancelled
  --auth                announce an auth method and refuse session/new with -32000
  --login-file FILE     with --auth: refuse session/new only until FILE exists (logged in)
  --auth-type KIND      with --auth: the method's type, `terminal` (its `args`: ["--login"]) or
                        `agent` (`authenticate` with it writes the --login-file)
  --auth-hold FILE      with --auth-type agent: `authenticate` waits until FILE exists (the
                        owner's part of the login), then logs in
  --fail-session DATA   write two lines to stderr, then refuse session/new with -32603
                        "Internal error" and DATA as the error's data (as Claude Code's
                        adapter does when it cannot run)
  --prepare             announce `_sidekicks/prepare` (agentCapabilities._meta) and answer it
                        with {"outcome": "started"} (--log records what it was handed)
  --steering            announce `_meta.steering.supported` in initialize's answer and answer
                        `_session/steering` as the Claude Code and Codex adapters do: with a
                        prompt running in that session {"outcome": "injected"} (the running
                        answer then ends with "steered in: TEXT" for each text), else
                        {"outcome": "promptRequired", "reason": "noRunningTurn"}
  --steering-idle       with --steering: answer every `_session/steering` with promptRequired
  --prompt-caps LIST    promptCapabilities to announce, e.g. "image,audio,embeddedContext"
  --modes SPEC          "id:Name,id2:Name2": session/new returns these modes (the first
                        is current)
  --config-options JSON session/new returns this configOptions list, as given
  --models SPEC         "id:Name,id2:Name2": session/new returns these (unstable) models
  --crash-at-start      write to stderr and exit 3 before reading anything
  --crash-mid-answer    after the first chunk: write to stderr, exit with code 3
  --hang                after the first chunk: never answer (ignores cancel and
                        stdin closing; only a signal ends it)
  --hold FILE           after the first chunk: wait until FILE exists, then go on (the
                        test decides when an answer may end; session/cancel still ends it)
  --big-line MIB        one chunk of MIB MiB of text (a single huge JSON line)
  --stderr-flood MIB    write MIB MiB to stderr before answering
  --garbage             write a non-JSON line on stdout before answering
  --reply-image FILE    answer "Here is the image:", then an image block of FILE (its bytes,
                        MIME type from its name), then "That is all."
  --reply-resource FILE answer with an embedded resource (text) of FILE after a line of text
  --additional-directories  announce sessionCapabilities.additionalDirectories (session/new
                        then may carry them; --log shows what it got)
  (--prompt-caps image,audio,embeddedContext announces what the agent takes; --log records
  every session/prompt with its content blocks)

Directives inside the prompt text (apply to that prompt only)
  [[slow]]          20 chunks, 0.2 s apart (time to cancel)
  [[crash]]         crash mid-answer (exit 3)         [[hang]]   hang mid-answer
  [[hold:FILE]]     after the first chunk, wait until FILE exists (see --hold)
  [[permission]]    ask permission first              [[thoughts]] [[tool]] [[plan]]
  [[size:N]]        answer with N characters          [[chunks:N]] [[delay:S]]
  [[garbage]]       a garbage line first              [[big:MIB]]  [[stderr:MIB]]
  [[env:NAME]]      answer with the value of environment variable NAME
  [[cwd]]           answer with the working directory
  [[session-cwd]]   answer with the session's working directory (session/new's `cwd`)
  [[write:NAME]]    write the file NAME (no folders) in the session's working directory,
                    its text naming the session; answer "wrote <its path>"
  [[answer:TEXT]]   answer with TEXT
  [[session]]       answer with the session id and how many prompts it has had
  [[title:TEXT]]    send a session_info_update with this title before answering
  [[cost:AMOUNT]]   add AMOUNT (USD) to the session's cost and send a usage_update with the
                    session's cumulative cost (used 1000 of 200000 tokens) before answering
  [[commands:SPEC]] send available_commands_update during the prompt
  [[image:FILE]]    answer as --reply-image FILE
  [[link:FILE]]     answer "Here is the file:", then a resource_link to file://FILE
  [[embed:FILE]]    answer "Here is the file:", then FILE as an embedded resource (its text)
  [[blob:FILE]]     the same with the bytes as a blob (base64)

session/cancel stops the answer at once; the prompt returns stopReason "cancelled".
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import mimetypes
import os
import re
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `acp`

from acp.agent_kit import AgentBase, RpcFailure, Turn, run  # noqa: E402
from acp.framing import AUTH_REQUIRED  # noqa: E402

DIRECTIVE = re.compile(r"\[\[([a-z-]+)(?::([^\]]*))?\]\]")


def parse_commands(spec: str) -> list[dict]:
    commands = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rest = item.partition(":")
        description, _, hint = rest.partition(":")
        commands.append({"name": name, "description": description, "input": {"hint": hint} if hint else None})
    return commands


def pairs(spec: str) -> list[tuple[str, str]]:
    """ "id:Name,id2:Name2" -> [(id, Name), (id2, Name2)] (a missing name is empty)."""
    return [tuple(item.strip().partition(":")[::2]) for item in spec.split(",") if item.strip()]


def _mime(path: str) -> str:
    return mimetypes.guess_type(path)[0] or "application/octet-stream"


def generated_text(size: int) -> str:
    line = "The quick brown fox jumps over the lazy dog. 0123456789\n"
    return (line * (size // len(line) + 1))[:size]


def split(text: str, parts: int) -> list[str]:
    parts = max(1, min(parts, len(text) or 1))
    step = -(-len(text) // parts) if text else 0
    return [text[i : i + step] for i in range(0, len(text), step)] if text else [""]


class Scripted(AgentBase):
    def __init__(self, opts: argparse.Namespace):
        super().__init__()
        self.opts = opts
        self.name, self.version, self.title = opts.name, opts.version, opts.title
        self.load_session = opts.load_session
        if opts.auth:
            method = {"id": "scripted-login", "name": "Scripted login", "description": "Run `scripted login` first"}
            if opts.auth_type == "terminal":
                method.update(type="terminal", args=["--login"])
            elif opts.auth_type == "agent":
                method.update(type="agent")
            self.auth_methods = [method]
        if opts.prompt_caps:
            self.prompt_capabilities = {cap: True for cap in opts.prompt_caps.split(",") if cap}
        self.history: dict[str, list[list[str]]] = {}
        self.cwds: dict[str, str] = {}  # the working directory each session was opened (or loaded) in
        self.active: set[str] = set()  # sessions opened, loaded, resumed or forked, not closed
        self.steered: dict[str, list[str]] = {}  # session with a prompt running → texts steered in

    async def initialize(self, params: dict) -> dict:
        result = await super().initialize(params)
        o = self.opts
        announced = {
            name: {}
            for name, on in (
                ("list", o.session_list),
                ("resume", o.session_resume),
                ("fork", o.session_fork),
                ("close", o.session_close),
                ("delete", o.session_delete),
                ("additionalDirectories", o.additional_directories),
            )
            if on
        }
        if announced:
            result["agentCapabilities"]["sessionCapabilities"] = announced
        if o.prepare:
            result["agentCapabilities"]["_meta"] = {"sidekicks": {"prepare": "_sidekicks/prepare"}}
        if o.steering:
            result["_meta"] = {"steering": {"supported": True}}
        return result

    # -- what session/list tells of each session: cwd, title, last use -------
    def _meta_path(self) -> Path | None:
        return Path(self.opts.state) / "sessions.meta" if self.opts.state else None

    def _metas(self) -> dict[str, dict]:
        if not hasattr(self, "_meta"):
            path = self._meta_path()
            self._meta = json.loads(path.read_text()) if path and path.exists() else {}
        return self._meta

    def _touch(self, session_id: str, **fields) -> None:
        import datetime

        meta = self._metas().setdefault(session_id, {"cwd": "", "title": None})
        meta.update(fields, updatedAt=datetime.datetime.now(datetime.UTC).isoformat())
        if path := self._meta_path():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self._meta))

    def _known(self, session_id: str) -> list[list[str]]:
        entries = self._history(session_id)
        if entries is None:
            raise RpcFailure(-32002, f"session not found: {session_id}")
        return entries

    # -- persistence of histories, for session/load across processes --------
    def _path(self, session_id: str) -> Path | None:
        return Path(self.opts.state) / f"{session_id}.json" if self.opts.state else None

    def _history(self, session_id: str) -> list[list[str]] | None:
        if session_id not in self.history and (path := self._path(session_id)) and path.exists():
            self.history[session_id] = json.loads(path.read_text())
        return self.history.get(session_id)

    def _remember(self, session_id: str, role: str, text: str) -> None:
        entries = self.history.setdefault(session_id, [])
        entries.append([role, text])
        if path := self._path(session_id):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(entries))

    # -- protocol hooks -------------------------------------------------------
    def received(self, message: dict) -> None:
        self.log(message)

    async def _handle_request(self, method: str, params: dict):
        result = await super()._handle_request(method, params)
        if method == "session/new":
            result.update(self.session_setup())
        return result

    async def other_request(self, method: str, params: dict):
        o, session_id = self.opts, params.get("sessionId", "")
        if method == "_sidekicks/prepare" and o.prepare:
            return {"outcome": "started"}
        if method == "_session/steering" and o.steering:
            if session_id not in self.steered or o.steering_idle:
                return {"outcome": "promptRequired", "reason": "noRunningTurn"}
            self.steered[session_id] += [b.get("text", "") for b in params.get("prompt") or [] if isinstance(b, dict)]
            return {"outcome": "injected"}
        if method == "session/list" and o.session_list:
            return self._list(params.get("cwd"), params.get("cursor"))
        if method == "session/resume" and o.session_resume:
            self._known(session_id)
            self.active.add(session_id)
            self._touch(session_id, cwd=params.get("cwd", ""))
            return self.session_setup()
        if method == "session/fork" and o.session_fork:
            entries = [list(entry) for entry in self._known(session_id)]
            forked = "sess_" + uuid.uuid4().hex[:16]
            self.history[forked] = []
            for role, text in entries:
                self._remember(forked, role, text)
            if not entries and (path := self._path(forked)):
                path.write_text("[]")
            self.active.add(forked)
            title = self._metas().get(session_id, {}).get("title")
            self._touch(forked, cwd=params.get("cwd", ""), title=f"fork of {title}" if title else None)
            return {"sessionId": forked, **self.session_setup()}
        if method == "session/delete" and o.session_delete:
            self._known(session_id)
            self.active.discard(session_id)
            self.history.pop(session_id, None)
            self._metas().pop(session_id, None)
            if path := self._meta_path():
                path.write_text(json.dumps(self._meta))
            if (path := self._path(session_id)) and path.exists():
                path.unlink()
            return {}
        if method == "session/close" and o.session_close:
            self._known(session_id)
            self.active.discard(session_id)
            return {}
        return await super().other_request(method, params)

    def _list(self, cwd: str | None, cursor: str | None) -> dict:
        metas = self._metas()
        known = [(sid, meta) for sid, meta in metas.items() if not cwd or meta.get("cwd") == cwd]
        known.sort(key=lambda item: item[1].get("updatedAt") or "", reverse=True)
        start = int(cursor) if cursor and cursor.isdigit() else 0
        size = self.opts.list_page or len(known) or 1
        page = known[start : start + size]
        result: dict = {
            "sessions": [
                {
                    "sessionId": sid,
                    "cwd": meta.get("cwd") or "",
                    "title": meta.get("title"),
                    "updatedAt": meta.get("updatedAt"),
                }
                for sid, meta in page
            ]
        }
        if start + size < len(known):
            result["nextCursor"] = str(start + size)
        return result

    def session_setup(self) -> dict:
        """What session/new returns beside the session id (--modes, --config-options, --models)."""
        o, extra = self.opts, {}
        if o.modes:
            modes = [{"id": i, "name": n or i} for i, n in pairs(o.modes)]
            extra["modes"] = {"currentModeId": modes[0]["id"], "availableModes": modes}
        if o.config_options:
            extra["configOptions"] = json.loads(o.config_options)
        if o.models:
            models = [{"modelId": i, "name": n or i} for i, n in pairs(o.models)]
            extra["models"] = {"currentModelId": models[0]["modelId"], "availableModels": models}
        return extra

    async def authenticate(self, method_id: str) -> None:
        if not (self.opts.auth_type == "agent" and self.opts.login_file and method_id == "scripted-login"):
            await super().authenticate(method_id)
        if self.opts.auth_hold:
            await hold(Path(self.opts.auth_hold))
        Path(self.opts.login_file).write_text("logged in by authenticate\n")

    async def new_session(self, cwd: str, params: dict) -> str:
        if self.opts.auth and not (self.opts.login_file and Path(self.opts.login_file).exists()):
            raise RpcFailure(AUTH_REQUIRED, "Authentication required")
        if self.opts.fail_session is not None:
            os.write(
                2, b"scripted_agent: starting a session\nscripted_agent: --fail-session: cannot run here (on purpose)\n"
            )
            raise RpcFailure(-32603, "Internal error", self.opts.fail_session)
        session_id = await super().new_session(cwd, params)
        self.cwds[session_id] = cwd
        self.history[session_id] = []
        self.active.add(session_id)
        self._touch(session_id, cwd=cwd)
        if path := self._path(session_id):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("[]")
        if self.opts.commands:
            self.send_commands(session_id, parse_commands(self.opts.commands))
        if self.opts.commands_later:
            asyncio.get_running_loop().call_later(
                0.3, self.send_commands, session_id, parse_commands(self.opts.commands_later)
            )
        return session_id

    async def load(self, session_id: str, cwd: str, params: dict) -> None:
        if not self.load_session:
            raise RpcFailure(-32601, "session/load not supported")
        entries = self._history(session_id)
        if entries is None:
            raise RpcFailure(-32002, f"session not found: {session_id}")
        self.cwds[session_id] = cwd
        self.active.add(session_id)
        self._touch(session_id, cwd=cwd)
        for role, text in entries:
            kind = "user_message_chunk" if role == "user" else "agent_message_chunk"
            self.send_update(session_id, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})
        if self.opts.commands:
            self.send_commands(session_id, parse_commands(self.opts.commands))

    async def prompt(self, turn: Turn) -> str:
        stop_reason = "cancelled"  # what the kit answers when the task is cancelled
        self.steered[turn.session_id] = []
        try:
            stop_reason = await self._prompt(turn)
            for text in self.steered.get(turn.session_id, []):  # --steering: what came in meanwhile
                await turn.say(f"\n\nsteered in: {text}")
            return stop_reason
        finally:
            self.steered.pop(turn.session_id, None)
            self.log({"scripted": "prompt ended", "sessionId": turn.session_id, "stopReason": stop_reason})

    def log(self, record: dict) -> None:
        if self.opts.log:
            with open(self.opts.log, "a", encoding="utf-8") as log:
                log.write(json.dumps(record) + "\n")

    async def _prompt(self, turn: Turn) -> str:
        o = self.opts
        d = {name: value for name, value in DIRECTIVE.findall(turn.text)}
        self._history(turn.session_id)
        self._remember(turn.session_id, "user", turn.text)
        if "title" in d:
            self._touch(turn.session_id, title=d["title"])
            await turn.update({"sessionUpdate": "session_info_update", "title": d["title"]})
        elif turn.session_id in self._metas() or o.session_list:
            self._touch(turn.session_id)

        if "cost" in d:
            costs = self.__dict__.setdefault("costs", {})
            costs[turn.session_id] = costs.get(turn.session_id, 0.0) + float(d["cost"])
            await turn.update(
                {
                    "sessionUpdate": "usage_update",
                    "used": 1000,
                    "size": 200000,
                    "cost": {"amount": costs[turn.session_id], "currency": "USD"},
                }
            )
        if "stderr" in d or o.stderr_flood:
            flood(float(d.get("stderr") or o.stderr_flood))
        if "garbage" in d or o.garbage:
            self.conn.send_raw(b"this is not JSON {\n")
        if "commands" in d:
            self.send_commands(turn.session_id, parse_commands(d["commands"]))
        if "thoughts" in d or o.thoughts:
            await turn.thought("Let me think about that.")
        if "plan" in d or o.plan:
            await turn.plan(
                [
                    {"content": "Read the question", "priority": "high", "status": "completed"},
                    {"content": "Write the answer", "priority": "medium", "status": "in_progress"},
                ]
            )
        if "tool" in d or o.tool_call:
            await turn.tool_call("call_1", "Read notes.txt", kind="read", status="pending")
            await turn.tool_call_update("call_1", status="in_progress")
            await turn.tool_call_update(
                "call_1",
                status="completed",
                content=[{"type": "content", "content": {"type": "text", "text": "notes"}}],
            )
        if o.tool_update_only:
            await turn.tool_call_update("call_ghost", status="completed", title="Ghost tool")

        if "permission" in d or o.permission:
            choice = await turn.request_permission(
                {"toolCallId": "call_perm", "title": "Write notes.txt", "kind": "edit", "status": "pending"},
                [
                    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
                    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
                ],
            )
            if choice is None:
                return "cancelled"
            answer = "allowed" if choice == "allow_once" else "rejected"
            await turn.say(answer)
            self._remember(turn.session_id, "agent", answer)
            return "end_turn"

        image = d.get("image") or o.reply_image
        if image:
            await self._reply_media(
                turn,
                [
                    {
                        "type": "image",
                        "mimeType": _mime(image),
                        "data": base64.b64encode(Path(image).read_bytes()).decode(),
                    }
                ],
            )
            return "end_turn"
        for kind in ("link", "embed", "blob"):
            if kind in d:
                await self._reply_media(turn, [file_block(kind, Path(d[kind]))])
                return "end_turn"
        if o.reply_resource:
            path = Path(o.reply_resource)
            await self._reply_media(
                turn,
                [
                    {
                        "type": "resource",
                        "resource": {
                            "uri": path.resolve().as_uri(),
                            "mimeType": _mime(str(path)),
                            "text": path.read_text(),
                        },
                    }
                ],
            )
            return "end_turn"

        if "write" in d:
            name = Path(d["write"]).name  # no folders: inside the session's directory only
            path = Path(self.cwds.get(turn.session_id) or os.getcwd()) / name
            path.write_text(f"written in session {turn.session_id}\n")
            d = {**d, "answer": f"wrote {path}"}
        if "session-cwd" in d:
            d = {**d, "answer": self.cwds.get(turn.session_id, "")}
        answer = self._answer(turn.text, d, turn.session_id)
        chunks, delay = int(d.get("chunks") or o.chunks), float(d.get("delay") or o.delay)
        if "slow" in d:
            chunks, delay = 20, 0.2
        big = float(d.get("big") or o.big_line or 0)
        pieces = [generated_text(int(big * 1024 * 1024))] if big else split(answer, chunks)
        for index, piece in enumerate(pieces):
            if index and delay:
                await asyncio.sleep(delay)
            await turn.say(piece)
            if index == 0 and ("crash" in d or o.crash_mid_answer):
                os.write(2, b"scripted_agent: crashing mid-answer on purpose\n")
                os._exit(3)
            if index == 0 and ("hang" in d or o.hang):
                await hang()
            if index == 0 and (d.get("hold") or o.hold):
                await hold(Path(d.get("hold") or o.hold))
        self._remember(turn.session_id, "agent", "".join(pieces))
        return "end_turn"

    async def _reply_media(self, turn: Turn, blocks: list[dict]) -> None:
        await turn.say("Here is the image:" if blocks[0]["type"] == "image" else "Here is the file:")
        for block in blocks:
            await turn.update({"sessionUpdate": "agent_message_chunk", "content": block})
        if blocks[0]["type"] == "image":
            await turn.say("That is all.")
        self._remember(turn.session_id, "agent", "(media)")

    def _answer(self, text: str, d: dict[str, str], session_id: str = "") -> str:
        if "env" in d:
            return os.environ.get(d["env"], "<unset>")
        if "cwd" in d:
            return os.getcwd()
        if "answer" in d:
            return d["answer"]
        if "session" in d:
            prompts = sum(1 for role, _ in self.history.get(session_id, []) if role == "user")
            return f"session {session_id}, prompt {prompts}"
        if "size" in d or self.opts.answer_size:
            return generated_text(int(d.get("size") or self.opts.answer_size))
        if self.opts.answer is not None:
            return self.opts.answer
        if self.opts.echo_last_line:
            return "echo: " + (text.splitlines() or [""])[-1]
        return "echo: " + text


def file_block(kind: str, path: Path) -> dict:
    """A file as an agent hands it over: a link to it (`link`), or its content embedded as text
    (`embed`) or as a blob (`blob`)."""
    uri, mime = path.resolve().as_uri(), _mime(str(path))
    if kind == "link":
        return {"type": "resource_link", "uri": uri, "name": path.name, "mimeType": mime}
    if kind == "embed":
        return {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "text": path.read_text()}}
    blob = base64.b64encode(path.read_bytes()).decode()
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "blob": blob}}


async def hang() -> None:
    """Never answer, and ignore session/cancel (the kit cancels the task).

    The event loop keeps running, so --log still records what arrives; only
    SIGTERM/SIGKILL ends the process.
    """
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass


async def hold(release: Path) -> None:
    """Wait until the file `release` exists (the test creates it); a cancel ends the wait."""
    while not release.exists():
        await asyncio.sleep(0.02)


def flood(mib: float) -> None:
    block = b"E" * 1023 + b"\n"
    for _ in range(int(mib * 1024)):
        os.write(2, block)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log")
    p.add_argument("--name", default="scripted")
    p.add_argument("--version", default="1.0")
    p.add_argument("--title", default=None)
    p.add_argument("--answer")
    p.add_argument("--echo-last-line", action="store_true")
    p.add_argument("--answer-size", type=int, default=0)
    p.add_argument("--chunks", type=int, default=1)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--thoughts", action="store_true")
    p.add_argument("--tool-call", action="store_true")
    p.add_argument("--tool-update-only", action="store_true")
    p.add_argument("--plan", action="store_true")
    p.add_argument("--commands")
    p.add_argument("--commands-later")
    p.add_argument("--load-session", action="store_true")
    p.add_argument("--state")
    p.add_argument("--session-list", action="store_true")
    p.add_argument("--list-page", type=int, default=0)
    p.add_argument("--session-resume", action="store_true")
    p.add_argument("--session-fork", action="store_true")
    p.add_argument("--session-close", action="store_true")
    p.add_argument("--session-delete", action="store_true")
    p.add_argument("--permission", action="store_true")
    p.add_argument("--auth", action="store_true")
    p.add_argument("--login-file")
    p.add_argument("--auth-type")
    p.add_argument("--auth-hold")
    p.add_argument("--fail-session")
    p.add_argument("--prompt-caps")
    p.add_argument("--prepare", action="store_true")
    p.add_argument("--steering", action="store_true")
    p.add_argument("--steering-idle", action="store_true")
    p.add_argument("--modes")
    p.add_argument("--config-options")
    p.add_argument("--models")
    p.add_argument("--crash-at-start", action="store_true")
    p.add_argument("--crash-mid-answer", action="store_true")
    p.add_argument("--hang", action="store_true")
    p.add_argument("--hold")
    p.add_argument("--big-line", type=float, default=0)
    p.add_argument("--stderr-flood", type=float, default=0)
    p.add_argument("--garbage", action="store_true")
    p.add_argument("--reply-image")
    p.add_argument("--reply-resource")
    p.add_argument("--additional-directories", action="store_true")
    opts = p.parse_args()
    if opts.crash_at_start:
        os.write(2, b"scripted_agent: crashing at start on purpose\n")
        sys.exit(3)
    run(Scripted(opts))


if __name__ == "__main__":
    main()
