"""An ACP client attached to the bridge's conversations (docs/sessions.md "Attach an editor"): a
scripted client (tests/acp_client.py) starts `sidekicks acp` as its agent and speaks ACP to it,
as Zed would; the owner's Matrix client sees the same conversation.

What is shown: session/list and session/load (the history equals the room's); a prompt from the
client answered once, in the client and in the room; a message typed in Matrix seen by the
attached client with its answer; session/new as a thread in the agent's DM; a permission asked
in both places, answered in one, withdrawn in the other; session/cancel; two clients at once;
the bridge restarted (the client's process ends, a new one loads it all, a prompt written down
and not taken is answered once); and the socket out of an agent sandbox's reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket as stdlib_socket
import sys
from pathlib import Path

import pytest
from acp_client import AcpClient
from bridge_harness import agent, answers_in, wait_until
from helpers import ALICE, is_final, open_dm, prompts, say, stored_channel
from matrix_helpers import events_in, sync_until

import config as configuration
from bridge.attach import wire
from bridge.attach.service import PENDING

PRYING = Path(__file__).resolve().parents[1] / "agents" / "prying_agent.py"
CODING = Path(__file__).resolve().parents[1] / "agents" / "coding_agent.py"


async def attached_bridge(bridge_factory, tmp_path: Path, *options: str, **top):
    """A bridge with alice (the scripted agent, logging its prompts) whose data folder is where
    `sidekicks acp -c CONFIG` finds it with XDG_CONFIG_HOME=`xdg`: (running, xdg, log)."""
    xdg, folder, log = tmp_path / "xdg", tmp_path / "bridge0", tmp_path / "alice.jsonl"
    data = xdg / "sidekicks" / "data" / configuration.config_hash(folder / "config.yaml")
    running = await bridge_factory(
        {"alice": agent("--log", str(log), *options, title="Alice")}, folder=folder, data_dir=data, **top
    )
    return running, xdg, log


async def attach(running, xdg: Path, name: str = "Zed") -> AcpClient:
    client = await AcpClient.start(running.config.path, xdg, agent="alice", name=name)
    await client.initialize()
    return client


def notices_quoting(owner, room_id: str, text: str) -> list[dict]:
    return [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and e["content"].get("body") == f"💻 from Zed: {text}"
    ]


async def hold_quotes(running) -> asyncio.Event:
    """The bridge's quotes of client prompts are sent once the returned event is set (a
    homeserver slow to take them)."""
    service, released = running.bridge.attach, asyncio.Event()
    send_quote = service._send_quote

    async def held(*args):
        await released.wait()
        return await send_quote(*args)

    service._send_quote = held
    return released


def quoted_first(owner, room_id: str, text: str) -> bool:
    """The room shows the client's prompt (its quote) before any message of its answer."""
    bodies = [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)]
    return bodies.index(f"💻 from Zed: {text}") < bodies.index(f"echo: {text}")


def final_answers(owner, room_id: str) -> list[str]:
    return [
        a["body"] for a in answers_in(events_in(owner, room_id), ALICE) if a["msgtype"] != "m.notice" and is_final(a)
    ]


