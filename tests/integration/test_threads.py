"""Threads are conversations (docs/architecture.md "Conversations and threads") end to end: real
Synapse, the owner's matrix-nio client, the real bridge in-process, two scripted agents that log
every JSON-RPC message they receive.

A message in a thread is answered in that thread (with the reply fallback for clients without
threads), in the agent's own session for that thread, told the thread's root and its own
messages but not the main timeline's after the root; an unaddressed message goes to the last
speaker of its conversation.
"""

from __future__ import annotations

from bridge_harness import agent, answers_in
from helpers import ALICE, BOB, answered, in_thread, keycapped_prompt, originals, prompts, received, say, thread_of
from matrix_helpers import events_in, sync_until
from test_channels import CLOSING, group, header


def sessions(log) -> list[str]:
    """The session of each prompt the agent received, in order."""
    return [m["params"]["sessionId"] for m in received(log) if m.get("method") == "session/prompt"]


async def test_a_thread_is_a_conversation_with_its_own_session_context_and_last_speaker(
    bridge_factory, tmp_path, owner
):
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    running = await bridge_factory(
        {
            "alice": agent("--echo-last-line", "--log", str(logs["alice"]), title="Alice"),
            "bob": agent("--echo-last-line", "--log", str(logs["bob"]), title="Bob"),
        }
    )
    room_id = await group(owner, ALICE, BOB)

    # the main timeline: alice, then bob speaks last
    root = await say(owner, room_id, "@alice explain goroutines")
    await answered(owner, room_id, ALICE, 1)
    to_bob = await say(owner, room_id, "@bob and you?")
    await answered(owner, room_id, BOB, 1)
    await running.idle()

    # a thread under the first message: alice answers there
    asked = await say(owner, room_id, "@alice more detail please", **in_thread(root, root))
    alice = await answered(owner, room_id, ALICE, 2)
    answer = alice[1]
    assert answer["content"]["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": asked},
    }  # clients without threads show a reply to the question
    assert answer["final"] == "echo: @alice more detail please"
    assert thread_of(alice[0]) == ""  # the main-timeline answer stays there
    # its edits relate to it alone, their new content has no relation (an edit keeps its thread)
    edits = [
        e
        for e in events_in(owner, room_id)
        if e.get("sender") == ALICE
        and (e["content"].get("m.relates_to") or {}).get("event_id") == answer["event_id"]
        and e["content"]["m.relates_to"].get("rel_type") == "m.replace"
    ]
    assert all(
        set(e["content"]["m.relates_to"]) == {"rel_type", "event_id"}
        and "m.relates_to" not in e["content"]["m.new_content"]
        for e in edits
    )
    await running.idle()

    # the thread's prompt: its root, nothing of the main timeline after it; in a session of its own
    main_session, thread_session = sessions(logs["alice"])
    assert main_session != thread_session
    assert prompts(logs["alice"])[1] == (
        f"{header('general')}\nuser: @alice explain goroutines\n[End of the messages]\n{CLOSING}\n"
        "@alice more detail please"
    )

    # unaddressed: the thread's last speaker (alice) in the thread, the main timeline's (bob) there
    latest = answer["event_id"]
    await say(owner, room_id, "and then?", **in_thread(root, latest))
    alice = await answered(owner, room_id, ALICE, 3)
    await running.idle()
    await say(owner, room_id, "and then?")
    bob = await answered(owner, room_id, BOB, 2)
    await running.idle()
    assert thread_of(alice[2]) == root and alice[2]["final"] == "echo: and then?"
    assert thread_of(bob[1]) == "" and bob[1]["final"] == "echo: and then?"
    assert len(prompts(logs["alice"])) == 3 and len(prompts(logs["bob"])) == 2
    assert sessions(logs["alice"])[2] == thread_session  # the thread's session again
    # alice's session remembers the thread: only the new message, nothing of the main timeline
    assert prompts(logs["alice"])[2] == "and then?"
    # bob's main-timeline session was told what it had not seen there: no thread message
    assert "more detail" not in prompts(logs["bob"])[1] and "and then?" in prompts(logs["bob"])[1]

    # a thread under the owner's own message, where no agent spoke: nobody answers, said there
    await say(owner, room_id, "anyone?", **in_thread(to_bob, to_bob))
    await sync_until(
        owner,
        lambda: any(
            "Nobody answers this one" in e["content"].get("body", "") and thread_of(e) == to_bob
            for e in events_in(owner, room_id)
            if e.get("type") == "m.room.message"
        ),
        timeout=60,
    )
    assert len(prompts(logs["alice"])) == 3 and len(prompts(logs["bob"])) == 2

    # in the store: each message in its conversation, each member's session per conversation
    store = running.store
    channel = store.channel_by_room(room_id)
    assert [m.text for m in store.messages_in(channel.id, root, None, 20)] == [
        "@alice explain goroutines",
        "@alice more detail please",
        "echo: @alice more detail please",
        "and then?",
        "echo: and then?",
    ]
    assert store.member(channel.id, "alice", root).session_id == thread_session
    assert store.member(channel.id, "alice").session_id == main_session


