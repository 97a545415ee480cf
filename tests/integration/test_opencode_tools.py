"""The real OpenCode, as it really behaves, through the bridge on the real Synapse.

OpenCode (npm `opencode-ai`, pinned: test_opencode.OPENCODE_VERSION, installed once into the
user's cache by the `opencode_binary` fixture) works against a scripted OpenAI-compatible model
(`tests/agents/model_server.py`): each turn's model requests are answered from a script of tool
calls and text, so OpenCode writes files, runs commands and keeps a to-do list for real, in a
folder of the test's own, and asks permission for edits and commands (`permission: ask`).

One model server, one bridge and one OpenCode process for the module (a room per test, so a
session per test); the last test restarts the bridge in the middle of a turn.

- a to-do list (`todowrite`) is the turn's checklist; a file written after a permission answered
  by a bare number; a command's last 15 lines and its exit status (OpenCode sends the output as
  text and the code only in rawOutput);
- a rejected edit: the file is not written, the call shows failed, no edit sent twice;
- `!stop` while a command runs: the command is stopped, the answer says so, no edit sent twice;
- the bridge's own `matrix` MCP server: the model calls `matrix_history`, OpenCode runs it
  through `sidekicks mcp`, and the result is this room's history;
- a restart while OpenCode waits for its model (its status saying for how long nothing came):
  the answer is marked interrupted; after the restart the session is loaded (the model sees the
  earlier turn) and nothing is posted twice.

Skipped, with the reason, only when OpenCode is not cached and the npm registry is unreachable.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
import yaml
from bridge_harness import answers_in, start_bridge
from helpers import is_final, open_dm, say
from matrix_helpers import events_in, sync_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
from model_server import ModelServer, Text, Tools  # noqa: E402
from test_opencode import EXAMPLE, OPENCODE_VERSION, cache_folder, opencode_binary, version_of  # noqa: E402,F401

pytestmark = [pytest.mark.thirdparty]

PUPPET = "@sk_opencode:localhost"


@pytest.fixture(scope="session")
def opencode(request) -> Path:
    """OpenCode's binary: the cached one, else installed with npm; skipped only when it is not
    cached and the npm registry cannot be reached (the reason is said)."""
    binary = cache_folder() / "node_modules" / ".bin" / "opencode"
    if version_of(binary) != OPENCODE_VERSION:
        npm = shutil.which("npm")
        if npm is not None:
            try:
                ping = subprocess.run([npm, "ping"], capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                ping = None
            if ping is None or ping.returncode != 0:
                why = "no answer in 60 s" if ping is None else (ping.stderr.strip()[-300:] or "npm ping failed")
                pytest.skip(f"opencode-ai@{OPENCODE_VERSION} is not cached and the npm registry is unreachable ({why})")
    return request.getfixturevalue("opencode_binary")


def opencode_config(url: str) -> str:
    """OpenCode's own config (OPENCODE_CONFIG_CONTENT): the scripted model as its one provider,
    permission asked for edits and commands, nothing fetched."""
    return json.dumps(
        {
            "autoupdate": False,
            "share": "disabled",
            "model": "scripted/coder",
            "enabled_providers": ["scripted"],
            "agent": {"title": {"disable": True}},
            "permission": {"edit": "ask", "bash": "ask"},
            "provider": {
                "scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Scripted model",
                    "options": {"baseURL": url, "apiKey": "none"},
                    "models": {
                        "coder": {
                            "name": "Scripted coder",
                            "tool_call": True,
                            "limit": {"context": 100000, "output": 4096},
                        }
                    },
                }
            },
        }
    )


class Stack:
    def __init__(self, homeserver, folder: Path, binary: Path, model: ModelServer):
        self.homeserver, self.folder, self.model = homeserver, folder, model
        self.home = folder / "home"
        self.work = self.home / "work"
        self.work.mkdir(parents=True)
        env = {
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "npm_config_offline": "true",
            "OPENCODE_CONFIG_CONTENT": opencode_config(model.url),
        }
        for name, sub in (
            ("HOME", ""),
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_DATA_HOME", ".local/share"),
            ("XDG_STATE_HOME", ".local/state"),
            ("XDG_CACHE_HOME", ".cache"),
        ):
            env[name] = str(self.home / sub) if sub else str(self.home)
        # sandboxed as the example says: opencode's folders under its HOME writable (docs/sandbox.md)
        writes = yaml.safe_load(EXAMPLE.read_text())["agents"]["opencode"]["sandbox"]["write"]
        self.agents = {
            "opencode": {
                "title": "OpenCode (scripted model)",
                "command": [str(binary), "acp"],
                "cwd": str(self.work),
                "timeout": 120,
                "env": env,
                "sandbox": {
                    "write": [str(self.home / path[2:]) for path in writes],
                    "network": {"host_ports": [urlsplit(model.url).port]},  # the scripted model's
                },
            }
        }
        self.running = None

    async def start(self):
        self.running = await start_bridge(self.homeserver, self.folder / "bridge", self.agents)
        return self.running


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def stack(homeserver, opencode, tmp_path_factory):
    model = ModelServer()
    await model.start()
    made = Stack(homeserver, tmp_path_factory.mktemp("opencode-tools"), opencode, model)
    try:
        await made.start()
        yield made
    finally:
        if made.running is not None:
            await made.running.stop()
        await model.stop()


# ---- helpers -------------------------------------------------------------------------------------


def messages(owner, room_id) -> list[dict]:
    return answers_in(events_in(owner, room_id), PUPPET)


def answers(owner, room_id) -> list[dict]:
    return [
        m for m in messages(owner, room_id) if m["msgtype"] != "m.notice" and "asks permission" not in m["history"][0]
    ]


def notices(owner, room_id, start: str) -> list[dict]:
    return [m for m in messages(owner, room_id) if m["msgtype"] == "m.notice" and m["body"].startswith(start)]


def questions(owner, room_id) -> list[dict]:
    return [m for m in messages(owner, room_id) if "asks permission" in m["history"][0]]


async def answer_question(owner, room_id: str, number: int, count: int) -> None:
    """Wait for permission question `count` (1-based), then answer it with a bare number."""
    await sync_until(owner, lambda: len(questions(owner, room_id)) >= count, timeout=120)
    await say(owner, room_id, str(number))
    await sync_until(owner, lambda: questions(owner, room_id)[count - 1]["edits"] > 0, timeout=60)  # decided


async def wait_final(owner, room_id: str, count: int = 1, timeout: float = 120) -> list[dict]:
    def done() -> bool:
        found = answers(owner, room_id)
        return len(found) >= count and all(is_final(a) for a in found[:count])

    await sync_until(owner, done, timeout=timeout)
    return answers(owner, room_id)


def no_edit_twice(message: dict) -> None:
    """No two consecutive states of a message are the same (an edit sent twice)."""
    history = message["history"]
    assert all(a != b for a, b in zip(history, history[1:])), history


# ---- the tests -----------------------------------------------------------------------------------


async def test_todo_list_file_written_by_number_and_a_command_tail_with_exit_status(stack, owner):
    hello = stack.work / "hello.py"
    stack.model.script["pelican-write"] = [
        Tools(
            (
                "todowrite",
                {
                    "todos": [
                        {"content": "Write hello.py", "status": "in_progress", "priority": "high"},
                        {"content": "Run it", "status": "pending", "priority": "medium"},
                    ]
                },
            )
        ),
        Tools(("write", {"filePath": str(hello), "content": "print('hello')\nraise SystemExit(3)\n"})),
        Tools(("bash", {"command": "seq 1 40; python3 hello.py", "description": "Run hello.py"})),
        Text("Done: it printed hello and exited with 3."),
    ]
    room_id = await open_dm(owner, PUPPET)
    await say(owner, room_id, "pelican-write: write hello.py and run it")
    await answer_question(owner, room_id, 1, count=1)  # the write: allow once
    await answer_question(owner, room_id, 1, count=2)  # the command: allow once
    [answer] = await wait_final(owner, room_id)
    assert answer["body"] == "Done: it printed hello and exited with 3."
    assert hello.read_text() == "print('hello')\nraise SystemExit(3)\n"

    # the to-do list is the turn's checklist, not a tool call with its JSON
    [checklist] = notices(owner, room_id, "📋")
    assert checklist["body"] == "📋 To-do list (0/2 done)\n🔄 Write hello.py · high priority\n⬜ Run it"
    assert not notices(owner, room_id, "🔧"), notices(owner, room_id, "🔧")
    # the write's permission showed the diff; the command's, the command
    first, second = questions(owner, room_id)[:2]
    assert "+print('hello')" in first["history"][0] and "1. ✅ Allow once" in first["history"][0]
    assert "seq 1 40; python3 hello.py" in second["history"][0]
    # the command: its last 15 lines (of 41) and its exit status, which only rawOutput carried
    await sync_until(
        owner,
        lambda: notices(owner, room_id, "▶️") and notices(owner, room_id, "▶️")[0]["body"].endswith("❌ exit code 3"),
    )
    [command] = notices(owner, room_id, "▶️")
    lines = command["body"].split("\n")
    assert lines[0] == "▶️ seq 1 40; python3 hello.py — ✅ done", lines
    assert lines[-19:] == [
        "… 26 earlier lines",
        "```",
        *[str(n) for n in range(27, 41)],
        "hello",
        "```",
        "❌ exit code 3",
    ], lines
    [written] = notices(owner, room_id, "✏️")
    assert written["body"].split("\n")[0].endswith("— ✅ done"), written["body"]
    for message in messages(owner, room_id):
        no_edit_twice(message)


async def test_a_rejected_edit_is_not_written_and_shows_failed(stack, owner):
    refused = stack.work / "refused.py"
    stack.model.script["pelican-reject"] = [
        Tools(("write", {"filePath": str(refused), "content": "x = 1\n"})),
        Text("I will leave it."),
    ]
    room_id = await open_dm(owner, PUPPET)
    await say(owner, room_id, "pelican-reject: write refused.py")
    await answer_question(owner, room_id, 3, count=1)  # ❌ Reject
    await wait_final(owner, room_id)
    await stack.running.idle()
    assert not refused.exists()
    await sync_until(
        owner,
        lambda: notices(owner, room_id, "✏️") and "❌ failed" in notices(owner, room_id, "✏️")[0]["body"].split("\n")[0],
    )
    [call] = notices(owner, room_id, "✏️")
    assert "rejected" in call["body"].lower(), call["body"]
    [question] = questions(owner, room_id)
    assert "Reject" in question["body"].split("\n")[-1], question["body"]
    for message in messages(owner, room_id):
        no_edit_twice(message)


async def test_stop_while_a_command_runs(stack, owner):
    never = stack.work / "never.txt"
    stack.model.script["pelican-stop"] = [
        Tools(("bash", {"command": "echo started; sleep 60; touch never.txt", "description": "Wait a minute"})),
        Text("Finished waiting."),
    ]
    room_id = await open_dm(owner, PUPPET)
    await say(owner, room_id, "pelican-stop: wait a minute")
    await answer_question(owner, room_id, 1, count=1)
    # the command runs (its first output shown), then the owner stops the turn
    await sync_until(
        owner,
        lambda: notices(owner, room_id, "▶️") and "started" in notices(owner, room_id, "▶️")[0]["body"],
        timeout=120,
    )
    await say(owner, room_id, "!stop")
    [answer] = await wait_final(owner, room_id)
    assert answer["body"].endswith("⏹ stopped"), answer["body"]
    await stack.running.idle()
    await sync_until(owner, lambda: "🔄 running" not in notices(owner, room_id, "▶️")[0]["body"].split("\n")[0])
    assert not never.exists()  # the command was stopped, not left to finish
    for message in messages(owner, room_id):
        no_edit_twice(message)


async def test_opencode_calls_the_bridges_matrix_history_tool(stack, owner):
    """OpenCode starts the bridge's `matrix` MCP server from the mcpServers of its session (stdio,
    `sidekicks mcp`) and its model calls `history` (OpenCode names it matrix_history): the result
    is this room's stored messages, and no other room's."""
    stack.model.script["pelican-recall"] = [Text("Noted: the secret word is marmalade.")]
    stack.model.script["pelican-history"] = [Tools(("matrix_history", {"limit": 10})), Text("I read the history.")]
    room_id = await open_dm(owner, PUPPET)
    other = await open_dm(owner, PUPPET)
    await say(owner, other, "pelican-recall: the other room's word is quince")
    await wait_final(owner, other)
    await say(owner, room_id, "pelican-recall: remember marmalade")
    await wait_final(owner, room_id)
    await say(owner, room_id, "pelican-history: what did we say?")
    await wait_final(owner, room_id, count=2, timeout=180)
    offered = {
        t.get("function", {}).get("name")
        for r in stack.model.calls_for("pelican-history")
        for t in r.get("tools") or []
    }
    assert "matrix_history" in offered, sorted(n for n in offered if n)
    calls = stack.model.calls_for("pelican-history")
    results = [m for r in calls for m in r.get("messages") or [] if m.get("role") == "tool"]
    assert results, [r.get("messages") for r in calls]
    text = json.dumps(results[-1].get("content"))
    assert "remember marmalade" in text and "Noted: the secret word is marmalade." in text
    assert "quince" not in text
    assert answers(owner, room_id)[-1]["body"] == "I read the history."
    await stack.running.idle()


async def test_a_restart_while_opencode_waits_for_its_model(stack, monkeypatch, owner):
    # OpenCode retrying its model for minutes left "getting ready" alone: the status now says
    # for how long nothing came (30 s in use; 1 s here)
    from bridge.channels.turns import silence

    monkeypatch.setattr(silence, "SILENT_AFTER", 1.0)
    release = asyncio.Event()
    stack.model.script["pelican-first"] = [Text("First answer.", hold=release)]
    stack.model.script["pelican-second"] = [Text("Second answer.")]
    try:
        room_id = await open_dm(owner, PUPPET)
        await say(owner, room_id, "pelican-first: answer once")
        await sync_until(
            owner,
            lambda: (
                stack.model.holding == 1
                and answers(owner, room_id)
                and answers(owner, room_id)[0]["body"].startswith("⏳ still working, nothing received for ")
                and " s — `!stop` to cancel" in answers(owner, room_id)[0]["body"]
            ),
            timeout=120,
        )
        await stack.running.stop()  # the bridge goes in the middle of the turn
        release.set()
        [cut] = answers(owner, room_id)
        await sync_until(owner, lambda: "interrupted" in answers(owner, room_id)[0]["body"])
        await stack.start()
        await say(owner, room_id, "pelican-second: and again")
        [_, second] = await wait_final(owner, room_id, count=2)
        assert second["body"] == "Second answer."
        # the session was loaded, not opened anew: the model sees the first turn in the second's
        [asked] = stack.model.calls_for("pelican-second")
        assert "pelican-first" in json.dumps(asked["messages"])
        await stack.running.idle()
        # nothing of the first turn posted again: the interrupted answer and the new one, only
        assert [a["event_id"] for a in answers(owner, room_id)] == [cut["event_id"], second["event_id"]]
        assert not [
            m for m in messages(owner, room_id) if m["msgtype"] == "m.notice" and "stopped unexpectedly" in m["body"]
        ]
    finally:
        release.set()