async def test_a_client_lists_loads_and_prompts_one_conversation_with_the_room(bridge_factory, tmp_path, owner):
    running, xdg, log = await attached_bridge(bridge_factory, tmp_path, "--echo-last-line")
    room = await open_dm(owner)
    await say(owner, room, "hello from the phone")
    await sync_until(owner, lambda: "echo: hello from the phone" in final_answers(owner, room))
    await running.idle()
    client = await attach(running, xdg)
    try:
        channel = running.store.channel_by_room(room)
        session = wire.session_id(channel.id, "")
        listed = (await client.call("session/list", {}))["sessions"]
        assert [s["sessionId"] for s in listed] == [session]
        assert listed[0]["title"] == "direct chat with alice: hello from the phone" and listed[0]["updatedAt"]
        assert (await client.call("session/list", {"cwd": "/nowhere"}))["sessions"] == []

        await client.call("session/load", {"sessionId": session, "cwd": "/", "mcpServers": []})
        stored = [(m.role, m.text) for m in running.store.messages_in(channel.id, "", None, 100)]
        replayed = [
            ("user" if u["sessionUpdate"] == "user_message_chunk" else "agent", u["content"]["text"])
            for u in client.updates(session)
        ]
        assert replayed == stored == [("user", "hello from the phone"), ("agent", "echo: hello from the phone")]

        # a prompt from the client: answered in the client and in the room, once — and quoted
        # there first, however slow the homeserver is to take the quote: held here until the
        # agent has answered the client and its answer had its chance to reach the room
        released = await hold_quotes(running)
        prompting = asyncio.ensure_future(
            client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "from the desk"}]})
        )
        await client.wait_for(lambda: client.text(session).endswith("echo: from the desk"), "the client's answer")
        with contextlib.suppress(AssertionError):  # it must not come: the answer waits for the quote
            await sync_until(owner, lambda: "echo: from the desk" in final_answers(owner, room), timeout=5)
        released.set()
        assert await prompting == {"stopReason": "end_turn"}
        assert client.text(session).endswith("echo: from the desk")
        await sync_until(
            owner,
            lambda: (
                bool(notices_quoting(owner, room, "from the desk"))
                and "echo: from the desk" in final_answers(owner, room)
            ),
        )
        await running.idle()
        # taken while its quote is sent, it is still quoted before its answer
        assert quoted_first(owner, room, "from the desk")
        assert final_answers(owner, room).count("echo: from the desk") == 1
        assert len(notices_quoting(owner, room, "from the desk")) == 1
        assert sum(1 for p in prompts(log) if p.endswith("from the desk")) == 1

        # typed in Matrix: the attached client sees the owner's words and the answer
        await say(owner, room, "typed on the phone")
        await client.wait_for(
            lambda: (
                "typed on the phone" in client.text(session, "user_message_chunk")
                and client.text(session).endswith("echo: typed on the phone")
            ),
            "the client saw the Matrix message and its answer",
        )
    finally:
        await client.close()


