"""Answers end to end (docs/architecture.md "Who answers", "Streaming, permissions and cancel",
"Faults"): permissions, cancelling, whose turn it is, long answers, typing, a crash mid-answer.

Real Synapse, the owner's matrix-nio client, the real bridge in-process, scripted agents that log
every JSON-RPC message they receive (`--log`).
"""

from __future__ import annotations

import importlib.util
import json

import nio
import yaml
from bridge_harness import SCRIPTED, agent, answers_in
from helpers import group, is_final, joined, permission_answers, received, say
from matrix_helpers import caught_up, events_in, sync_until

from bridge.channels.base.stream import SPLIT_WEIGHT
from bridge.matrix.intent import weight

ALICE = "@sk_alice:localhost"


def methods(log_path) -> list[str]:
    return [m.get("method") for m in received(log_path) if m.get("method")]


def prompt_count(log_path) -> int:
    return methods(log_path).count("session/prompt")


async def room_with(owner: nio.AsyncClient, puppet_id: str = ALICE, name: str = "general") -> str:
    return await group(owner, puppet_id, name=name)


async def react(client: nio.AsyncClient, room_id: str, event_id: str, key: str) -> None:
    response = await client.room_send(
        room_id, "m.reaction", {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
    )
    assert isinstance(response, nio.RoomSendResponse), response


def messages(owner, room_id, sender=ALICE) -> list[dict]:
    """`sender`'s messages with edits applied (notices included)."""
    return answers_in(events_in(owner, room_id), sender)


def answers(owner, room_id, sender=ALICE) -> list[dict]:
    """The agent's answers: not notices, not permission prompts."""
    return [
        m
        for m in messages(owner, room_id, sender)
        if m["msgtype"] != "m.notice" and "asks permission" not in m["history"][0]
    ]


def prompts_for_permission(owner, room_id) -> list[dict]:
    return [m for m in messages(owner, room_id) if "asks permission" in m["history"][0]]


async def wait_final(owner, room_id, count=1, timeout=60) -> list[dict]:
    def done():
        found = answers(owner, room_id)
        return len(found) >= count and all(is_final(a) for a in found[:count])

    await sync_until(owner, done, timeout=timeout)
    return answers(owner, room_id)


async def decided(owner, room_id, log, answer: str, mark: str, outcome: dict) -> None:
    """The permission question was decided: the answer ends as `answer`, the question shows
    `mark`, and the agent got `outcome`, once."""
    found = await wait_final(owner, room_id)
    assert found[0]["body"] == answer
    await sync_until(owner, lambda: prompts_for_permission(owner, room_id)[0]["body"].endswith(mark))
    assert [r["result"]["outcome"] for r in permission_answers(log)] == [outcome]


def prompts_ended(log_path) -> list[str]:
    """The stop reasons of the agent's finished prompts, in order (the scripted agent logs them)."""
    return [m["stopReason"] for m in received(log_path) if m.get("scripted") == "prompt ended"]


def reactions_on(owner, room_id, event_id, sender=ALICE) -> list[str]:
    return [
        e["content"]["m.relates_to"]["key"]
        for e in events_in(owner, room_id)
        if e.get("type") == "m.reaction"
        and e.get("sender") == sender
        and (e["content"].get("m.relates_to") or {}).get("event_id") == event_id
    ]


def appservice_with(homeserver, **settings) -> dict:
    """The base config's appservice section plus `settings` (e.g. permission_timeout)."""
    base = yaml.safe_load(homeserver.base_config_path.read_text())["appservice"]
    return {**base, "registration": str(homeserver.registration_path), **settings}


async def permission_prompt(owner, room_id) -> dict:
    """Wait for the puppet's permission prompt with its two reactions; return it."""

    def shown():
        found = prompts_for_permission(owner, room_id)
        return found and len(reactions_on(owner, room_id, found[0]["event_id"])) == 2

    await sync_until(owner, shown)
    return prompts_for_permission(owner, room_id)[0]


# ---- permissions -----------------------------------------------------------------------------


async def test_permission_allowed_by_the_owners_reaction(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    await bridge_factory({"alice": agent("--log", str(log), title="Alice")})
    room_id = await room_with(owner)
    await say(owner, room_id, "[[permission]] please write notes")
    prompt = await permission_prompt(owner, room_id)
    body = prompt["body"]
    assert "Alice asks permission: ✏️ Write notes.txt" in body
    assert "1. ✅ Allow once" in body and "2. ❌ Reject" in body
    assert reactions_on(owner, room_id, prompt["event_id"]) == ["1\ufe0f\u20e3", "2\ufe0f\u20e3"]
    # while it waits, the answer's status line says so
    await sync_until(
        owner,
        lambda: any(
            "waiting for your permission: Write notes.txt" in b for a in answers(owner, room_id) for b in a["history"]
        ),
    )
    assert not is_final(answers(owner, room_id)[0])

    await react(owner, room_id, prompt["event_id"], "1\ufe0f\u20e3")
    await decided(owner, room_id, log, "allowed", "✅ Allowed once", {"outcome": "selected", "optionId": "allow_once"})


async def test_permission_rejected_by_a_numbered_reply(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log))})
    room_id = await room_with(owner)
    await say(owner, room_id, "[[permission]] write notes")
    await permission_prompt(owner, room_id)
    await say(owner, room_id, "2")
    found = await wait_final(owner, room_id)
    assert found[0]["body"] == "rejected"
    await sync_until(owner, lambda: prompts_for_permission(owner, room_id)[0]["body"].endswith("❌ Rejected"))
    # the "2" answered the question: it is neither a prompt nor stored as a message
    assert prompt_count(log) == 1
    channel = running.store.channel_by_room(room_id)
    # stored right after its final edit
    await sync_until(owner, lambda: len(running.store.last_messages(channel.id, 10)) == 2)
    assert [m.text for m in running.store.last_messages(channel.id, 10)] == ["[[permission]] write notes", "rejected"]