async def test_everything_a_turn_shows_goes_into_its_thread_and_a_number_typed_there_answers(
    bridge_factory, tmp_path, owner
):
    """Plan, tool call, permission prompt (its keycaps on it), the answer: each new message of the
    turn is in the thread; the owner's "1" typed in the thread (its fallback m.in_reply_to on the
    thread's latest event, not the prompt) answers the permission."""
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log), title="Alice")})
    room_id = await group(owner, ALICE, name="work")
    root = await say(owner, room_id, "@alice hello")
    await answered(owner, room_id, ALICE, 1)
    await running.idle()
    before = {e["event_id"] for e in originals(owner, room_id, ALICE)}

    await say(owner, room_id, "[[plan]] [[tool]] [[permission]] write notes", **in_thread(root, root))

    await keycapped_prompt(owner, room_id)
    # Element's fallback points at the thread's latest event as the client knows it: here the
    # answer's first message, not the question (a real reply to the question would name it)
    latest = [e for e in originals(owner, room_id, ALICE) if e["event_id"] not in before][0]
    assert "asks permission" not in latest["content"].get("body", "")
    await say(owner, room_id, "1", **in_thread(root, latest["event_id"]))
    await sync_until(
        owner, lambda: any(a["body"] == "allowed" for a in answers_in(events_in(owner, room_id), ALICE)), timeout=60
    )
    await running.idle()

    new = [e for e in originals(owner, room_id, ALICE) if e["event_id"] not in before]
    bodies = " | ".join(e["content"].get("body", "")[:40] for e in new)
    assert len(new) >= 4, bodies  # plan, tool call, permission prompt, answer
    assert all(thread_of(e) == root for e in new), bodies
    assert all(e["content"]["m.relates_to"].get("is_falling_back") is True for e in new)
    # the "1" answered the question: one prompt only, and not stored as a message
    assert len(prompts(log)) == 2
    channel = running.store.channel_by_room(room_id)
    assert [m.text for m in running.store.messages_in(channel.id, root, None, 20)] == [
        "@alice hello",
        "[[plan]] [[tool]] [[permission]] write notes",
        "allowed",
    ]


async def test_after_a_restart_each_thread_session_is_loaded_or_fresh_as_in_the_main_timeline(
    bridge_factory, tmp_path, owner
):
    """alice loads her sessions (`loadSession`): her thread's session is loaded in the thread;
    bob cannot: a new session, fresh, told the thread's last messages — its root and its own, not
    the main timeline's after the root (docs/architecture.md "Slots and sessions" per conversation)."""
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    agents = {
        "alice": agent(
            "--echo-last-line",
            "--load-session",
            "--state",
            str(tmp_path / "alice-state"),
            "--log",
            str(logs["alice"]),
            title="Alice",
        ),
        "bob": agent("--echo-last-line", "--log", str(logs["bob"]), title="Bob"),
    }
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    room_id = await group(owner, ALICE, BOB, name="restarts")
    root = await say(owner, room_id, "@alice @bob hi")
    await answered(owner, room_id, BOB, 1)
    await running.idle()
    await say(owner, room_id, "@alice @bob in the thread", **in_thread(root, root))
    await answered(owner, room_id, BOB, 2)
    await running.idle()
    alice_main, alice_thread = sessions(logs["alice"])
    bob_main, bob_thread = sessions(logs["bob"])
    assert alice_main != alice_thread and bob_main != bob_thread
    await running.stop()

    running = await bridge_factory(agents, folder=folder)
    await say(owner, room_id, "@alice @bob again", **in_thread(root, root))
    bob = await answered(owner, room_id, BOB, 3)
    await running.idle()
    assert thread_of(bob[2]) == root and bob[2]["final"] == "echo: @alice @bob again"
    loads = [m["params"]["sessionId"] for m in received(logs["alice"]) if m.get("method") == "session/load"]
    assert loads == [alice_thread] and sessions(logs["alice"])[2] == alice_thread
    bob_fresh = sessions(logs["bob"])[2]
    assert bob_fresh not in (bob_main, bob_thread)
    told = prompts(logs["bob"])[2]
    assert told.startswith(header("restarts") + "\nuser: @alice @bob hi\nuser: @alice @bob in the thread\n")
    assert "alice: echo: @alice @bob in the thread" in told and "bob: echo: @alice @bob in the thread" in told
    assert "echo: @alice @bob hi" not in told  # the main timeline's answers after the root
    assert told.endswith(f"{CLOSING}\n@alice @bob again")

    # the main timeline: its own sessions (alice's loaded, bob's new), apart from the thread's
    await say(owner, room_id, "@alice @bob main again")
    await answered(owner, room_id, BOB, 4)
    await running.idle()
    assert sessions(logs["alice"])[3] == alice_main
    assert sessions(logs["bob"])[3] not in (bob_main, bob_thread, bob_fresh)