async def stored_texts(store, channel_id: str, conversation: str, expected: list[str], timeout: float = 60) -> None:
    """Wait until the conversation's stored texts are `expected`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (found := [m.text for m in store.messages_in(channel_id, conversation, None, 10)]) != expected:
        assert loop.time() < deadline, found
        await asyncio.sleep(0.05)


async def test_a_new_session_is_a_thread_in_the_agents_direct_chat(bridge_factory, tmp_path, owner):
    running, xdg, _ = await attached_bridge(bridge_factory, tmp_path, "--echo-last-line")
    client = await attach(running, xdg)
    try:
        # no direct chat yet: alice makes one, as `!dm alice` would, and invites the owner
        session = (await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["sessionId"]
        channel_id, root = wire.conversation_of(session)
        channel = running.store.channel(channel_id)
        assert channel.direct_agent == "alice" and root.startswith("$")
        await sync_until(owner, lambda: channel.room_id in owner.invited_rooms)
        await owner.join(channel.room_id)
        await sync_until(owner, lambda: any(e.get("event_id") == root for e in events_in(owner, channel.room_id)))
        answer = await client.call(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "in a thread"}]}
        )
        assert answer == {"stopReason": "end_turn"}
        # the answer is stored once the turn's end is written (after the reply the client got)
        await stored_texts(running.store, channel_id, root, ["in a thread", "echo: in a thread"])
        listed = [s["sessionId"] for s in (await client.call("session/list", {}))["sessions"]]
        assert session in listed
        # the next new session: another thread in the same direct chat
        again = (await client.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["sessionId"]
        assert wire.conversation_of(again)[0] == channel_id and again != session
        assert [c.id for c in running.store.channels()] == [channel_id]
    finally:
        await client.close()


async def test_a_permission_is_answered_where_it_is_answered_first(bridge_factory, tmp_path, owner):
    running, xdg, log = await attached_bridge(bridge_factory, tmp_path, "--permission")
    room = await open_dm(owner)
    await say(owner, room, "first")
    await _react_first_keycap(owner, room)  # answered in the room: nothing attached yet
    await running.idle()
    session = wire.session_id(running.store.channel_by_room(room).id, "")
    client = await attach(running, xdg)
    try:
        await client.call("session/resume", {"sessionId": session, "cwd": "/", "mcpServers": []})
        # answered in the client: the room's prompt says where
        client.permission_policy = "allow_once"
        answer = await client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "x"}]})
        assert answer == {"stopReason": "end_turn"} and client.text(session).endswith("allowed")
        await sync_until(owner, lambda: any("Allowed once in Zed" in b for b in _final_bodies(owner, room)))
        # answered in the room: the client's request is withdrawn
        client.permission_policy = None
        await say(owner, room, "third")
        await client.wait_for(lambda: bool(client.held), "the client was asked too")
        (held_id,) = client.held
        await _react_first_keycap(owner, room, number=3)  # (the second was answered in the client)
        await client.wait_for(lambda: held_id in client.cancelled_requests(), "the client's request was withdrawn")
        await running.idle()
        outcomes = [m["result"]["outcome"] for m in _permission_answers(log)]
        assert [o.get("optionId") for o in outcomes] == ["allow_once", "allow_once", "allow_once"]
    finally:
        await client.close()


async def test_a_question_answered_in_the_client_is_shown_answered_in_the_room(bridge_factory, tmp_path, owner):
    xdg, folder, log = tmp_path / "xdg", tmp_path / "bridge0", tmp_path / "coding.jsonl"
    data = xdg / "sidekicks" / "data" / configuration.config_hash(folder / "config.yaml")
    command = [sys.executable, str(CODING), "--log", str(log)]
    running = await bridge_factory({"alice": {"command": command, "title": "Alice"}}, folder=folder, data_dir=data)
    room = await open_dm(owner)
    session = wire.session_id((await stored_channel(running.store, room)).id, "")
    client = await attach(running, xdg)
    try:
        await client.call("session/resume", {"sessionId": session, "cwd": "/", "mcpServers": []})
        client.question_answer = {"action": "accept", "content": {"name": "kumquat", "count": 2}}
        answer = await client.call(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "[[ask]] details"}]}
        )
        assert answer == {"stopReason": "end_turn"}
        assert 'elicited: {"action": "accept", "content": {"count": 2, "name": "kumquat"}}' in client.text(session)
        await sync_until(owner, lambda: any("✅ Answered in Zed" in b for b in _final_bodies(owner, room)))
    finally:
        await client.close()


async def test_cancel_stops_the_turn_and_two_clients_see_everything(bridge_factory, tmp_path, owner):
    running, xdg, log = await attached_bridge(bridge_factory, tmp_path, "--echo-last-line")
    room = await open_dm(owner)
    await say(owner, room, "start")
    await sync_until(owner, lambda: "echo: start" in final_answers(owner, room))
    await running.idle()
    session = wire.session_id(running.store.channel_by_room(room).id, "")
    first, second = await attach(running, xdg), await attach(running, xdg, name="acpx")
    try:
        for client in (first, second):
            await client.call("session/resume", {"sessionId": session, "cwd": "/", "mcpServers": []})
        answer = await first.call(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "both of you"}]}
        )
        assert answer == {"stopReason": "end_turn"}
        await second.wait_for(
            lambda: (
                second.text(session, "user_message_chunk") == "both of you"
                and second.text(session).endswith("echo: both of you")
            ),
            "the other client saw the prompt and its answer",
        )
        assert first.text(session, "user_message_chunk") == ""  # its own words are not sent back
        # cancel: the turn stops as !stop stops it, the prompt answers "cancelled"
        before = len(first.updates(session))
        slow = first.send_soon(
            "session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "[[slow]] go on"}]}
        )
        await first.wait_for(lambda: len(first.updates(session)) > before, "the slow answer's first chunk")
        await first.notify("session/cancel", {"sessionId": session})
        assert await slow == {"stopReason": "cancelled"}
        await running.idle()
        await sync_until(owner, lambda: any("⏹ stopped" in b for b in _final_bodies(owner, room)))
        # the owner redacts the quote of a client's prompt being answered: it stops as a redacted
        # message does, and the store forgets it
        before = len(first.updates(session))
        text = "[[slow]] redact me"
        redacted = first.send_soon("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})
        await first.wait_for(lambda: len(first.updates(session)) > before, "the slow answer's first chunk")
        await sync_until(owner, lambda: bool(notices_quoting(owner, room, text)))
        quote = notices_quoting(owner, room, text)[0]["event_id"]
        # the quote is in the room as soon as the homeserver has it; the store has its event id
        # once the send has come back (a busy machine: later than the owner's client sees it)
        await wait_until(lambda: running.store.message_by_event(quote) is not None, what="the quote stored")
        await owner.room_redact(room, quote)
        assert await redacted == {"stopReason": "cancelled"}
        await running.idle()
        assert running.store.message_by_event(quote) is None
    finally:
        await first.close()
        await second.close()


async def test_the_bridge_restarted_loses_nothing_of_a_clients_prompts(bridge_factory, tmp_path, owner):
    running, xdg, log = await attached_bridge(bridge_factory, tmp_path, "--echo-last-line")
    room = await open_dm(owner)
    await say(owner, room, "before")
    await sync_until(owner, lambda: "echo: before" in final_answers(owner, room))
    channel = running.store.channel_by_room(room)
    session = wire.session_id(channel.id, "")
    client = await attach(running, xdg)
    await client.call("session/resume", {"sessionId": session, "cwd": "/", "mcpServers": []})
    await client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "kept"}]})
    await running.idle()
    # a prompt written down and not yet taken when the bridge stopped (as a kill would leave it)
    pending = {"channel": channel.id, "conversation": "", "text": "written down", "client": "Zed"}
    running.store.set_value(PENDING, json.dumps({"sk-acp-test-1": pending}))
    await running.stop()
    assert await client.ended() is not None  # the client sees its agent go
    await client.close()

    running = await bridge_factory(
        {"alice": agent("--log", str(log), "--echo-last-line", title="Alice")},
        folder=tmp_path / "bridge0",
        data_dir=running.config.data_dir,
    )
    await sync_until(owner, lambda: "echo: written down" in final_answers(owner, room))
    await running.idle()
    client = await attach(running, xdg)
    try:
        await client.call("session/load", {"sessionId": session, "cwd": "/", "mcpServers": []})
        assert [u["content"]["text"] for u in client.updates(session)] == [
            "before",
            "echo: before",
            "kept",
            "echo: kept",
            "written down",
            "echo: written down",
        ]
    finally:
        await client.close()
    # still written down, with its event, after it was taken (a kill before it was forgotten):
    # taken again, it is not answered again
    posted = notices_quoting(owner, room, "written down")[0]["event_id"]
    running.store.set_value(PENDING, json.dumps({"sk-acp-test-1": {**pending, "event": posted}}))
    await running.stop()
    running = await bridge_factory(
        {"alice": agent("--log", str(log), "--echo-last-line", title="Alice")},
        folder=tmp_path / "bridge0",
        data_dir=running.config.data_dir,
    )
    await running.idle()
    assert running.store.get_value(PENDING) == "{}"
    assert sum(1 for p in prompts(log) if p.endswith("written down")) == 1
    assert len(notices_quoting(owner, room, "written down")) == 1


async def test_a_prompt_taken_before_its_quote_was_posted_is_quoted_first_after_a_restart(
    bridge_factory, tmp_path, owner
):
    running, xdg, log = await attached_bridge(bridge_factory, tmp_path, "--echo-last-line")
    room = await open_dm(owner)
    await say(owner, room, "before")
    await sync_until(owner, lambda: "echo: before" in final_answers(owner, room))
    await running.idle()
    channel = running.store.channel_by_room(room)
    # as a kill leaves it: taken under its key, its turn not begun, its quote never posted
    key = "sk-acp-test-2"
    pending = {"channel": channel.id, "conversation": "", "text": "taken early", "client": "Zed", "key": key}
    running.store.set_value(PENDING, json.dumps({key: pending}))
    turns = [("alice", "taken early", False)]
    running.store.turns.take(channel.id, owner.user_id, "taken early", key, turns, "an earlier run")
    await running.stop()
    running = await bridge_factory(
        {"alice": agent("--log", str(log), "--echo-last-line", title="Alice")},
        folder=tmp_path / "bridge0",
        data_dir=running.config.data_dir,
    )
    await sync_until(owner, lambda: "echo: taken early" in final_answers(owner, room))
    await running.idle()
    assert quoted_first(owner, room, "taken early")
    assert len(notices_quoting(owner, room, "taken early")) == 1
    assert final_answers(owner, room).count("echo: taken early") == 1
    assert sum(1 for p in prompts(log) if p.endswith("taken early")) == 1
    assert running.store.get_value(PENDING) == "{}"
    # the stored prompt is found by its quote's event too (a thread opened on it, a redaction)
    quote = notices_quoting(owner, room, "taken early")[0]["event_id"]
    found = running.store.message_by_event(quote)
    assert found is not None and found.text == "taken early"


async def test_an_agent_in_its_sandbox_cannot_reach_the_socket(bridge_factory, tmp_path, owner):
    data, work = tmp_path / "d", tmp_path / "work"
    work.mkdir()
    running = await bridge_factory(
        {"alice": {"command": [sys.executable, str(PRYING)], "cwd": str(work), "sandbox": {"read": [str(tmp_path)]}}},
        data_dir=data,
    )
    socket = running.bridge.attach_server.path
    assert socket is not None and socket.is_socket()
    room = await open_dm(owner)
    await say(owner, room, "PRY" + json.dumps({"connect": [str(socket)], "list": [str(socket.parent)]}) + "PRY")
    await sync_until(owner, lambda: any("pried:" in b for b in final_answers(owner, room)), timeout=120)
    report = json.loads((work / "pried.json").read_text())
    assert not report["connect"][str(socket)]["reached"], report["connect"]
    assert "acp.sock" not in report["list"][str(socket.parent)].get("entries", [])
    # the same socket, from outside the sandbox, does answer
    outside = stdlib_socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
    try:
        outside.connect(str(socket))
    finally:
        outside.close()


# ---- the room's side ---------------------------------------------------------------------------


def _final_bodies(owner, room: str) -> list[str]:
    return [a["body"] for a in answers_in(events_in(owner, room), ALICE) if is_final(a)]


async def _react_first_keycap(owner, room: str, number: int = 1) -> None:
    """The owner reacts 1️⃣ (allow once) to alice's `number`th permission prompt in the room, once
    alice has put her keycaps on it (the bridge then waits for an answer). By its number, not as
    the latest: on a busy machine the owner's client may not have the newest one yet."""
    asks = lambda: [  # noqa: E731
        e
        for e in events_in(owner, room)
        if e.get("sender") == ALICE
        and e.get("type") == "m.room.message"
        and "asks permission" in e["content"].get("body", "")
        and (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"
    ]

    def keycapped() -> bool:
        found = asks()
        if len(found) < number:
            return False
        target = found[number - 1]["event_id"]
        return (
            sum(
                1
                for e in events_in(owner, room)
                if e.get("type") == "m.reaction"
                and e.get("sender") == ALICE
                and e["content"]["m.relates_to"]["event_id"] == target
            )
            == 2
        )

    await sync_until(owner, keycapped)
    target = asks()[number - 1]["event_id"]
    await owner.room_send(
        room, "m.reaction", {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": "1️⃣"}}
    )


def _permission_answers(log: Path) -> list[dict]:
    from helpers import permission_answers

    return permission_answers(log)


ACPX = "acpx@0.19.1"  # "headless CLI client for the Agent Client Protocol", npm


async def installed_acpx(folder: Path) -> Path:
    """acpx installed with npm into a prefix of the test's own; the test is skipped (saying why)
    without npm or the npm registry."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: acpx cannot be tried")
    process = await asyncio.create_subprocess_exec(
        "npm",
        "install",
        "--no-audit",
        "--no-fund",
        "--prefix",
        str(folder),
        ACPX,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    if process.returncode != 0:
        pytest.skip(f"npm could not install {ACPX} (offline?): {output.decode()[-300:]}")
    return folder / "node_modules" / ".bin" / "acpx"


async def test_acpx_drives_sidekicks_acp_and_the_owner_sees_it(bridge_factory, tmp_path, owner):
    acpx = await installed_acpx(tmp_path / "acpx")
    running, xdg, log = await attached_bridge(bridge_factory, tmp_path, "--echo-last-line")
    room = await open_dm(owner)
    command = f"{sys.executable} -m bridge acp -c {running.config.path} --agent alice"
    process = await asyncio.create_subprocess_exec(
        str(acpx),
        "--format",
        "json",
        "--approve-all",
        "--agent",
        command,
        "exec",
        "hello from acpx",
        cwd=str(tmp_path),
        env={**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(xdg)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert process.returncode == 0, err.decode()[-2000:]
    chunks = [
        m["params"]["update"]["content"]["text"]
        for m in lines
        if m.get("method") == "session/update" and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]
    assert "".join(chunks).endswith("echo: hello from acpx")
    assert any(m.get("result", {}).get("stopReason") == "end_turn" for m in lines)
    await sync_until(owner, lambda: "echo: hello from acpx" in final_answers(owner, room))
    assert any(
        e["content"].get("body") == "💻 from acpx: hello from acpx"
        for e in events_in(owner, room)
        if e.get("type") == "m.room.message"
    )