async def test_a_strangers_reaction_and_reply_are_ignored_the_owners_counts(
    homeserver, bridge_factory, tmp_path, owner, stranger
):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log))})
    room_id = await room_with(owner)
    await owner.room_invite(room_id, homeserver.stranger_id)
    assert isinstance(await stranger.join(room_id), nio.JoinResponse)
    await say(owner, room_id, "[[permission]] write notes")
    prompt = await permission_prompt(owner, room_id)
    await react(stranger, room_id, prompt["event_id"], "1\ufe0f\u20e3")
    marker = await say(stranger, room_id, "1")
    # both handled (in order): had either counted, the question would be answered "allow"
    # now, and the owner's "reject" below could not change it
    await running.handled(marker)
    await caught_up(owner, room_id)
    # still waiting: no decision, no answer, the agent got no reply
    assert not prompts_for_permission(owner, room_id)[0]["body"].endswith(("✅ Allowed once", "❌ Rejected"))
    assert prompts_for_permission(owner, room_id)[0]["edits"] == 0
    assert not is_final(answers(owner, room_id)[0])
    assert not permission_answers(log)

    await react(owner, room_id, prompt["event_id"], "2\ufe0f\u20e3")
    await decided(owner, room_id, log, "rejected", "❌ Rejected", {"outcome": "selected", "optionId": "reject_once"})