async def test_stop_in_a_thread_stops_that_threads_answer_only(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log), title="Alice")})
    room_id = await group(owner, ALICE, name="stops")
    root = await say(owner, room_id, "@alice hello")
    other = await say(owner, room_id, "another topic")
    await answered(owner, room_id, ALICE, 2)
    await running.idle()

    await say(owner, room_id, "[[slow]] count slowly", **in_thread(root, root))
    await sync_until(
        owner,
        lambda: (
            len(answers_in(events_in(owner, room_id), ALICE)) == 3
            and "echo" in answers_in(events_in(owner, room_id), ALICE)[2]["body"]
        ),
        timeout=60,
    )
    # a !stop in another thread: nothing is answered there, said there; the answer goes on
    await say(owner, room_id, "!stop", **in_thread(other, other))
    await sync_until(
        owner,
        lambda: any(
            e["content"].get("body") == "Nothing is being answered in this thread." and thread_of(e) == other
            for e in events_in(owner, room_id)
            if e.get("type") == "m.room.message"
        ),
        timeout=60,
    )
    assert running.bridge.channels.portals[room_id].current is not None
    # in the answer's thread it stops it
    await say(owner, room_id, "!stop", **in_thread(root, root))
    await sync_until(
        owner, lambda: answers_in(events_in(owner, room_id), ALICE)[2]["body"].endswith("⏹ stopped"), timeout=60
    )
    await running.idle()
    assert [m["stopReason"] for m in received(log) if m.get("scripted") == "prompt ended"][-1] == "cancelled"


async def test_a_thread_on_an_answer_is_told_the_question_that_led_to_it(bridge_factory, tmp_path, owner):
    """docs/using.md "Threads": a thread's new session is told the main timeline's messages up
    to and including its root — the owner's question, then the answer the thread hangs on —
    and nothing of the main timeline after the root."""
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    running = await bridge_factory(
        {
            "alice": agent("--echo-last-line", "--log", str(logs["alice"]), title="Alice"),
            "bob": agent("--echo-last-line", "--log", str(logs["bob"]), title="Bob"),
        }
    )
    room_id = await group(owner, ALICE, BOB)
    await say(owner, room_id, "@bob hello")
    await answered(owner, room_id, BOB, 1)
    await say(owner, room_id, "@alice what is 2+2?")
    [answer] = await answered(owner, room_id, ALICE, 1)
    await say(owner, room_id, "@bob after the root")  # later in the main timeline: not told
    await answered(owner, room_id, BOB, 2)
    await running.idle()

    await say(owner, room_id, "and what is 3+3?", **in_thread(answer["event_id"], answer["event_id"]))
    await answered(owner, room_id, ALICE, 2)
    await running.idle()
    main_session, thread_session = sessions(logs["alice"])
    assert main_session != thread_session
    assert prompts(logs["alice"])[1] == (
        f"{header('general')}\nuser: @bob hello\nbob: echo: @bob hello\nuser: @alice what is 2+2?\n"
        f"alice: echo: @alice what is 2+2?\n[End of the messages]\n{CLOSING}\nand what is 3+3?"
    )