async def test_unanswered_permission_times_out_as_cancelled(homeserver, bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    await bridge_factory(
        {"alice": agent("--log", str(log))}, appservice=appservice_with(homeserver, permission_timeout=1)
    )
    room_id = await room_with(owner)
    await say(owner, room_id, "[[permission]] write notes")
    # no wait for the question first: with 1 s to answer, it may be over before it is seen
    await decided(owner, room_id, log, "⏹ stopped", "⏱ No answer: cancelled", {"outcome": "cancelled"})


# ---- cancel ------------------------------------------------------------------------------------
# An answer "held" by the scripted agent streams its first part, then waits until the test
# creates its release file: it is in progress for exactly as long as the test needs, however
# slow the machine. An answer whose file is never created can only end by being cancelled.

HELD = "tell me a long story"


async def _held_answer_started(owner, room_id, release, text: str = HELD) -> str:
    """Send a prompt whose answer streams its first half, then waits for `release`."""
    prompt_id = await say(owner, room_id, f"[[chunks:2]] [[hold:{release}]] {text}")
    await sync_until(
        owner, lambda: any(a["body"].startswith("✍️") and "echo" in a["body"] for a in answers(owner, room_id))
    )
    return prompt_id


async def test_redacting_the_prompt_cancels_its_answer(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    await bridge_factory({"alice": agent("--log", str(log))})
    room_id = await room_with(owner)
    prompt_id = await _held_answer_started(owner, room_id, tmp_path / "never")
    assert isinstance(await owner.room_redact(room_id, prompt_id), nio.RoomRedactResponse)
    found = await wait_final(owner, room_id)
    # the agent could only end it because it was cancelled: cut after its first part
    assert found[0]["body"].startswith("echo") and found[0]["body"].endswith("\n\n⏹ stopped")
    assert HELD not in found[0]["body"]
    assert "session/cancel" in methods(log) and prompts_ended(log) == ["cancelled"]


async def test_a_queued_message_redacted_is_never_answered(bridge_factory, tmp_path, owner):
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await bridge_factory({"alice": agent("--log", str(log))})
    try:
        room_id = await room_with(owner)
        await _held_answer_started(owner, room_id, release)
        queued = await say(owner, room_id, "forget this one")
        redaction = await owner.room_redact(room_id, queued)
        assert isinstance(redaction, nio.RoomRedactResponse), redaction
        await say(owner, room_id, "and this one?")
        await running.handled(redaction.event_id)  # while the first answer is still held
        release.touch()
        found = await wait_final(owner, room_id, count=2)
        assert not found[0]["body"].endswith("stopped")  # the answer in progress was not cut
        assert found[0]["body"].endswith(HELD)
        assert found[1]["body"].startswith("echo: ") and found[1]["body"].endswith("and this one?")
        sent = [
            "".join(b.get("text", "") for b in m["params"]["prompt"])
            for m in received(log)
            if m.get("method") == "session/prompt"
        ]
        assert len(sent) == 2 and not any("forget this one" in text for text in sent)
        await running.idle()  # every turn is over: an answer to the redacted one would be out
        await caught_up(owner, room_id)
        assert len(answers(owner, room_id)) == 2
        channel = running.store.channel_by_room(room_id)
        assert "forget this one" not in [m.text for m in running.store.last_messages(channel.id, 10)]
    finally:
        release.touch()


async def test_a_stop_reaction_on_the_answer_cancels_it(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    await bridge_factory({"alice": agent("--log", str(log))})
    room_id = await room_with(owner)
    await _held_answer_started(owner, room_id, tmp_path / "never")
    await react(owner, room_id, answers(owner, room_id)[0]["event_id"], "🛑")
    found = await wait_final(owner, room_id)
    assert found[0]["body"].startswith("echo") and found[0]["body"].endswith("\n\n⏹ stopped")
    assert HELD not in found[0]["body"]
    assert "session/cancel" in methods(log) and prompts_ended(log) == ["cancelled"]
    # the next message is answered as usual
    await say(owner, room_id, "still there?")
    found = await wait_final(owner, room_id, count=2)
    assert found[1]["body"] == "echo: still there?"


# ---- whose turn it is ----------------------------------------------------------------------------


async def test_an_agent_busy_in_its_direct_chat_is_said_so_not_as_a_channel(bridge_factory, tmp_path, owner):
    """The DM with an agent is a direct channel stored under the agent's name; the waiting note
    in another room says "your direct chat", never "#alice", a channel the owner never made."""
    release = tmp_path / "release"
    await bridge_factory({"alice": agent(title="Alice")})
    created = await owner.room_create(is_direct=True, invite=[ALICE], preset=nio.RoomPreset.trusted_private_chat)
    assert isinstance(created, nio.RoomCreateResponse), created
    direct = created.room_id
    await sync_until(owner, lambda: joined(owner, direct, ALICE))
    other = await room_with(owner, name="second")
    await _held_answer_started(owner, direct, release, "a long one")
    await say(owner, other, "short one")
    await sync_until(owner, lambda: any("this channel is next" in a["body"] for a in answers(owner, other)))
    release.touch()
    done = await wait_final(owner, other)
    assert done[0]["history"][0] == "⏳ Alice is getting ready… (answering in your direct chat; this channel is next)"
    await wait_final(owner, direct)


async def test_a_message_for_an_agent_busy_elsewhere_waits_and_says_whose_turn(bridge_factory, tmp_path, owner):
    release = tmp_path / "release"
    await bridge_factory({"alice": agent(title="Alice")})
    try:
        first = await room_with(owner, name="first")
        second = await room_with(owner, name="second")
        await _held_answer_started(owner, first, release, "a long one")
        await say(owner, second, "short one")
        await sync_until(owner, lambda: any("this channel is next" in a["body"] for a in answers(owner, second)))
        release.touch()
        done_second = await wait_final(owner, second)
        done_first = await wait_final(owner, first)
        history = done_second[0]["history"]
        assert history[0] == "⏳ Alice is getting ready… (answering in #first; this channel is next)"
        # when its turn came the channel said so, before the answer itself
        assert any(b.startswith("⏳ Alice is getting ready…") and "answering in" not in b for b in history[1:])
        assert done_second[0]["body"] == "echo: short one"
        assert done_first[0]["body"].startswith("echo: ") and done_first[0]["body"].endswith("a long one")

        def timestamps(room_id, answer_id):
            return [
                e["origin_server_ts"]
                for e in events_in(owner, room_id)
                if e.get("event_id") == answer_id
                or (e["content"].get("m.relates_to") or {}).get("event_id") == answer_id
            ]

        # the second answer got its text only after the first was finished
        first_end = max(timestamps(first, done_first[0]["event_id"]))
        second_text = [
            e["origin_server_ts"]
            for e in events_in(owner, second)
            if (e["content"].get("m.relates_to") or {}).get("event_id") == done_second[0]["event_id"]
            and "echo" in e["content"].get("m.new_content", {}).get("body", "")
        ]
        assert second_text and min(second_text) >= first_end
    finally:
        release.touch()


async def test_a_waiting_answer_cancelled_by_redaction_stops_at_once(bridge_factory, tmp_path, owner):
    log, release = tmp_path / "alice.log", tmp_path / "release"
    await bridge_factory({"alice": agent("--log", str(log), title="Alice")})
    try:
        first = await room_with(owner, name="first")
        second = await room_with(owner, name="second")
        await _held_answer_started(owner, first, release, "a long one")
        waiting = await say(owner, second, "never mind")
        await sync_until(owner, lambda: any("this channel is next" in a["body"] for a in answers(owner, second)))
        await owner.room_redact(second, waiting)
        stopped = await wait_final(owner, second)
        assert stopped[0]["body"] == "⏹ stopped"
        # "at once": the first answer cannot end before `release` exists, and it is still going
        assert not is_final(answers(owner, first)[0])
        release.touch()
        done = await wait_final(owner, first)
        assert done[0]["body"].endswith("a long one")
        assert prompt_count(log) == 1  # "never mind" never reached the agent
        # the agent is free again for the second channel
        await say(owner, second, "now then")
        found = await wait_final(owner, second, count=2)
        assert found[1]["body"].startswith("echo: ") and found[1]["body"].endswith("now then")
    finally:
        release.touch()


# ---- long answers ---------------------------------------------------------------------------------


def scripted_text(size: int) -> str:
    """The scripted agent's generated answer of `size` characters."""
    spec = importlib.util.spec_from_file_location("scripted_agent", SCRIPTED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generated_text(size)


async def test_a_40000_character_answer_arrives_in_three_messages(bridge_factory, tmp_path, owner):
    running = await bridge_factory({"alice": agent()})
    room_id = await room_with(owner)
    await say(owner, room_id, "[[size:40000]]")
    expected = scripted_text(40000)
    # 40,714 in weight (each line's newline is 2 escaped in JSON): three messages of at most 15,000
    await sync_until(
        owner,
        lambda: len(answers(owner, room_id)) == 3 and "".join(a["body"] for a in answers(owner, room_id)) == expected,
    )
    found = answers(owner, room_id)
    assert all(weight(a["body"]) <= SPLIT_WEIGHT for a in found)
    assert all(a["edits"] <= 100 for a in found)
    ids = {a["event_id"] for a in found}
    edits = [e for e in events_in(owner, room_id) if (e["content"].get("m.relates_to") or {}).get("event_id") in ids]
    assert edits and max(len(json.dumps(e).encode("utf-8")) for e in edits) < 64 * 1024
    channel = running.store.channel_by_room(room_id)
    await sync_until(owner, lambda: any(m.role == "agent" for m in running.store.last_messages(channel.id, 10)))
    stored = [m for m in running.store.last_messages(channel.id, 10) if m.role == "agent"]
    assert len(stored) == 1 and stored[0].text == expected
    assert stored[0].event_ids == tuple(a["event_id"] for a in found)


# ---- typing -----------------------------------------------------------------------------------------


async def test_the_puppet_types_while_it_works_and_stops_after(bridge_factory, tmp_path, owner):
    release = tmp_path / "release"
    await bridge_factory({"alice": agent()})
    try:
        room_id = await room_with(owner)

        def typing() -> list[str]:
            room = owner.rooms.get(room_id)
            return list(room.typing_users) if room is not None else []

        assert ALICE not in typing()
        await say(owner, room_id, f"[[chunks:2]] [[hold:{release}]] take your time")
        await sync_until(owner, lambda: ALICE in typing())
        assert not any(is_final(a) for a in answers(owner, room_id))  # typing while working
        release.touch()
        await wait_final(owner, room_id)
        await sync_until(owner, lambda: ALICE not in typing())
    finally:
        release.touch()


# ---- an agent silent for a while ---------------------------------------------------------------


async def test_an_agent_silent_for_a_while_is_said_so_in_the_status(bridge_factory, tmp_path, monkeypatch, owner):
    # an agent that holds after its first part (OpenCode retrying its model showed nothing for
    # 80 s): the status says how long nothing came and how to stop it; the answer then ends as
    # usual. SILENT_AFTER is 30 s in use; 0.5 s here.
    from bridge.channels.turns import silence

    monkeypatch.setattr(silence, "SILENT_AFTER", 0.5)
    release = tmp_path / "release"
    await bridge_factory({"alice": agent()})
    try:
        room_id = await room_with(owner)
        await say(owner, room_id, f"[[chunks:2]] [[hold:{release}]] slowly")

        def silent() -> bool:
            found = answers(owner, room_id)
            return bool(found) and found[0]["body"].startswith(
                "⏳ still working, nothing received for 0.5 s — `!stop` to cancel\n\necho: "
            )

        await sync_until(owner, silent)
        release.touch()
        [answer] = await wait_final(owner, room_id)
        assert answer["body"] == "echo: [[chunks:2]] [[hold:" + str(release) + "]] slowly"
    finally:
        release.touch()


# ---- crash ----------------------------------------------------------------------------------------


async def test_a_crash_mid_answer_says_so_and_the_next_message_restarts_the_agent(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    # the restarted agent's fresh session is told the past
    # (docs/architecture.md "Slots and sessions"): cut short there, the crash directive is not
    # repeated
    running = await bridge_factory({"alice": agent("--log", str(log))}, limits={"context_chars": 10})
    room_id = await room_with(owner)

    def crash_notices() -> list[str]:
        return [m["body"] for m in messages(owner, room_id) if m["msgtype"] == "m.notice"]

    await say(owner, room_id, "go on then [[crash]]")
    await sync_until(owner, lambda: any("echo" in a["body"] for a in answers(owner, room_id)))
    # how soon the notice comes is measured by tests/bench (bench_faults: crash → notice)
    await sync_until(owner, lambda: crash_notices())
    notice = crash_notices()[0]
    assert "exit code 3" in notice and "crashing mid-answer on purpose" in notice
    found = await wait_final(owner, room_id)
    assert "interrupted" in found[0]["body"] and "exit code 3" in found[0]["body"]
    await running.idle()  # the turns are over: answers stored, nothing more to come
    channel = running.store.channel_by_room(room_id)
    assert [m.role for m in running.store.last_messages(channel.id, 10)] == ["user"]  # cut: not stored

    await say(owner, room_id, "are you back?")
    found = await wait_final(owner, room_id, count=2)
    assert found[1]["body"].endswith("are you back?") and found[1]["body"].startswith("echo: ")
    assert prompt_count(log) == 2 and methods(log).count("initialize") == 2


# ---- the permission prompt's text (no homeserver needed) -----------------------------------------


def test_permission_prompt_shows_input_locations_and_numbered_options():
    from acp import Update
    from bridge.channels.turns.turns import RunningTurn
    from bridge.coding.render import INPUT_CHARS, permission

    run = RunningTurn(None, "alice", None)
    run.note_tool_call(
        Update(
            "tool_call",
            tool_call_id="c1",
            title="Edit main.py",
            raw={
                "toolCallId": "c1",
                "title": "Edit main.py",
                "kind": "edit",
                "rawInput": {"path": "main.py", "text": "x" * 1000},
                "locations": [{"path": "main.py", "line": 3}, {"path": "b.py"}],
            },
        )
    )
    run.note_tool_call(
        Update(
            "tool_call_update",
            tool_call_id="c1",
            status="in_progress",
            raw={"toolCallId": "c1", "status": "in_progress"},
        )
    )
    assert run.tool_calls["c1"]["title"] == "Edit main.py"  # an update without title keeps it
    shown, _ = permission(
        "Alice",
        {**run.tool_calls["c1"], "toolCallId": "c1"},
        [
            {"optionId": "a", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "aa", "name": "Always allow", "kind": "allow_always"},
            {"optionId": "r", "name": "Reject <now>", "kind": "reject_once"},
        ],
    )
    body, html = shown.body, shown.html
    lines = body.splitlines()
    assert lines[0] == "🔐 Alice asks permission: ✏️ Edit main.py"
    assert lines[1].startswith('Input: {"path": "main.py", "text": "xxx') and lines[1].endswith("…")
    assert len(lines[1]) == len("Input: ") + INPUT_CHARS
    assert lines[2] == "Where: main.py:3, b.py"
    assert lines[4:7] == ["1. ✅ Allow once", "2. ✅ Allow always — Always allow", "3. ❌ Reject once — Reject <now>"]
    assert "Reject &lt;now&gt;</li>" in html and "<now>" not in html
